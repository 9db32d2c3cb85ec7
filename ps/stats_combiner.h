// Batch norm's global statistics over the PS (docs/models.md, "batchnorm"; docs/wire_protocol.md,
// STATS): shard 0 collects every worker's per-channel sums of one call (a step and the call's
// number within it), adds them in worker order in double, and answers each worker with the same
// sums. The workers call in lockstep, so one call at a time is open; a second is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shared/wire/protocol.h"

namespace pstrain {

class StatsCombiner {
 public:
  // The most doubles one call carries (2 x channels + 1 per batchnorm layer).
  static constexpr size_t kMaxValues = kMaxStatsValues;

  explicit StatsCombiner(int num_workers) : num_workers_(num_workers) {}

  // A call complete: who asked (route, request id), in worker order, and the sums.
  struct Complete {
    std::vector<std::pair<std::string, uint64_t>> askers;
    std::vector<double> sums;
  };
  // Worker `worker`'s sums for call (step, call), asked by (route, request_id). Returns "" or why
  // it is refused (another call open, sizes that differ, a worker's second contribution); sets
  // *complete once every worker's sums are in.
  std::string add(int worker, const std::string& route, uint64_t request_id, uint64_t step, uint64_t call,
                  std::vector<double> values, std::optional<Complete>* complete);
  bool open() const { return have_ > 0; }

 private:
  const int num_workers_;
  uint64_t step_ = 0, call_ = 0;  // the open call's
  size_t size_ = 0;                // its values per worker
  int have_ = 0;
  std::vector<std::vector<double>> by_worker_;
  std::vector<std::pair<std::string, uint64_t>> askers_;
};

}  // namespace pstrain
