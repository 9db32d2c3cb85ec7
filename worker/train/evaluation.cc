#include "worker/train/evaluation.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "shared/config/feature_schema.h"
#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/backend/loss_math.h"
#include "worker/backend/replica.h"
#include "worker/data/open.h"
#include "worker/model/model.h"
#include "worker/model/model_file.h"
#include "worker/model/saved_model.h"
#include "worker/model/param_files.h"
#include "worker/report/auc.h"
#include "worker/report/metrics_sink.h"
#include "worker/report/target_metrics.h"
#include "worker/sparse/ctr_input.h"
#include "worker/sparse/saved_tables.h"

namespace pstrain {
namespace {


BatchStats evaluate(Model& model, Replica& replica, const Dataset& data, int eval_batch, size_t from, size_t to) {
  std::vector<size_t> records(static_cast<size_t>(eval_batch));
  std::vector<float> x(static_cast<size_t>(eval_batch) * data.feature_dim());
  std::vector<int32_t> y(static_cast<size_t>(eval_batch));
  BatchStats total;
  for (size_t start = from; start < to; start += static_cast<size_t>(eval_batch)) {
    const size_t count = std::min<size_t>(static_cast<size_t>(eval_batch), to - start);
    std::iota(records.begin(), records.begin() + static_cast<long>(count), start);
    data.read(records.data(), count, x.data(), y.data());
    const float* input = replica.input(x.data(), count * data.feature_dim());
    const BatchStats s = model.evaluate(replica.params(), input, y.data(), static_cast<int>(count));
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
  }
  return total;
}

// A CTR model's evaluation: the rows of the test records' IDs as they are at `version`, the loss
// and accuracy from the logits (two classes, softmax; or one, --loss bce: p(click) = sigmoid, z >= 0
// predicting a click), and the exact AUC of p(label 1) over [from, to).
BatchStats evaluate_ctr(Model& model, Replica& replica, Backend& backend, CtrInput& ctr, const Dataset& data,
                        int eval_batch, size_t from, size_t to, uint64_t version, double* auc) {
  const size_t batch = static_cast<size_t>(eval_batch), classes = static_cast<size_t>(model.classes());
  std::vector<size_t> records(batch);
  std::vector<float> x(batch * data.feature_dim()), logits(batch * classes);
  IdLists ids;
  std::vector<int32_t> y(batch);
  std::vector<float> scores;
  std::vector<int32_t> labels;
  scores.reserve(to - from);
  labels.reserve(to - from);
  BatchStats total;
  for (size_t start = from; start < to; start += batch) {
    const size_t count = std::min(batch, to - start);
    std::iota(records.begin(), records.begin() + static_cast<long>(count), start);
    data.read(records.data(), count, x.data(), y.data());
    data.read_ids(records.data(), count, &ids);
    const float* input =
        replica.input(ctr.input(x.data(), ids.ids.data(), ids.counts.data(), count, version), count * ctr.input_dim());
    const float* out = model.logits(replica.params(), input, static_cast<int>(count));
    backend.download(logits.data(), out, count * classes);
    for (size_t r = 0; r < count; ++r) {
      if (model.loss() == Loss::kBce) {  // one output, p(click) = sigmoid(z): logloss is the loss
        const float z = logits[r];
        const int32_t label = y[r] == 1 ? 1 : 0;
        total.loss_sum += element_loss(Loss::kBce, z, static_cast<float>(label), 0.0f);
        if ((z >= 0) == (label == 1)) ++total.correct;
        scores.push_back(stable_sigmoid(z));
        labels.push_back(label);
        continue;
      }
      const float* l = &logits[r * classes];
      const float* top = std::max_element(l, l + classes);
      double sum = 0;
      for (size_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(l[c]) - *top);
      const size_t label = static_cast<size_t>(y[r]);
      total.loss_sum += std::log(sum) - (static_cast<double>(l[label]) - *top);
      if (static_cast<size_t>(top - l) == label) ++total.correct;
      scores.push_back(static_cast<float>(std::exp(static_cast<double>(l[classes - 1]) - *top) / sum));
      labels.push_back(y[r] == static_cast<int32_t>(classes) - 1 ? 1 : 0);
    }
  }
  *auc = exact_auc(scores.data(), labels.data(), scores.size());
  return total;
}

// A loss of float targets: the outputs of the whole test set against its targets, on the host.
TargetMetrics evaluate_targets(Model& model, Replica& replica, Backend& backend, const Dataset& data, int eval_batch,
                               float huber_delta) {
  const size_t batch = static_cast<size_t>(eval_batch), width = data.target_width();
  std::vector<size_t> records(batch);
  std::vector<float> x(batch * data.feature_dim()), outputs(batch * width), targets(batch * width);
  std::vector<int32_t> y(batch);
  TargetMetrics metrics(model.loss(), huber_delta, width);
  for (size_t start = 0; start < data.size(); start += batch) {
    const size_t count = std::min(batch, data.size() - start);
    std::iota(records.begin(), records.begin() + static_cast<long>(count), start);
    data.read(records.data(), count, x.data(), y.data());
    data.read_targets(records.data(), count, targets.data());
    const float* input = replica.input(x.data(), count * data.feature_dim());
    backend.download(outputs.data(), model.logits(replica.params(), input, static_cast<int>(count)), count * width);
    metrics.add(outputs.data(), targets.data(), count);
  }
  return metrics;
}

}  // namespace

void Evaluation::set_target_loss(Loss loss, float huber_delta, Backend& backend) {
  loss_ = loss;
  huber_delta_ = huber_delta;
  backend_ = &backend;
  shared_ = false;  // the chief evaluates alone (the shared sums carry loss and accuracy only)
  summary_->loss = loss;
}

void Evaluation::set_ctr_input(CtrInput* ctr, Backend& backend) {
  ctr_ = ctr;
  backend_ = &backend;
  shared_ = false;  // the chief evaluates alone (the AUC needs every record's score)
  summary_->binary = true;
  summary_->train_accuracy_known = model_ == nullptr || model_->loss() == Loss::kSoftmax;
}

Evaluation::Evaluation(const EvaluationOptions& o, const DataOptions& data,
                       std::unique_ptr<Dataset> test_data, int classes, uint64_t steps_per_epoch,
                       uint64_t total_steps, TrainSummary* summary)
    : o_(o),
      chief_(o.index == 0),
      steps_per_epoch_(steps_per_epoch),
      total_steps_(total_steps),
      summary_(summary),
      test_data_(std::move(test_data)),
      epoch_(o.num_workers) {
  // Shared evaluations need every worker to hold the same parameters after a step, and an
  // epoch's end before the job's last step (that one's evaluation is the chief's alone).
  shared_ = o_.num_workers > 1 && (o_.mode == Mode::kAllreduce || (o_.mode == Mode::kSync && o_.backup_workers == 0)) &&
            total_steps_ > steps_per_epoch_ && data.loss == Loss::kSoftmax;  // targets: set_target_loss
  if (!chief_ && shared_) test_data_ = open_test_data(data, classes);
}

void Evaluation::set_model(Model& model, Replica& replica, int eval_batch) {
  model_ = &model;
  replica_ = &replica;
  eval_batch_ = eval_batch;
  // Batch norm's running statistics are each worker's own (docs/models.md): the chief evaluates
  // alone, with its own.
  if (!model.state().empty()) shared_ = false;
}

EvalSums Evaluation::take_share() {
  const EvalSums share = pending_eval_;
  pending_eval_ = EvalSums{};
  return share;
}

void Evaluation::share_after(uint64_t step, StepTimes* times) {
  if (shared_ && evaluates_share_after(step)) evaluate_share(times);
}

void Evaluation::report(uint64_t step, uint64_t epoch, bool last, const StepMetrics& m, StepTimes* times) {
  const bool epoch_end = (step + 1) % steps_per_epoch_ == 0;
  if (awaited_epoch_ != 0) report_shared_evaluation(m);
  if (epoch_end && !last && shared_) {
    // Every worker evaluates its share now; the sums come back with the next step's results.
    evaluate_share(times);
    awaited_epoch_ = epoch + 1;
    awaited_step_ = step + 1;
    awaited_train_ = {epoch_.mean_loss(), epoch_.accuracy()};
    epoch_.reset();
  } else if (epoch_end || last) {
    // The job's last step before an epoch's end (a stop, or --steps): its figures are marked as
    // the partial epoch's, in the log line and the metrics file, not passed off as a whole one.
    const uint64_t partial_steps = epoch_end ? 0 : (step + 1) % steps_per_epoch_;
    const std::string partial =
        partial_steps == 0 ? ""
                           : "partial epoch: " + std::to_string(partial_steps) + " of " + std::to_string(steps_per_epoch_) +
                                 " steps; ";
    const auto e0 = Clock::now();
    if (loss_ != Loss::kSoftmax) {
      const TargetMetrics t = evaluate_targets(*model_, *replica_, *backend_, *test_data_, eval_batch_, huber_delta_);
      times->eval_us = micros(Clock::now() - e0);
      summary_->train_loss = epoch_.mean_loss();
      t.fill(summary_);
      report_epoch(epoch + 1, step + 1, EvalSums{t.samples(), t.loss_sum(), 0},
                   "(" + partial + "evaluated in " + fixed(times->eval_us / 1e3, 1) + " ms)", partial_steps);
      epoch_.reset();
      return;
    }
    const BatchStats t =
        ctr_ != nullptr ? evaluate_ctr(*model_, *replica_, *backend_, *ctr_, *test_data_, eval_batch_, 0,
                                       test_data_->size(), step + 1, &summary_->test_auc)
                        : evaluate(*model_, *replica_, *test_data_, eval_batch_, 0, test_data_->size());
    times->eval_us = micros(Clock::now() - e0);  // reported with the next step, like the rest
    summary_->train_loss = epoch_.mean_loss();
    summary_->train_accuracy = epoch_.accuracy();
    report_epoch(epoch + 1, step + 1, EvalSums{test_data_->size(), t.loss_sum, static_cast<uint64_t>(t.correct)},
                 "(" + partial + "evaluated in " + fixed(times->eval_us / 1e3, 1) + " ms)", partial_steps);
    epoch_.reset();
  }
}

// Whether the workers share the evaluation after `step`: an epoch's last step, not the job's
// (the last evaluation has no next step to bring the sums: the chief does it alone).
bool Evaluation::evaluates_share_after(uint64_t step) const {
  return (step + 1) % steps_per_epoch_ == 0 && step + 1 < total_steps_;
}

// This worker's share of the test set: records [n i / N, n (i+1) / N), in batches of the
// evaluation batch; the sums ride with the next step's pushes (PushInfo::eval), the time with
// its step times.
void Evaluation::evaluate_share(StepTimes* times) {
  const auto e0 = Clock::now();
  const size_t n = test_data_->size(), i = static_cast<size_t>(o_.index), workers = static_cast<size_t>(o_.num_workers);
  const size_t from = n * i / workers, to = n * (i + 1) / workers;
  const BatchStats t = evaluate(*model_, *replica_, *test_data_, eval_batch_, from, to);
  pending_eval_ = EvalSums{to - from, t.loss_sum, static_cast<uint64_t>(t.correct)};
  times->eval_us = micros(Clock::now() - e0);
}

// The chief, one step after an epoch's end: the workers' shares summed. All of the test set, or
// (a worker replaced meanwhile, whose share was lost) a warning instead of a partial result.
void Evaluation::report_shared_evaluation(const StepMetrics& m) {
  const uint64_t epoch = awaited_epoch_;
  awaited_epoch_ = 0;
  if (m.eval.samples != test_data_->size()) {
    PSLOG(WARN) << "epoch " << epoch << ": the workers' evaluations came back for " << m.eval.samples << " of "
                << test_data_->size() << " test records (a worker replaced meanwhile loses its share); "
                << "not reported";
    return;
  }
  summary_->train_loss = awaited_train_.first;
  summary_->train_accuracy = awaited_train_.second;
  report_epoch(epoch, awaited_step_, m.eval,
               "(evaluated by " + std::to_string(o_.num_workers) + " workers, " +
                   fixed(m.times.eval_us / 1e3 / static_cast<double>(o_.num_workers), 1) + " ms each on average)");
}

// "epoch N done: train loss .. acc ..; test loss .. acc .. (how)", and the summary's test values.
void Evaluation::report_epoch(uint64_t epoch, uint64_t step, const EvalSums& test, const std::string& how,
                              uint64_t partial_steps) {
  summary_->test_loss = test.loss_sum / static_cast<double>(test.samples);
  summary_->test_accuracy = static_cast<double>(test.correct) / static_cast<double>(test.samples);
  const bool accuracy = loss_ == Loss::kSoftmax, train_accuracy = accuracy && summary_->train_accuracy_known;
  PSLOG(INFO) << "epoch " << epoch << " done: train loss " << fixed(summary_->train_loss, 4)
              << (train_accuracy ? " acc " + fixed(summary_->train_accuracy, 4) : "") << "; test loss "
              << fixed(summary_->test_loss, 4) << (accuracy ? " acc " + fixed(summary_->test_accuracy, 4) : "")
              << target_metrics_text(*summary_, false)
              << (summary_->binary ? " auc " + fixed(summary_->test_auc, 4) : "") << " " << how;
  if (metrics_ == nullptr) return;
  nlohmann::ordered_json r;
  r["kind"] = "epoch";
  r["epoch"] = epoch;
  r["step"] = step;
  if (partial_steps > 0) {
    r["partial"] = true;
    r["epoch_steps"] = partial_steps;
  }
  r["train_loss"] = summary_->train_loss;
  if (train_accuracy) r["train_accuracy"] = summary_->train_accuracy;
  r["test_loss"] = summary_->test_loss;
  if (accuracy) r["test_accuracy"] = summary_->test_accuracy;
  add_target_metrics(*summary_, &r);
  if (summary_->binary) r["test_auc"] = summary_->test_auc;
  r["test_samples"] = test.samples;
  metrics_->write(r);
}

LoadedModel::LoadedModel() = default;
LoadedModel::LoadedModel(LoadedModel&&) noexcept = default;
LoadedModel::~LoadedModel() = default;

namespace {

// --embedding-dim / --embedding-tables given with --evaluate or --predict: model.json's or exit 2.
void check_embedding_flags(const EvaluateOptions& o, const EmbeddingSetup& saved) {
  if (o.embedding_dim == 0) return;
  const std::string where = "--init-params " + o.init_params + ": ";
  const std::string file = o.init_params + "/model.json";
  if (saved.dim == 0) throw UsageError(where + "the model of " + file + " has no embedding tables: drop --embedding-dim");
  if (static_cast<uint32_t>(o.embedding_dim) != saved.dim) {
    throw UsageError(where + "its embedding rows have dim " + std::to_string(saved.dim) + " (" + file +
                     "), but --embedding-dim is " + std::to_string(o.embedding_dim));
  }
  if (o.per_field_tables != saved.per_field_tables) {
    const auto name = [](bool per_field) { return per_field ? "per-field" : "shared"; };
    throw UsageError(where + "its embedding tables are " + name(saved.per_field_tables) + " (" + file +
                     "), but --embedding-tables is " + name(o.per_field_tables));
  }
  if (o.pool != saved.pool) {
    throw UsageError(where + "its fields' IDs are pooled by " + embedding_pool_name(saved.pool) + " (" + file +
                     "), but --embedding-pool is " + embedding_pool_name(o.pool));
  }
}

// The data must be read by the schema the tables' IDs were read by (model.json "schema"); the
// Criteo reader and the preset criteo read the same IDs.
void check_schema(const EvaluateOptions& o, const EmbeddingSetup& saved, const DataOptions& data) {
  const std::string criteo = criteo_feature_schema().canonical();
  const std::string given = data.schema.empty() ? "" : load_feature_schema(data.schema).canonical();
  const auto same = [&](const std::string& a, const std::string& b) {
    return a == b || (a.empty() && b == criteo) || (b.empty() && a == criteo);
  };
  if (same(saved.schema, given)) return;
  const std::string where = "--init-params " + o.init_params + ": ";
  if (saved.schema.empty()) {
    throw UsageError(where + "its tables were trained on Criteo data (no --schema), but --schema " + data.schema +
                     " reads other IDs: drop --schema (or give --schema criteo)");
  }
  throw UsageError(where + "its tables' IDs were read by the schema \"" + saved.schema + "\" (" + o.init_params +
                   "/model.json), " + (data.schema.empty() ? "and no --schema is given" : "but --schema " + data.schema +
                   " is \"" + given + "\"") + ": give --schema with the columns the model was trained on");
}

// A CTR model's input for records of `data`: dense features, then a row per field. The data must
// have the fields and dense features the tables were trained on.
std::vector<size_t> ctr_input_shape(const EvaluateOptions& o, const EmbeddingSetup& e, const Dataset& data,
                                    const std::string& source) {
  if (data.id_fields() != e.fields || data.feature_dim() != e.dense) {
    throw Error("--init-params " + o.init_params + ": the model takes records of " + std::to_string(e.dense) +
                " dense features and " + std::to_string(e.fields) + " categorical fields (" + o.init_params +
                "/model.json's embeddings), but the data's records (" + source + ") have " +
                std::to_string(data.feature_dim()) + " and " + std::to_string(data.id_fields()) +
                (data.id_fields() == 0 ? " (Criteo data: --test-data FILE.tsv, or --data-format criteo)" : ""));
  }
  return {e.dense + e.fields * e.dim};
}

}  // namespace

LoadedModel load_saved_model(const EvaluateOptions& o, const DataOptions& data) {
  SavedModelQuery q;
  q.dir = o.init_params;
  q.model_given = o.model_given;
  q.model = o.model;
  q.hidden = o.hidden;
  q.classes = data.classes;
  q.any_loss = true;
  const SavedModel saved = resolve_saved_model(q);
  LoadedModel m;
  DataOptions with_targets = data;  // the model's loss says what the data's labels are
  with_targets.loss = saved.loss;
  const EmbeddingSetup& tables = saved.embeddings;
  check_embedding_flags(o, tables);  // the flags against model.json before any data is read
  if (tables.dim > 0) check_schema(o, tables, data);
  if (tables.dim > 0 && data.test_data.empty()) {  // not --data-dir's images: they have no fields
    throw UsageError("--init-params " + o.init_params +
                     " is a click-through-rate model (model.json's embeddings): --evaluate needs its test records, "
                     "--test-data FILE (Criteo TSV" +
                     (data.schema.empty() ? std::string(", or the file a --schema reads") : ", read by --schema") + ")");
  }
  m.data = open_test_data(with_targets, saved.classes);
  const std::vector<size_t> shape = tables.dim > 0 ? ctr_input_shape(o, tables, *m.data, data.test_data.empty() ? training_data_source(data) : data.test_data) : m.data->sample_shape();
  if (saved.described) {  // the data's records must fit the saved model
    q.classes = saved.classes;
    q.sample_shape = shape;
    resolve_saved_model(q);
  }
  if (tables.dim > 0) {
    m.rows = open_saved_tables(o.init_params, tables);
    EmbeddingInputOptions in;
    in.dense = tables.dense;
    in.fields = tables.fields;
    in.dim = tables.dim;
    in.per_field_tables = tables.per_field_tables;
    in.pool = tables.pool;
    in.num_ps = 1;  // every shard's rows in one source
    m.ctr = std::make_unique<CtrInput>(in);
    m.ctr->set_source(m.rows.get());
  }
  m.backend = make_backend(o.backend);
  m.batch = static_cast<int>(std::min<size_t>(kEvalBatch, std::max<size_t>(m.data->size(), 1)));
  m.model = std::make_unique<Model>(
      Network(saved.spec, shape, saved.classes,
              saved.loss == Loss::kSoftmax ? "" : m.data->target_source()),
      m.batch, false, *m.backend);
  m.model->set_loss(saved.loss, static_cast<float>(saved.huber_delta));
  m.huber_delta = static_cast<float>(saved.huber_delta);
  const size_t input_floats = std::accumulate(shape.begin(), shape.end(), size_t{1}, std::multiplies<size_t>());
  m.replica = std::make_unique<Replica>(*m.backend, m.model->layout().total(), static_cast<size_t>(m.batch) * input_floats);
  load_params(o.init_params, m.model->layout(), m.replica->host_params());
  const Layout& state_layout = m.model->network().state_layout();
  if (!state_layout.tensors().empty()) {  // batchnorm's running statistics
    std::vector<float> state(state_layout.total());
    load_params(o.init_params, state_layout, state.data());
    m.model->set_state(state);
  }
  m.replica->params_to_device();
  return m;
}

BatchStats evaluate_saved_model(const EvaluateOptions& o) {
  const LoadedModel loaded = load_saved_model(o, o.data);
  Model& model = *loaded.model;
  Replica& replica = *loaded.replica;
  const Dataset* const data = loaded.data.get();
  const Backend* const backend = loaded.backend.get();
  const int batch = loaded.batch;
  PSLOG(INFO) << "evaluating " << o.init_params << " (" << model.layout().total() << " parameters; model: "
              << model.network().summary() << ") on " << data->size() << " test records, device " << backend->name();
  const auto t0 = Clock::now();
  if (model.loss() != Loss::kSoftmax && loaded.ctr == nullptr) {
    const TargetMetrics t = evaluate_targets(model, replica, *loaded.backend, *data, batch, loaded.huber_delta);
    TrainSummary figures;
    t.fill(&figures);
    PSLOG(INFO) << "evaluation: test_loss=" << fixed(figures.test_loss, 4) << target_metrics_text(figures, true)
                << " records=" << data->size()
                << " time_s=" << fixed(std::chrono::duration<double>(Clock::now() - t0).count(), 2);
    return BatchStats{t.loss_sum(), 0};
  }
  if (loaded.ctr != nullptr) {  // the chief's figures of a CTR model (Evaluation::report)
    double auc = 0;
    const BatchStats stats = evaluate_ctr(model, replica, *loaded.backend, *loaded.ctr, *data, batch, 0, data->size(),
                                          0, &auc);
    const double n = static_cast<double>(std::max<size_t>(data->size(), 1));
    PSLOG(INFO) << "evaluation: test_loss=" << fixed(stats.loss_sum / n, 4)
                << " test_accuracy=" << fixed(static_cast<double>(stats.correct) / n, 4)
                << " test_auc=" << fixed(auc, 4) << " test_logloss=" << fixed(stats.loss_sum / n, 4)
                << " records=" << data->size()
                << " time_s=" << fixed(std::chrono::duration<double>(Clock::now() - t0).count(), 2);
    return stats;
  }
  const BatchStats stats = evaluate(model, replica, *data, batch, 0, data->size());
  const double n = static_cast<double>(std::max<size_t>(data->size(), 1));
  PSLOG(INFO) << "evaluation: test_loss=" << fixed(stats.loss_sum / n, 4)
              << " test_accuracy=" << fixed(static_cast<double>(stats.correct) / n, 4) << " records=" << data->size()
              << " time_s=" << fixed(std::chrono::duration<double>(Clock::now() - t0).count(), 2);
  return stats;
}

}  // namespace pstrain
