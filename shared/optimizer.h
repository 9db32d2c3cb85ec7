// Optimizers applied where the parameters live (on the PS, or on a worker in all-reduce mode).
// Every update is element-wise, so applying it slice by slice on S shards gives the same result
// as applying it to the whole vector at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "shared/options.h"

namespace pstrain {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of params[0, n) with gradient grad_scale * grad_sum (grad_sum is the sum of the
  // per-sample gradients, grad_scale is 1 / number of samples) and learning rate lr.
  virtual void apply(float* params, const float* grad_sum, float grad_scale, double lr) = 0;
  virtual size_t size() const = 0;
  virtual long steps() const = 0;  // updates applied so far
};

// The learning rate of update `step` (0-based) of a job of `total_steps` updates.
double scheduled_lr(const OptimizerOptions& options, uint64_t step, uint64_t total_steps);

// Creates the optimizer for `n` parameters with zeroed state; throws pstrain::Error for an
// unknown kind.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, size_t n);

}  // namespace pstrain
