// What pstrain-worker's trainer does around each step that a worker whose model is a script's
// (the Python package's, docs/python.md) needs too, through the same classes, so that a Python
// job's checkpoints and metrics are the binary's:
// * the chief's checkpoints through the PS shards (worker/train/checkpoints.h: which versions, the
//   manifest with the job's fingerprint, pruning, --resume's check), the checkpoint directory's
//   lock and SIGTERM as the request for a final checkpoint (worker/train/stop_request.h);
// * the chief's progress lines, metrics file and TensorBoard records (worker/report/progress.h) from the
//   steps' figures: the loss and right answers each worker's script gives with its push.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "shared/config/options.h"
#include "shared/train/layout.h"
#include "shared/util/dir_lock.h"
#include "worker/exchange/exchange.h"
#include "worker/model/model_file.h"
#include "worker/report/metrics_sink.h"
#include "worker/report/progress.h"
#include "worker/train/checkpoints.h"
#include "worker/train/trainer.h"

namespace pstrain {

class ScriptSteps {
 public:
  // Before any connection: the chief of a checkpointing job claims --checkpoint-dir (a second
  // job there is refused at once) and takes SIGTERM as a stop request; its metrics outputs are
  // opened (a path that cannot be written fails here).
  explicit ScriptSteps(const JobOptions& o);

  // The job is joined: the model is `variables` (the script's names and shapes, in the flat
  // vector's order; checkpoints' MANIFEST and model.json name them so, for pstrain-export), the
  // job `total_steps` long with `steps_per_epoch` steps an epoch (0: --epochs' share), and this
  // worker starts at `first_step` (> 0: resumed, whose checkpoint must be of this model).
  void started(const Layout& variables, uint64_t total_steps, uint64_t steps_per_epoch, uint64_t first_step);
  // The script reads the job's tables as `fields` fields pooled by `pool` (pstrain.Rows):
  // model.json's "embeddings" from then on.
  void tables_read(size_t fields, EmbeddingPool pool);
  // Before step `step`'s push: whether its version is checkpointed and the job stops after it.
  void plan(uint64_t step, PushInfo* info);
  // After it: the checkpoint's manifest once every shard wrote its file (the time in `times`),
  // and the chief's figures.
  void finished(uint64_t step, const PushInfo& info, const StepMetrics& m, StepTimes* times);

 private:
  const TrainOptions t_;
  const bool chief_;
  DirLock checkpoint_lock_;
  const std::atomic<bool>* stop_requested_ = nullptr;
  MetricsSinks metrics_;
  Layout layout_;  // ChiefCheckpoints holds it: declared before
  ModelDescription model_;  // the script's: its variables and tables (model.json)
  std::unique_ptr<ChiefCheckpoints> checkpoints_;
  std::unique_ptr<Progress> progress_;
  uint64_t total_steps_ = 0, steps_per_epoch_ = 1;
};

}  // namespace pstrain
