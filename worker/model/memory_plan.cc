#include "worker/model/memory_plan.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "shared/util/error.h"

namespace pstrain {
namespace {

std::string fixed2(double value) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << value;
  return os.str();
}

// The largest rows in [1, cap] with plan_for(rows) within the limit (the plan grows with rows),
// or 0 if not even one fits.
int largest_fitting(int cap, double limit_mib, const std::function<MemoryPlan(int)>& plan_for) {
  if (plan_for(1).total() > limit_mib) return 0;
  int lo = 1, hi = cap;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (plan_for(mid).total() <= limit_mib) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace

std::string MemoryPlan::text() const {
  return "params " + fixed2(params) + " + grads " + fixed2(grads) + " + activations " + fixed2(activations) +
         " + input " + fixed2(input) + " + workspace " + fixed2(workspace) + " = " + fixed2(total()) + " MiB";
}

BatchChoice choose_batch(int share, int eval_batch, bool chief, double limit_mib,
                         const std::function<MemoryPlan(int rows)>& plan_for) {
  PSTRAIN_CHECK(share >= 1 && eval_batch >= 1);
  BatchChoice c;
  int rows = chief ? std::max(share, eval_batch) : share;
  if (limit_mib > 0) {
    rows = largest_fitting(rows, limit_mib, plan_for);
    if (rows == 0) {
      throw Error("--batch-size auto: not even a micro-batch of 1 sample fits the memory limit of " +
                  fixed2(limit_mib) + " MiB (its plan: " + plan_for(1).text() + ")");
    }
  }
  c.micro = std::min(share, rows);
  c.micro_batches = (share + c.micro - 1) / c.micro;
  c.eval_batch = std::min(eval_batch, rows);
  return c;
}

}  // namespace pstrain
