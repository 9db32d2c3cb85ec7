// Batch norm's global statistics over a PsChannel (sync, docs/models.md): each worker's sums go to
// ps0 (STATS), which answers every worker with all of theirs added (STATS_SUM).
//
// Threads and errors as the channel's (worker/ps_link/channel.h).
#pragma once

#include <cstdint>
#include <vector>

#include "worker/ps_link/channel.h"

namespace pstrain {

class StatsClient {
 public:
  // Needs the channel's hello() before combine().
  explicit StatsClient(PsChannel& channel) : channel_(channel) {}

  // This worker's sums of call `call` of `step` to ps0, replaced by every worker's added. Waits
  // up to --timeout for the others. Throws before sending when sums passes what a STATS carries
  // (kMaxStatsValues: ps0 would drop the peer), when ps0 refuses ("ps0 rejected batch-norm
  // statistics: ...") or answers with another size, or on timeout.
  void combine(uint64_t step, uint64_t call, std::vector<double>& sums);

 private:
  PsChannel& channel_;
};

}  // namespace pstrain
