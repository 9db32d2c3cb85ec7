// The consistency-policy seam of the PS: when a push is accepted, when accumulated gradients
// are applied, and when a pull can be answered. `sync` is the barrier of DESIGN.md; `async` and
// `ssp` slot in here later.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstrain {

enum class PullVerdict { kAnswerNow, kPark, kReject };

class ConsistencyPolicy {
 public:
  virtual ~ConsistencyPolicy() = default;
  // Whether `worker` may push its gradient for `step` now that the store is at `version`.
  // Returns "" if so, else the reason to reject it.
  virtual std::string check_push(int worker, uint64_t step, uint64_t version) const = 0;
  // Records an accepted push; true when the accumulated gradients must be applied now.
  virtual bool record_push(int worker) = 0;
  // Called after the store applied the accumulated gradients.
  virtual void applied() = 0;
  // What to do with a pull for parameter version `want` while the store is at `version`.
  virtual PullVerdict check_pull(uint64_t want, uint64_t version) const = 0;
  // Workers the pending update still waits for (empty if none is pending).
  virtual std::vector<int> missing() const = 0;
  // Whether `worker` has pushed the pending update.
  virtual bool has_pushed(int worker) const = 0;
};

// mode "sync": every worker pushes step t, then the update is applied once.
std::unique_ptr<ConsistencyPolicy> make_policy(const std::string& mode, int num_workers);

}  // namespace pstrain
