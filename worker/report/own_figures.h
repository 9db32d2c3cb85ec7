// Every worker's own step breakdown as TensorBoard scalars, in DIR/w<i> beside the chief's event
// file in DIR (docs/operations.md, "TensorBoard"): TensorBoard shows each worker as a run of its
// own, with the tags of the chief's means (step_ms/compute, step_ms/wait, ...), so one chart
// draws every worker's part and the mean, and a straggler's compute stands apart from the others.
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
  // parts included): an event of the per-step means in ms at global step step+1 where the chief
  // writes a progress record (every log_every steps, an epoch's end) and at `last`.
  void add(uint64_t step, const StepTimes& times, bool last);

 private:
  std::unique_ptr<MetricsSink> sink_;
  const uint64_t log_every_, steps_per_epoch_;
  StepStats interval_{1};
};

}  // namespace pstrain
