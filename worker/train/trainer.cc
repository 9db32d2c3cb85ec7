#include "worker/train/trainer.h"

#include <algorithm>
#include <numeric>
#include <thread>

#include "shared/checkpoint/checkpoint.h"
#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "shared/util/log.h"
#include "worker/backend/backend.h"
#include "worker/backend/cpu_binding.h"
#include "worker/backend/replica.h"
#include "worker/data/dataset.h"
#include "worker/data/open.h"
#include "worker/data/prefetch.h"
#include "worker/data/sampler.h"
#include "worker/exchange/exchange.h"
#include "worker/model/memory_plan.h"
#include "worker/model/model.h"
#include "worker/model/model_file.h"
#include "worker/report/metrics_file.h"
#include "worker/report/metrics_sink.h"
#include "worker/report/own_figures.h"
#include "worker/report/progress.h"
#include "worker/report/tensorboard.h"
#include "worker/train/batch_fit.h"
#include "worker/train/checkpoints.h"
#include "worker/train/evaluation.h"
#include "worker/train/run_model.h"
#include "worker/train/train_input.h"

namespace pstrain {
namespace {

constexpr double kMiB = 1048576.0;


// One worker's training run: the parts of train(), in the order they happen.
class Trainer {
 public:
  Trainer(const TrainOptions& o, const std::atomic<bool>* stop_requested)
      : o_(o), chief_(o.index == 0), tag_("w" + std::to_string(o.index) + ": "), stop_requested_(stop_requested) {}

  TrainSummary run(const ExchangeFactory& make_exchange) {
    std::string why;
    if (o_.bind_cpu >= 0 && !may_run_on(o_.bind_cpu, &why)) throw UsageError(why);  // before any work
    open_data();
    plan_device();
    connect(make_exchange);
    loop();
    return finish();
  }

 private:
  // The datasets, this worker's share of every global step, and the job's length.
  void open_data() {
    train_data_ = open_training_data(o_.data);
    std::unique_ptr<Dataset> test_data;
    if (chief_) test_data = open_test_data(o_.data, train_data_->num_classes());  // its errors first
    shares_ = o_.worker_batches;
    share_ = shares_[static_cast<size_t>(o_.index)];
    global_batch_ = std::accumulate(shares_.begin(), shares_.end(), uint64_t{0},
                                    [](uint64_t sum, int b) { return sum + static_cast<uint64_t>(b); });
    steps_per_epoch_ = ShardSampler(train_data_->size(), o_.index, shares_, share_, o_.seed, o_.shuffle).steps_per_epoch();
    total_steps_ = steps_per_epoch_ * static_cast<uint64_t>(o_.epochs);
    if (o_.steps > 0) total_steps_ = std::min(total_steps_, static_cast<uint64_t>(o_.steps));
    evaluation_ = std::make_unique<Evaluation>(o_.evaluation, o_.data, std::move(test_data), train_data_->num_classes(),
                                               steps_per_epoch_, total_steps_, &summary_);
    if (chief_) open_metrics();
    if (!o_.tensorboard_dir.empty()) {  // every worker's own breakdown, in DIR/w<i>
      own_figures_ =
          std::make_unique<OwnStepFigures>(o_.tensorboard_dir, o_.index, o_.progress.log_every, steps_per_epoch_);
    }
    const std::string refusal = augment_refusal(o_.augment, train_data_->sample_shape());
    if (!refusal.empty()) throw UsageError(refusal);
    if (o_.augment.any()) PSLOG(INFO) << tag_ << "augmenting training images: " << o_.augment.text();
    TrainInputOptions in;
    in.tables = o_.embeddings;
    in.total_steps = total_steps_;
    in.huber_delta = o_.huber_delta;
    in.tag = tag_;
    input_ = make_train_input(in, *train_data_);
    input_shape_ = input_->shape();
    const bool equal = std::all_of(shares_.begin(), shares_.end(), [&](int b) { return b == share_; });
    PSLOG(INFO) << tag_ << "data " << training_data_source(o_.data) << ": " << train_data_->size() << " training records; each global step "
                << "takes " << global_batch_ << " of them"
                << (equal ? " (" + std::to_string(o_.num_workers) + " x " + std::to_string(share_) + ")" : "")
                << ", this worker's " << share_ << " from position " << shard_offset() << "; " << steps_per_epoch_
                << " steps per epoch";
  }

  // The chief's metrics sinks; a path that cannot be written fails here, before any step.
  void open_metrics() {
    if (!o_.metrics_file.empty()) {
      metrics_.add(std::make_unique<MetricsFile>(o_.metrics_file, "--metrics-file"));
      PSLOG(INFO) << tag_ << "metrics to " << o_.metrics_file;
    }
    if (!o_.tensorboard_dir.empty()) {  // DIR/chief: TensorBoard names the run by its directory
      metrics_.add(open_tensorboard(chief_run_dir(o_.tensorboard_dir), "--tensorboard-dir"));
    }
    if (!metrics_.empty()) evaluation_->set_metrics(&metrics_);
  }

  uint64_t shard_offset() const {
    return std::accumulate(shares_.begin(), shares_.begin() + o_.index, uint64_t{0},
                           [](uint64_t sum, int b) { return sum + static_cast<uint64_t>(b); });
  }

  // The backend, the micro-batch (--batch-size auto: from the memory plan), and the replica.
  void plan_device() {
    backend_ = make_backend(o_.backend);
    if (o_.placement) PSLOG(INFO) << tag_ << o_.placement(backend_->name());
    size_t input_floats = 1;
    for (size_t d : input_shape_) input_floats *= d;
    const int input_dim = static_cast<int>(input_floats);
    const int classes = train_data_->num_classes();
    model_description_ = describe_run_model(o_, classes, input_shape_, *input_);
    const Loss loss = o_.data.loss;
    Network network(model_description_.spec, input_shape_, classes,
                    loss == Loss::kSoftmax ? "" : train_data_->target_source());
    batch_ = fit_batch(batch_request(), *backend_, network);
    sampler_ = std::make_unique<ShardSampler>(train_data_->size(), o_.index, shares_, batch_.micro, o_.seed, o_.shuffle);
    const int max_batch = std::max(batch_.micro, evaluation_->evaluates() ? batch_.eval_batch : 1);
    const MemoryPlan plan = plan_memory(*backend_, o_.recompute, network, max_batch);
    backend_->reserve_batch(max_batch);  // the plan counted it as workspace
    PSLOG(INFO) << tag_ << "device " << backend_->name() << "; memory plan: " << plan.text();
    check_memory_limit(plan, *backend_, o_.backend.gpu_memory_limit_mib);
    if (chief_) PSLOG(INFO) << tag_ << "model: " << network.summary() << (o_.recompute ? " (--recompute)" : "");
    model_ = std::make_unique<Model>(std::move(network), max_batch, o_.recompute, *backend_);
    model_->set_label_smoothing(o_.label_smoothing);
    if (loss != Loss::kSoftmax) {  // the targets of each micro-batch go to the backend
      model_->set_loss(loss, o_.huber_delta);
      targets_ = backend_->allocate(static_cast<size_t>(max_batch) * static_cast<size_t>(classes));
    }
    total_ = model_->layout().total();
    replica_ = std::make_unique<Replica>(*backend_, total_, static_cast<size_t>(max_batch) * static_cast<size_t>(input_dim));
    evaluation_->set_model(*model_, *replica_, batch_.eval_batch);
    input_->attach(*backend_, *model_, batch_.micro_batches, max_batch, *evaluation_);
    PSLOG(INFO) << tag_ << "model " << total_ << " parameters; allocated " << fixed(backend_->bytes_allocated() / kMiB, 2)
                << " MiB on " << backend_->name() << " (plan " << fixed(plan.total(), 2) << " MiB)"
                << (backend_->host_accessible() ? std::string()
                                                : "; measured " + fixed(backend_->device_bytes_used() / kMiB, 2) +
                                                      " MiB by cudaMemGetInfo");
  }

  // The exchange (PS or all-reduce), the first parameters, and the step to start from.
  void connect(const ExchangeFactory& make_exchange) {
    exchange_ = make_exchange(total_, *replica_);
    exchange_->set_idle_hook([this] {
      if (prefetch_) prefetch_->wake_reader();
    });
    stage_gradient_ = exchange_->stages_gradient();
    input_->connect(exchange_->row_source());
    init_run_model(o_, *model_, replica_->host_params(), chief_, tag_);
    checkpoints_ = std::make_unique<ChiefCheckpoints>(o_.checkpoint, chief_, o_.checkpoint_shards, model_->layout(),
                                                      model_description_, total_steps_, stop_requested_);
    checkpoints_->set_state(model_->network().state_layout(), model_->state());
    first_step_ = exchange_->start(replica_->host_params(), total_steps_);
    if (checkpoints_->enabled() && o_.checkpoint.resume && first_step_ > 0) {
      checkpoints_->check_resumed(first_step_);
    }
    if (o_.batchnorm_global && o_.num_workers > 1 && !model_->state().empty()) {  // one worker: its own batch is global
      StatsExchange* stats = exchange_->stats_exchange();
      PSTRAIN_CHECK(stats != nullptr);  // sync and allreduce have one (options_from_job: global only there)
      model_->set_stats_exchange(stats);
    }
    // Every worker: the state (batchnorm's running statistics) is not on the PS shards.
    if (o_.checkpoint.resume && first_step_ > 0) {
      load_model_state(*model_, checkpoint_version_dir(o_.checkpoint.dir, first_step_), chief_, tag_);
    }
    replica_->params_to_device();
    PSLOG(INFO) << tag_ << "training " << total_steps_ << " steps"
                << (first_step_ > 0 ? " from step " + std::to_string(first_step_) : "");
  }

  BatchFitRequest batch_request() const {
    BatchFitRequest r;
    r.share = share_;
    r.global_batch = global_batch_;
    r.micro_batch = o_.micro_batch;
    r.automatic = o_.batch_auto;
    r.evaluates = evaluation_->evaluates();
    r.memory_limit_mib = o_.backend.gpu_memory_limit_mib;
    r.recompute = o_.recompute;
    r.batchnorm_global = o_.batchnorm_global;
    r.backup_workers = o_.evaluation.backup_workers;
    r.tag = tag_;
    return r;
  }

  // --bind-cpu: this thread and the data reader it starts next, now that the threads that stay
  // free (ZeroMQ's, --threads' helpers) have started (worker/backend/cpu_binding.h).
  void bind_cpu() const {
    if (o_.bind_cpu < 0) return;
    std::string why;
    if (!bind_this_thread(o_.bind_cpu, &why)) throw Error(why);
    PSLOG(INFO) << tag_ << "training thread bound to CPU " << o_.bind_cpu << " (--bind-cpu)";
  }

  // Reads the batches of steps [step, total_steps_) from now on.
  void start_prefetch(uint64_t step) {
    prefetch_.reset();
    const uint64_t epoch = step / steps_per_epoch_;
    prefetch_ = std::make_unique<Prefetcher>(*train_data_, *sampler_, epoch, static_cast<uint64_t>(o_.epochs) - epoch,
                                             total_steps_ - step, o_.prefetch, step % steps_per_epoch_, o_.augment);
  }

  void loop() {
    bind_cpu();
    start_prefetch(first_step_);
    progress_ = std::make_unique<Progress>(o_.progress, steps_per_epoch_, total_steps_, &metrics_);  // the run's clock starts here
    uint64_t step = first_step_;
    while (step < total_steps_) {
      const StepMetrics m = run_step(step);
      if (!chief_ && m.stop) break;
      if (chief_) report(step, m);
      if (m.stop) break;
      if (!chief_) evaluation_->share_after(step, &previous_);
      if (own_figures_ != nullptr) {
        own_figures_->add(step, previous_, own_.samples, own_.loss_sum, step + 1 == total_steps_);
      }
      if (m.next_step > step + 1 && m.next_step < total_steps_) {
        // Backup workers: the job moved on without this worker's late steps; so does its data,
        // and the rows asked for the step after this one go unused.
        skipped_ += m.next_step - step - 1;
        input_->skip();
        start_prefetch(m.next_step);
      }
      step = std::max(m.next_step, step + 1);
    }
    if (!summary_.stopped) summary_.steps = total_steps_;
  }

  // One global step: its micro-batches' gradient summed and pushed (the last micro-batch's as
  // backward produces it), and the next parameters received.
  StepMetrics run_step(uint64_t step) {
    const auto t0 = Clock::now();
    InputTimes in;
    Clock::duration pushing{};
    PushInfo info;
    info.times = previous_;
    info.eval = evaluation_->take_share();
    checkpoints_->plan(step, &info.checkpoint, &info.stop);
    BatchStats done;  // of the micro-batches before the current one
    input_->begin_step(step, *prefetch_, &in);
    for (int j = 0; j < batch_.micro_batches; ++j) {
      input_->take(step, j, *prefetch_, &batch_data_, &in);
      PSTRAIN_CHECK(batch_data_.step == step % steps_per_epoch_ && batch_data_.micro == j);
      info.samples += static_cast<uint64_t>(batch_data_.size);
      const bool last = j + 1 == batch_data_.micro_batches;
      size_t ready_to = total_;  // grad[ready_to, total) is final (and on the host when staged)
      const auto push = [&](size_t from, const BatchStats& s) {
        if (stage_gradient_) replica_->grad_to_host(from, ready_to);
        ready_to = from;
        const auto p0 = Clock::now();
        info.loss_sum = done.loss_sum + s.loss_sum;
        info.correct = static_cast<uint64_t>(done.correct + s.correct);
        exchange_->gradient_ready(step, replica_->host_grad(), from, info);
        pushing += Clock::now() - p0;
      };
      const float* x = input_->input(batch_data_, *replica_, &in);
      const Model::Keys keys{o_.seed, step, batch_data_.records.data()};
      BatchStats s;
      if (targets_ != nullptr) {
        backend_->upload(targets_.get(), batch_data_.t.data(), batch_data_.t.size());
        s = model_->train_step_targets(replica_->params(), x, targets_.get(), batch_data_.size, replica_->grad(),
                                       last ? Model::GradReady(push) : nullptr, j > 0, keys, input_->input_grad());
      } else {
        s = model_->train_step(replica_->params(), x, batch_data_.y.data(), batch_data_.size, replica_->grad(),
                               last ? Model::GradReady(push) : nullptr, j > 0, keys, input_->input_grad());
      }
      input_->after_backward(step, batch_data_, last, info.samples, *prefetch_, &in);
      if (!last) {
        done.loss_sum += s.loss_sum;
        done.correct += s.correct;
      }
    }
    in.pushing += pushing;
    return end_step(step, t0, in, info);
  }

  // The step's breakdown, the exchange's end of the step (the next parameters), and its figures.
  StepMetrics end_step(uint64_t step, Clock::time_point t0, const InputTimes& in, const PushInfo& info) {
    // Without staging the backward pass may still run on the GPU: wait here, so that its time
    // counts as compute and not as the exchange's.
    if (!stage_gradient_) replica_->synchronize();
    slow_down(Clock::now() - t0 - in.data);
    const auto t2 = Clock::now();
    StepTimes times;
    times.data_us = micros(in.data);
    times.compute_us = micros(t2 - t0 - in.data) - micros(in.pushing) - micros(in.rows);
    const StepMetrics m = exchange_->finish_step(step, replica_->host_params(), replica_->host_grad(), info, &times);
    times.push_us += micros(in.pushing);
    times.pull_us += micros(in.rows);  // the embedding rows: pulled (and waited for) before forward
    replica_->params_to_device();
    previous_ = times;
    own_ = {info.samples, info.loss_sum};
    progress_->add(m);
    evaluation_->add(m);
    previous_.ckpt_us += static_cast<uint64_t>(1e6 * checkpoints_->step_done(info.checkpoint, m.durable));
    if (m.stop) {
      summary_.stopped = true;
      summary_.steps = step + 1;
      PSLOG(WARN) << tag_ << "stopping after step " << step + 1 << " of " << total_steps_
                  << ": the chief was asked to stop; the final checkpoint is complete";
    }
    return m;
  }

  // --slowdown F: this worker's compute takes F times as long (a debugging aid for stragglers).
  void slow_down(Clock::duration compute) const {
    if (o_.slowdown <= 1) return;
    std::this_thread::sleep_for(std::chrono::duration_cast<Clock::duration>(compute * (o_.slowdown - 1)));
  }

  // The chief's progress line every --log-every steps, and the evaluation at an epoch's end.
  void report(uint64_t step, const StepMetrics& m) {
    const bool last = step + 1 == total_steps_ || m.stop;
    progress_->report(step, batch_data_.epoch, last);
    evaluation_->report(step, batch_data_.epoch, last, m, &previous_);
  }

  TrainSummary finish() {
    summary_.seconds = progress_->seconds();
    // All workers' samples: the global batches of sync and ssp; in async each worker's own steps.
    const StepStats& run = progress_->run();
    const double samples = run.samples() > 0 ? static_cast<double>(run.samples())
                                             : static_cast<double>(summary_.steps - first_step_) * global_batch_;
    summary_.samples_per_second = samples / std::max(summary_.seconds, 1e-9);
    // A stopped job's parameters are not its result: the checkpoint holds them for --resume.
    if (chief_ && !o_.save_params.empty() && !summary_.stopped) {
      save_run_model(o_.save_params, *model_, replica_->host_params(), summary_, &model_description_);
    }
    exchange_->done(summary_.stopped);
    PSLOG(INFO) << tag_ << "done; peak_rss_kib=" << peak_rss_kib() << " " << cpu_usage_text()
                << (skipped_ > 0 ? " skipped_steps=" + std::to_string(skipped_) : "")
                << (backend_->host_accessible()
                        ? std::string()
                        : " device_mib_counted=" + fixed(backend_->bytes_allocated() / kMiB, 2) +
                              " device_mib_measured=" + fixed(backend_->device_bytes_used() / kMiB, 2));
    if (chief_) progress_->print_summary(summary_);
    return summary_;
  }

  const TrainOptions& o_;
  const bool chief_;
  const std::string tag_;
  const std::atomic<bool>* stop_requested_;

  std::unique_ptr<Dataset> train_data_;
  std::vector<int> shares_;
  int share_ = 0;
  uint64_t global_batch_ = 0, steps_per_epoch_ = 0, total_steps_ = 0;
  BatchChoice batch_;
  std::unique_ptr<ShardSampler> sampler_;

  std::unique_ptr<Backend> backend_;
  ModelDescription model_description_;  // what model.json records (--save-params, checkpoints)
  std::unique_ptr<Model> model_;
  size_t total_ = 0;
  std::unique_ptr<Replica> replica_;
  std::vector<size_t> input_shape_;    // the model's input: the data's records, or with embeddings their rows too
  std::unique_ptr<TrainInput> input_;  // plain, or with --embedding-dim the rows of each batch's IDs
  BufferPtr targets_;                  // --loss bce | mse | huber: a micro-batch's float targets on the backend

  std::unique_ptr<Exchange> exchange_;
  bool stage_gradient_ = true;
  std::unique_ptr<ChiefCheckpoints> checkpoints_;
  uint64_t first_step_ = 0, skipped_ = 0;

  std::unique_ptr<Prefetcher> prefetch_;
  Batch batch_data_;
  StepTimes previous_;  // this worker's last step, reported with the next step's pushes
  struct {
    uint64_t samples = 0;
    double loss_sum = 0;
  } own_;  // this worker's own share of its last step (its TensorBoard run's train/loss)
  std::unique_ptr<OwnStepFigures> own_figures_;  // --tensorboard-dir: DIR/w<i>
  TrainSummary summary_;
  std::unique_ptr<Evaluation> evaluation_;
  MetricsSinks metrics_;                // the chief's, if any: opened before the first step
  std::unique_ptr<Progress> progress_;  // from the loop's start
};

}  // namespace

TrainSummary train(const TrainOptions& o, const ExchangeFactory& make_exchange,
                   const std::atomic<bool>* stop_requested) {
  Trainer trainer(o, stop_requested);
  return trainer.run(make_exchange);
}

}  // namespace pstrain
