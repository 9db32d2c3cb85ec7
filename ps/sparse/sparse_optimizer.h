// The optimizers of embedding rows, applied on the PS to the rows a step touched, with their
// state ("slots", each dim floats) stored beside the row's weights. The formulas are in
// docs/sparse.md; every one is element-wise, like the dense ones (shared/train/optimizer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "shared/util/modes.h"

namespace pstrain {

struct SparseOptimizerOptions {
  TableOptimizer kind = TableOptimizer::kAdagrad;  // adam: lazy
  double beta1 = 0.9;                // adam: first-moment decay
  double beta2 = 0.999;              // adam: second-moment decay
  double epsilon = 1e-8;             // adam and adagrad: added to the denominator
  double initial_accumulator = 0.1;  // adagrad's accumulator and ftrl's n start here
  double ftrl_beta = 1.0;            // ftrl: beta of the per-coordinate rate alpha / (beta + sqrt(n))
  double l1 = 0.0;                   // ftrl: L1 strength (exact zeros below it)
  double l2 = 0.0;                   // ftrl: L2 strength
};

class SparseOptimizer {
 public:
  virtual ~SparseOptimizer() = default;
  virtual TableOptimizer kind() const = 0;
  virtual size_t slots() const = 0;  // slot vectors of dim floats beside each row
  // A new row's slots (slots() * dim floats).
  virtual void init_slots(size_t dim, float* slots) const = 0;
  // One update of a row: w its dim weights, slots its slots, grad_sum the summed gradient (the
  // gradient is grad_scale * grad_sum, as for the dense optimizers), lr this step's learning
  // rate (ftrl's alpha; > 0 for ftrl), updates the row's updates before this one (lazy Adam's
  // bias correction counts the row's own updates).
  virtual void apply(size_t dim, float* w, float* slots, const float* grad_sum, float grad_scale, double lr,
                     uint64_t updates) const = 0;
};

// Throws pstrain::Error for an unknown kind or a hyper-parameter out of range.
std::unique_ptr<SparseOptimizer> make_sparse_optimizer(const SparseOptimizerOptions& options);

}  // namespace pstrain
