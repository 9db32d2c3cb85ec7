// What a worker allocates on its device, computed before it allocates it (docs/operations.md,
// "GPU workers: placement and memory"), and the micro-batch --batch-size auto picks from it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace pstrain {

struct MemoryPlan {  // MiB
  double params = 0, grads = 0, activations = 0, input = 0, workspace = 0;
  double total() const { return params + grads + activations + input + workspace; }
  // "params 0.90 + grads 0.90 + activations 1.20 + input 0.00 + workspace 0.00 = 3.00 MiB"
  std::string text() const;
};

// How a worker computes its share of a step.
struct BatchChoice {
  int micro = 0;          // samples computed at once
  int micro_batches = 0;  // ceil(share / micro): the step accumulates this many
  int eval_batch = 0;     // the test-set batch of a worker that evaluates (also bounded by the plan)
};

// --batch-size auto: the largest micro-batch up to `share` (and evaluation batch up to
// `eval_batch`) whose plan, `plan_for(rows)` for activations of `rows` samples, fits in
// `limit_mib` (0 = no limit: the whole share). A worker that evaluates (`chief`: the chief, or
// any worker where the evaluations are shared) must fit the larger of the two. Throws pstrain::Error when not even one sample fits, naming the plan.
BatchChoice choose_batch(int share, int eval_batch, bool chief, double limit_mib,
                         const std::function<MemoryPlan(int rows)>& plan_for);

}  // namespace pstrain
