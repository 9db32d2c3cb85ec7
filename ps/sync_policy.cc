#include <vector>

#include "ps/policy.h"
#include "shared/error.h"

namespace pstrain {
namespace {

// Barrier per step: the update for step t is applied once all N workers pushed step t.
class SyncBarrier final : public ConsistencyPolicy {
 public:
  explicit SyncBarrier(int num_workers) : pushed_(static_cast<size_t>(num_workers), false) {}

  std::string check_push(int worker, uint64_t step, uint64_t version) const override {
    if (step != version) {
      return "push for step " + std::to_string(step) + " but the barrier is at step " +
             std::to_string(version);
    }
    if (pushed_[static_cast<size_t>(worker)]) {
      return "worker " + std::to_string(worker) + " already pushed step " + std::to_string(step);
    }
    return "";
  }

  bool record_push(int worker) override {
    pushed_[static_cast<size_t>(worker)] = true;
    return ++count_ == pushed_.size();
  }

  void applied() override {
    pushed_.assign(pushed_.size(), false);
    count_ = 0;
  }

  PullVerdict check_pull(uint64_t want, uint64_t version) const override {
    if (want <= version) return PullVerdict::kAnswerNow;
    if (want == version + 1) return PullVerdict::kPark;
    return PullVerdict::kReject;
  }

  bool has_pushed(int worker) const override { return pushed_[static_cast<size_t>(worker)]; }

  std::vector<int> missing() const override {
    std::vector<int> out;
    if (count_ == 0) return out;
    for (size_t i = 0; i < pushed_.size(); ++i) {
      if (!pushed_[i]) out.push_back(static_cast<int>(i));
    }
    return out;
  }

 private:
  std::vector<bool> pushed_;
  size_t count_ = 0;
};

}  // namespace

std::unique_ptr<ConsistencyPolicy> make_policy(const std::string& mode, int num_workers) {
  if (mode == "sync") return std::make_unique<SyncBarrier>(num_workers);
  throw Error("mode '" + mode + "' is not supported by the parameter server");
}

}  // namespace pstrain
