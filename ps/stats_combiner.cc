#include "ps/stats_combiner.h"

namespace pstrain {

std::string StatsCombiner::add(int worker, const std::string& route, uint64_t request_id, uint64_t step,
                               uint64_t call, std::vector<double> values, std::optional<Complete>* complete) {
  complete->reset();
  if (worker < 0 || worker >= num_workers_) {
    return "STATS from worker " + std::to_string(worker) + " of " + std::to_string(num_workers_);
  }
  if (values.empty() || values.size() > kMaxValues) {
    return "STATS of " + std::to_string(values.size()) + " values (1 to " + std::to_string(kMaxValues) + ")";
  }
  const auto w = static_cast<size_t>(worker);
  if (have_ > 0) {
    if (step != step_ || call != call_) {
      return "STATS for step " + std::to_string(step) + " call " + std::to_string(call) + " while step " +
             std::to_string(step_) + " call " + std::to_string(call_) + " is open";
    }
    if (!by_worker_[w].empty()) return "STATS: worker " + std::to_string(worker) + " sent this call's sums twice";
    if (values.size() != size_) {
      return "STATS of " + std::to_string(values.size()) + " values, other workers sent " + std::to_string(size_);
    }
  } else {
    step_ = step;
    call_ = call;
    size_ = values.size();
    by_worker_.assign(static_cast<size_t>(num_workers_), {});
    askers_.assign(static_cast<size_t>(num_workers_), {});
  }
  by_worker_[w] = std::move(values);
  askers_[w] = {route, request_id};
  if (++have_ < num_workers_) return "";
  Complete done;
  done.sums.assign(size_, 0.0);
  for (const std::vector<double>& v : by_worker_) {  // in worker order: the same bits every run
    for (size_t i = 0; i < size_; ++i) done.sums[i] += v[i];
  }
  done.askers = std::move(askers_);
  *complete = std::move(done);
  have_ = 0;
  by_worker_.clear();
  askers_.clear();
  return "";
}

}  // namespace pstrain
