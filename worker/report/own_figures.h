// Every worker's own step breakdown and training loss as TensorBoard scalars, in DIR/w<i> beside
// the chief's run in DIR/chief (docs/operations.md, "TensorBoard"): TensorBoard shows each worker
// as a run of its own, with the tags of the chief's means (step_ms/compute, step_ms/wait, ...,
// train/loss: the mean over this worker's own samples), so one chart draws every worker's part and
// the job's, and a straggler's compute, or a worker whose shard's loss differs, stands apart.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shared/wire/protocol.h"
#include "worker/report/progress.h"

namespace pstrain {

class MetricsSink;

class OwnStepFigures final {
 public:
  // Opens an event file in DIR/w<index> (made if missing); throws pstrain::Error naming
  // --tensorboard-dir and the path when it cannot be made, before the first step.
  OwnStepFigures(const std::string& tensorboard_dir, int index, int log_every, uint64_t steps_per_epoch);
  ~OwnStepFigures();

  // After `step` (global, from 0) with this worker's times of it (its evaluation and checkpoint
  // parts included) and its own samples and loss sum of it: an event of the per-step means in ms
  // and of the mean loss per sample at global step step+1 where the chief writes a progress
  // record (every log_every steps, an epoch's end) and at `last`.
  void add(uint64_t step, const StepTimes& times, uint64_t samples, double loss_sum, bool last);

 private:
  std::unique_ptr<MetricsSink> sink_;
  const uint64_t log_every_, steps_per_epoch_;
  StepStats interval_{1};
};

}  // namespace pstrain
