#include "worker/trainer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "shared/cluster_env.h"
#include "shared/error.h"
#include "shared/log.h"
#include "shared/npy.h"
#include "worker/backend.h"
#include "worker/data/dataset.h"
#include "worker/data/prefetch.h"
#include "worker/checkpoints.h"
#include "worker/data/sampler.h"
#include "worker/model.h"
#include "worker/progress.h"
#include "worker/exchange.h"
#include "worker/replica.h"

namespace pstrain {
namespace {

constexpr int kEvalBatch = 500;

uint64_t micros(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

BatchStats evaluate(Mlp& model, Replica& replica, const Dataset& data) {
  std::vector<size_t> records(kEvalBatch);
  std::vector<float> x(static_cast<size_t>(kEvalBatch) * data.feature_dim());
  std::vector<int32_t> y(kEvalBatch);
  BatchStats total;
  for (size_t start = 0; start < data.size(); start += kEvalBatch) {
    const size_t count = std::min<size_t>(kEvalBatch, data.size() - start);
    std::iota(records.begin(), records.begin() + static_cast<long>(count), start);
    data.read(records.data(), count, x.data(), y.data());
    const float* input = replica.input(x.data(), count * data.feature_dim());
    const BatchStats s = model.evaluate(replica.params(), input, y.data(), static_cast<int>(count));
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
  }
  return total;
}

void save_params(const std::string& dir, const Layout& layout, const float* params) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) throw Error("cannot create --save-params dir '" + dir + "'");
  for (const TensorSpec& t : layout.tensors()) write_npy(dir + "/" + t.name + ".npy", t.shape, params + t.offset);
  PSLOG(INFO) << "saved " << layout.tensors().size() << " variables to " << dir;
}

// Peak resident memory of this process in KiB (VmHWM), 0 where /proc is unavailable.
long peak_rss_kb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return 0;
}

std::string fixed(double value, int digits);

struct MemoryPlan {  // MiB
  double params = 0, grads = 0, activations = 0, input = 0, workspace = 0;
  double total() const { return params + grads + activations + input + workspace; }
  std::string text() const {
    return "params " + fixed(params, 2) + " + grads " + fixed(grads, 2) + " + activations " + fixed(activations, 2) +
           " + input " + fixed(input, 2) + " + workspace " + fixed(workspace, 2) + " = " + fixed(total(), 2) + " MiB";
  }
};

// What the worker will allocate on its device, computed before allocating anything but the
// backend's own workspace and per-batch scratch (already held).
MemoryPlan plan_memory(const Backend& backend, const JobOptions& o, int input_dim, int classes, int max_batch) {
  constexpr double kMiB = 1048576.0;
  const size_t total = Mlp::layout_for(input_dim, o.hidden, classes).total();
  MemoryPlan plan;
  plan.params = plan.grads = total * sizeof(float) / kMiB;
  plan.activations = Mlp::activation_floats(input_dim, o.hidden, classes, max_batch) * sizeof(float) / kMiB;
  plan.input = backend.host_accessible() ? 0 : static_cast<double>(max_batch) * input_dim * sizeof(float) / kMiB;
  plan.workspace = backend.bytes_allocated() / kMiB;
  return plan;
}

std::string fixed(double value, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << value;
  return os.str();
}

}  // namespace

TrainSummary train(const JobOptions& o, const ExchangeFactory& make_exchange, const std::atomic<bool>* stop_requested) {
  const bool chief = o.index == 0;
  const std::string tag = "w" + std::to_string(o.index) + ": ";
  const std::string data_dir = o.data_dir.empty() ? default_data_dir() : o.data_dir;
  const std::string cache_dir = o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
  const auto train_data = Dataset::open_mnist_dir(data_dir, "train", cache_dir);
  const auto test_data = chief ? Dataset::open_mnist_dir(data_dir, "t10k", cache_dir) : nullptr;
  const ShardSampler sampler(train_data->size(), o.index, o.num_workers, o.batch_size, o.seed, o.shuffle);
  const uint64_t steps_per_epoch = sampler.steps_per_epoch();
  uint64_t total_steps = steps_per_epoch * static_cast<uint64_t>(o.epochs);
  if (o.steps > 0) total_steps = std::min(total_steps, static_cast<uint64_t>(o.steps));
  PSLOG(INFO) << tag << "data " << data_dir << ": " << train_data->size() << " training records; this worker's shard is "
              << sampler.shard_size() << " records per epoch (positions " << o.index << ", " << o.index << "+"
              << o.num_workers << ", ...), " << steps_per_epoch << " steps of " << o.batch_size;

  const auto backend = make_backend(o);
  PSLOG(INFO) << tag << describe_placement(o, backend->name());
  const int input_dim = static_cast<int>(train_data->feature_dim());
  const int max_batch = std::max(o.batch_size, chief ? kEvalBatch : 1);
  const size_t input_floats = static_cast<size_t>(max_batch) * static_cast<size_t>(input_dim);
  backend->reserve_batch(max_batch);  // counted as workspace below
  const MemoryPlan plan = plan_memory(*backend, o, input_dim, train_data->num_classes(), max_batch);
  PSLOG(INFO) << tag << "device " << backend->name() << "; memory plan: " << plan.text();
  if (o.gpu_memory_limit_mib > 0 && !backend->host_accessible() &&
      plan.total() > static_cast<double>(o.gpu_memory_limit_mib)) {
    throw Error("the memory plan of " + fixed(plan.total(), 2) + " MiB exceeds --gpu-memory-limit " +
                std::to_string(o.gpu_memory_limit_mib) + " MiB (" + plan.text() + ")");
  }
  Mlp model(input_dim, o.hidden, train_data->num_classes(), max_batch, *backend);
  const size_t total = model.layout().total();
  Replica replica(*backend, total, input_floats);
  PSLOG(INFO) << tag << "model " << total << " parameters; allocated " << fixed(backend->bytes_allocated() / 1048576.0, 2)
              << " MiB on " << backend->name() << " (plan " << fixed(plan.total(), 2) << " MiB)"
              << (backend->host_accessible() ? std::string()
                                             : "; measured " + fixed(backend->device_bytes_used() / 1048576.0, 2) +
                                                   " MiB by cudaMemGetInfo");

  const auto exchange = make_exchange(total, replica);
  const bool stage_gradient = exchange->stages_gradient();
  model.init(o.seed, replica.host_params());  // the same on every worker: it depends on the seed alone
  ChiefCheckpoints checkpoints(o, model.layout(), total_steps, stop_requested);
  const uint64_t first_step = exchange->start(replica.host_params(), total_steps);
  if (checkpoints.enabled() && o.resume) checkpoints.check_resumed(first_step);
  replica.params_to_device();
  PSLOG(INFO) << tag << "training " << total_steps << " steps"
              << (first_step > 0 ? " from step " + std::to_string(first_step) : "");

  const uint64_t first_epoch = first_step / steps_per_epoch;
  Prefetcher prefetch(*train_data, sampler, first_epoch, static_cast<uint64_t>(o.epochs) - first_epoch,
                      total_steps - first_step, o.prefetch, first_step % steps_per_epoch);
  const auto start = Clock::now();
  auto interval_start = start;
  StepStats interval(o.num_workers), epoch(o.num_workers), run(o.num_workers);
  TrainSummary summary;
  Batch batch;
  StepTimes previous;  // this worker's last step, reported with the next step's pushes
  for (uint64_t step = first_step; step < total_steps; ++step) {
    const auto t0 = Clock::now();
    if (!prefetch.next(batch)) throw Error("data ended before step " + std::to_string(step));
    const auto t1 = Clock::now();
    exchange->begin_step(step);
    PushInfo info{static_cast<uint64_t>(batch.size), 0, 0, previous};
    checkpoints.plan(step, &info.checkpoint, &info.stop);
    Clock::duration pushing{};
    size_t ready_to = total;  // grad[ready_to, total) is final (and on the host when staged)
    const auto push = [&](size_t from, const BatchStats& s) {
      if (stage_gradient) replica.grad_to_host(from, ready_to);
      ready_to = from;
      const auto p0 = Clock::now();
      info.loss_sum = s.loss_sum;
      info.correct = static_cast<uint64_t>(s.correct);
      exchange->gradient_ready(step, replica.host_grad(), from, info);
      pushing += Clock::now() - p0;
    };
    const float* x = replica.input(batch.x.data(), batch.x.size());
    model.train_step(replica.params(), x, batch.y.data(), batch.size, replica.grad(), push);
    // Without staging the backward pass may still run on the GPU: wait here, so that its time
    // counts as compute and not as the exchange's.
    if (!stage_gradient) replica.synchronize();
    const auto t2 = Clock::now();
    StepTimes times;
    times.data_us = micros(t1 - t0);
    times.compute_us = micros(t2 - t1) - micros(pushing);
    const StepMetrics m = exchange->finish_step(step, replica.host_params(), replica.host_grad(), info, &times);
    times.push_us += micros(pushing);
    replica.params_to_device();
    previous = times;
    interval.add(m);
    epoch.add(m);
    run.add(m);
    if (info.checkpoint != 0) previous.ckpt_us += static_cast<uint64_t>(1e6 * checkpoints.completed(info.checkpoint));
    const bool last = step + 1 == total_steps || m.stop;
    const bool epoch_end = (step + 1) % steps_per_epoch == 0;
    if (m.stop) {
      summary.stopped = true;
      summary.steps = step + 1;
      PSLOG(WARN) << tag << "stopping after step " << step + 1 << " of " << total_steps
                  << ": the chief was asked to stop; the final checkpoint is complete";
    }
    if (!chief) {
      if (m.stop) break;
      continue;
    }
    if ((step + 1) % static_cast<uint64_t>(o.log_every) == 0 || epoch_end || last) {
      const double secs = std::chrono::duration<double>(Clock::now() - interval_start).count();
      PSLOG(INFO) << "epoch " << batch.epoch + 1 << "/" << o.epochs << " step " << step % steps_per_epoch + 1 << "/"
                  << steps_per_epoch << " (global " << step + 1 << ") loss " << fixed(interval.mean_loss(), 4)
                  << " acc " << fixed(interval.accuracy(), 4) << " samples/s "
                  << fixed(interval.samples() / std::max(secs, 1e-9), 0) << " | measured "
                  << fixed(1e3 * secs / static_cast<double>(interval.steps()), 2) << " ms/step; "
                  << interval.breakdown();
      const std::string slow = interval.straggler();
      if (!slow.empty()) PSLOG(WARN) << "straggler: " << slow;
      interval.reset();
      interval_start = Clock::now();
    }
    if (epoch_end || last) {
      const auto e0 = Clock::now();
      const BatchStats t = evaluate(model, replica, *test_data);
      previous.eval_us = micros(Clock::now() - e0);  // reported with the next step, like the rest
      summary.test_loss = t.loss_sum / test_data->size();
      summary.test_accuracy = static_cast<double>(t.correct) / test_data->size();
      summary.train_loss = epoch.mean_loss();
      summary.train_accuracy = epoch.accuracy();
      PSLOG(INFO) << "epoch " << batch.epoch + 1 << " done: train loss " << fixed(summary.train_loss, 4) << " acc "
                  << fixed(summary.train_accuracy, 4) << "; test loss " << fixed(summary.test_loss, 4) << " acc "
                  << fixed(summary.test_accuracy, 4) << " (evaluated in " << fixed(previous.eval_us / 1e3, 1) << " ms)";
      epoch.reset();
    }
    if (m.stop) break;
  }
  if (!summary.stopped) summary.steps = total_steps;
  summary.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  summary.samples_per_second =
      static_cast<double>(summary.steps - first_step) * o.batch_size * o.num_workers / std::max(summary.seconds, 1e-9);
  // A stopped job's parameters are not its result: the checkpoint holds them for --resume.
  if (chief && !o.save_params.empty() && !summary.stopped) save_params(o.save_params, model.layout(), replica.host_params());
  exchange->done();
  PSLOG(INFO) << tag << "done; peak_rss_kib=" << peak_rss_kb()
              << (backend->host_accessible()
                      ? std::string()
                      : " device_mib_counted=" + fixed(backend->bytes_allocated() / 1048576.0, 2) +
                            " device_mib_measured=" + fixed(backend->device_bytes_used() / 1048576.0, 2));
  if (chief) {
    PSLOG(INFO) << "summary: mode=" << o.mode << " workers=" << o.num_workers
                << (o.mode == "sync" ? " ps=" + std::to_string(o.num_ps) : "") << " steps=" << summary.steps
                << " time_s=" << fixed(summary.seconds, 1) << " samples_per_s=" << fixed(summary.samples_per_second, 0)
                << " train_loss=" << fixed(summary.train_loss, 4) << " train_accuracy=" << fixed(summary.train_accuracy, 4)
                << " test_loss=" << fixed(summary.test_loss, 4) << " test_accuracy=" << fixed(summary.test_accuracy, 4)
                << " | " << run.breakdown();
  }
  return summary;
}

}  // namespace pstrain
