#include "ps/policy.h"

#include "shared/util/error.h"

namespace pstrain {

ConsistencyPolicy::ConsistencyPolicy(const ServerOptions& o) : mode_(o.mode) {
  mode_code(o.mode);  // throws for allreduce, which no PS serves
  switch (mode_) {
    case Mode::kSync:
      quorum_ = o.num_workers - o.backup_workers;
      backup_ = o.backup_workers > 0;
      backups_ = o.backup_workers;
      break;
    case Mode::kSsp:
      quorum_ = o.num_workers;
      window_ = static_cast<uint64_t>(o.staleness);
      break;
    case Mode::kAsync:
    case Mode::kAllreduce:  // refused above
      quorum_ = 1;
      break;
  }
}

const char* ConsistencyPolicy::name() const {
  return mode_name(mode_);
}

std::string ConsistencyPolicy::describe() const {
  if (mode_ == Mode::kSync && backup_) {
    return "sync with " + std::to_string(backups_) + " backup worker(s) (a step is applied once " +
           std::to_string(quorum_) + " workers pushed it)";
  }
  if (mode_ == Mode::kSsp) return "ssp (staleness " + std::to_string(window_) + ")";
  return name();
}

PushVerdict ConsistencyPolicy::check_push(int worker, uint64_t step, uint64_t based_on, uint64_t version,
                                          bool already) const {
  PushVerdict v;
  if (mode_ == Mode::kAsync) {
    // Applied now, onto whatever the chunk holds; it cannot come from a version not served yet.
    if (based_on > version) {
      v.kind = PushVerdict::kReject;
      v.reason = "push computed on version " + std::to_string(based_on) + " but the chunk is at version " +
                 std::to_string(version);
    }
    return v;
  }
  if (step < version && backup_) {
    v.kind = PushVerdict::kDrop;  // the step was applied without it (backup workers)
    return v;
  }
  if (step < version || step > version + window_) {
    v.kind = PushVerdict::kReject;
    v.reason = "push for step " + std::to_string(step) + " but the barrier is at step " + std::to_string(version) +
               (window_ > 0 ? " (staleness " + std::to_string(window_) + ")" : "");
    return v;
  }
  if (already) {
    v.kind = PushVerdict::kReject;
    v.reason = "worker " + std::to_string(worker) + " already pushed step " + std::to_string(step);
    return v;
  }
  v.slot = step - version;
  return v;
}

PullVerdict ConsistencyPolicy::check_pull(uint64_t want, uint64_t version) const {
  if (want <= version) return PullVerdict::kAnswerNow;
  if (mode_ != Mode::kAsync && want <= version + window_ + 1) return PullVerdict::kPark;
  return PullVerdict::kReject;
}

}  // namespace pstrain
