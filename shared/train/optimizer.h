// Optimizers applied where the parameters live (on the PS, or on a worker in all-reduce mode).
// Every update is element-wise, so applying it chunk by chunk, slice by slice on S shards, gives
// the same result as applying it to the whole vector at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/util/modes.h"

namespace pstrain {

// --optimizer and its hyper-parameters (filled from the job's flags in main).
struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdam;  // adamw: Adam whose weight decay is decoupled
  double lr = 1e-3;             // learning rate
  double momentum = 0.9;        // momentum coefficient (momentum)
  double beta1 = 0.9;           // Adam first-moment decay
  double beta2 = 0.999;         // Adam second-moment decay
  double epsilon = 1e-8;        // Adam denominator epsilon
  double weight_decay = 0.0;    // decoupled weight decay (all optimizers)
  LrSchedule schedule = LrSchedule::kConstant;  // scheduled_lr
  uint64_t warmup_steps = 0;  // lr rises linearly over the first this many steps, then the schedule
  uint64_t decay_steps = 0;   // step: decay every this many steps; cosine-restarts: the first cycle
  double decay_rate = 0.1;    // step: the factor of each decay
  double cycle_mult = 1.0;    // cosine-restarts: each cycle this many times as long as the one before
  // Each step's mean gradient is scaled down to this global norm where it is longer (0: never);
  // the norm is the whole vector's, over every PS shard (shared/train/clip_norm.h).
  double clip_norm = 0.0;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of elements [offset, offset+n) of the optimizer's range: params and grad_sum point
  // at those n elements. The gradient is grad_scale * grad_sum (grad_sum sums per-sample
  // gradients, grad_scale is 1 / samples); lr is this update's learning rate; step counts the
  // updates of these elements so far (0 for the first), for Adam's bias correction.
  virtual void apply(size_t offset, size_t n, float* params, const float* grad_sum, float grad_scale,
                     double lr, uint64_t step) = 0;
  virtual size_t size() const = 0;
  // The optimizer's state, for checkpoints: slots of size() floats each (none for SGD, the
  // velocity for momentum, Adam's two moments). Adam's step count is the update's `step`.
  virtual std::vector<std::vector<float>*> state() { return {}; }
};

// The learning rate of update `step` (0-based) of a job of `total_steps` updates: lr * (step + 1) /
// warmup_steps during the warm-up, then over the steps after it (s from 0): constant; cosine to 0
// at the job's end; step, lr * decay_rate^floor(s / decay_steps); cosine-restarts, a cosine from
// lr to 0 over each cycle, the first decay_steps long, each next cycle_mult times longer (SGDR).
double scheduled_lr(const OptimizerOptions& options, uint64_t step, uint64_t total_steps);

// Creates the optimizer for a range of `n` parameters with zeroed state; throws pstrain::Error
// for an unknown kind.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, size_t n);

}  // namespace pstrain
