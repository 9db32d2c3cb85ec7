#include "ps/policy.h"

#include "shared/util/error.h"

namespace pstrain {

ConsistencyPolicy::ConsistencyPolicy(const ServerOptions& o) : mode_(mode_code(o.mode)) {
  switch (mode_) {
    case ModeCode::kSync:
      quorum_ = o.num_workers - o.backup_workers;
      backup_ = o.backup_workers > 0;
      backups_ = o.backup_workers;
      break;
    case ModeCode::kSsp:
      quorum_ = o.num_workers;
      window_ = static_cast<uint64_t>(o.staleness);
      break;
    case ModeCode::kAsync:
      quorum_ = 1;
      break;
  }
}

const char* ConsistencyPolicy::name() const {
  switch (mode_) {
    case ModeCode::kSync: return "sync";
    case ModeCode::kAsync: return "async";
    case ModeCode::kSsp: return "ssp";
  }
  return "?";
}

std::string ConsistencyPolicy::describe() const {
  if (mode_ == ModeCode::kSync && backup_) {
    return "sync with " + std::to_string(backups_) + " backup worker(s) (a step is applied once " +
           std::to_string(quorum_) + " workers pushed it)";
  }
  if (mode_ == ModeCode::kSsp) return "ssp (staleness " + std::to_string(window_) + ")";
  return name();
}

PushVerdict ConsistencyPolicy::check_push(int worker, uint64_t step, uint64_t based_on, uint64_t version,
                                          bool already) const {
  PushVerdict v;
  if (mode_ == ModeCode::kAsync) {
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
  if (mode_ != ModeCode::kAsync && want <= version + window_ + 1) return PullVerdict::kPark;
  return PullVerdict::kReject;
}

}  // namespace pstrain
