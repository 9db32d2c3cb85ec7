// The test-set evaluations: the trainer's Evaluation (every epoch's, shared by the workers where
// they hold the same parameters, reported by the chief) and --evaluate (evaluate_saved_model).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shared/util/modes.h"
#include "worker/backend/backend.h"
#include "worker/data/dataset.h"
#include "worker/data/open.h"
#include "worker/report/progress.h"
#include "worker/sparse/embedding_setup.h"

namespace pstrain {

class MetricsSink;

class CtrInput;
class Model;
class Replica;
class RowSource;

// Test records per evaluation batch (--batch-size auto may choose fewer: worker/model/memory_plan.h).
constexpr int kEvalBatch = 500;

// What the evaluations need of the job (filled from the job's flags in main:
// worker/options_from_job.h).
struct EvaluationOptions {
  int index = 0;            // this worker's index (0: the chief)
  int num_workers = 1;      // N: the shares of the test set
  // Whether every worker holds the same parameters after a step (allreduce, sync without backup
  // workers), so that the workers can share the evaluations.
  Mode mode = Mode::kSync;
  int backup_workers = 0;
};

// One worker's evaluations during training. The epochs' evaluations but the last are shared by
// the workers where they all hold the same parameters after a step (sync without backup workers,
// allreduce; 2 or more workers): each evaluates its share of the test set and sends the sums with
// its next push, and the chief reports them when that step's results come back. Elsewhere the
// chief evaluates alone.
class Evaluation {
 public:
  // `test_data`: the chief's test set, which the trainer opens right after the training data (so
  // that its errors come before any other); the other workers open theirs here from `data`, of
  // `classes` classes, when they share the evaluations. The chief's reports set *summary's train
  // and test figures.
  Evaluation(const EvaluationOptions& o, const DataOptions& data, std::unique_ptr<Dataset> test_data,
             int classes, uint64_t steps_per_epoch, uint64_t total_steps, TrainSummary* summary);

  // Whether this worker evaluates the test set: the chief, and every worker that shares the
  // evaluations (its memory plan makes room for the evaluation batch, as the chief's does).
  bool evaluates() const { return chief_ || shared_; }
  // What it evaluates, in batches of up to `eval_batch` records.
  void set_model(Model& model, Replica& replica, int eval_batch);
  // --embedding-dim: the test records' inputs take their rows from the PS's tables (as they are
  // after the step evaluated), the chief evaluates alone, and reports the AUC too; a model of one
  // output (--loss bce) is reported so as well (its loss the logloss). After set_model.
  void set_ctr_input(CtrInput* ctr, Backend& backend);
  // --loss bce | mse | huber: the test set's float targets against the outputs, downloaded from
  // `backend` (worker/report/target_metrics.h); the chief evaluates alone.
  void set_target_loss(Loss loss, float huber_delta, Backend& backend);
  // The chief: a record of every epoch's figures goes to `metrics` too (worker/report/metrics_sink.h).
  void set_metrics(MetricsSink* metrics) { metrics_ = metrics; }

  // Every step's results, for the training figures of its epoch's report.
  void add(const StepMetrics& m) { epoch_.add(m); }
  // This worker's share evaluated after the previous step, to send with this step's pushes
  // (PushInfo::eval; samples 0: none). Taken once.
  EvalSums take_share();
  // A worker but the chief after `step`: its share when the evaluation after `step` is shared.
  // Its time goes to times->eval_us.
  void share_after(uint64_t step, StepTimes* times);
  // The chief after `step` of epoch `epoch` (both from 0; `last`: the job's last step), whose
  // results are `m`: reports a shared evaluation that came back with them, and at an epoch's end
  // evaluates its share, or all of the test set alone. Its time goes to times->eval_us.
  void report(uint64_t step, uint64_t epoch, bool last, const StepMetrics& m, StepTimes* times);

 private:
  bool evaluates_share_after(uint64_t step) const;
  void evaluate_share(StepTimes* times);
  void report_shared_evaluation(const StepMetrics& m);
  // partial_steps: the steps of an epoch the job ended in (0: a whole epoch).
  void report_epoch(uint64_t epoch, uint64_t step, const EvalSums& test, const std::string& how,
                    uint64_t partial_steps = 0);

  const EvaluationOptions o_;
  const bool chief_;
  const uint64_t steps_per_epoch_, total_steps_;
  TrainSummary* const summary_;
  std::unique_ptr<Dataset> test_data_;
  bool shared_ = false;
  Model* model_ = nullptr;
  Replica* replica_ = nullptr;
  int eval_batch_ = 0;
  StepStats epoch_;             // the training figures of the epoch so far
  EvalSums pending_eval_;       // this worker's share, to send with the next step's pushes
  uint64_t awaited_epoch_ = 0;  // the chief: the epoch whose shared evaluation comes with the next step
  uint64_t awaited_step_ = 0;   // the global step (from 1) after which it was made
  std::pair<double, double> awaited_train_;  // its training loss and accuracy
  MetricsSink* metrics_ = nullptr;
  CtrInput* ctr_ = nullptr;
  Backend* backend_ = nullptr;  // with ctr_ or a target loss: the logits come from it
  Loss loss_ = Loss::kSoftmax;
  float huber_delta_ = 1.0f;
};

// --evaluate's options (filled from the job's flags in main: worker/options_from_job.h).
struct EvaluateOptions {
  std::string init_params;               // --init-params: the saved model's directory
  bool model_given = false;              // --model or --hidden was given; else DIR/model.json's model
  std::string model;                     // --model; empty: the MLP of `hidden`
  std::vector<int> hidden = {256, 128};  // --hidden
  DataOptions data;                      // the test set (data.classes 0: the saved model's classes)
  BackendOptions backend;
  // --embedding-dim, --embedding-tables and --embedding-pool when --embedding-dim is given: they
  // must be model.json's (0: not given; the tables are model.json's).
  int embedding_dim = 0;
  bool per_field_tables = false;
  EmbeddingPool pool = EmbeddingPool::kSum;
};

// A saved model loaded for --evaluate or --predict, with the records it runs on.
struct LoadedModel {
  std::unique_ptr<Dataset> data;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<Replica> replica;
  // A CTR model (model.json's "embeddings"): its input, the rows from DIR/embeddings/.
  std::unique_ptr<RowSource> rows;
  std::unique_ptr<CtrInput> ctr;
  int batch = 0;  // records per forward pass
  float huber_delta = 1;  // of a --loss huber model
  LoadedModel();
  LoadedModel(LoadedModel&&) noexcept;
  ~LoadedModel();
};
// Loads --init-params (its model from DIR/model.json or the given one: worker/model/model_file.h) and
// opens `data`'s test set for it. Throws pstrain::Error (UsageError for a model that disagrees).
LoadedModel load_saved_model(const EvaluateOptions& options, const DataOptions& data);

// --evaluate: loads --init-params into its model, evaluates it on the test data (--test-data, or
// --data-dir's test set) and prints loss and accuracy (a model of another --loss than softmax:
// its figures, worker/report/target_metrics.h, against the data's float targets; a CTR model: the AUC
// and log loss too, its rows from DIR/embeddings/). No PS, no training. The model is
// DIR/model.json's, or --model/--hidden's; the number of classes is the saved model's, or
// --classes, else the length of the saved last layer's bias.
BatchStats evaluate_saved_model(const EvaluateOptions& options);

}  // namespace pstrain
