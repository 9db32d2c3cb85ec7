#include "worker/ps_link/stats_client.h"

#include <cstring>
#include <string>

#include "shared/util/error.h"

namespace pstrain {

void StatsClient::combine(uint64_t step, uint64_t call, std::vector<double>& sums) {
  // ps0 disconnects a peer whose frame passes the bound STATS sets (docs/wire_protocol.md, "Frame
  // bound"): said here, before it is sent, rather than as a timeout.
  if (sums.size() > kMaxStatsValues) {
    throw Error("batch-norm statistics of " + std::to_string(sums.size()) +
                " values, more than a STATS carries (" + std::to_string(kMaxStatsValues) +
                "): give the job --batchnorm-stats local");
  }
  Header h = channel_.request(Op::kStats, step, 0);
  h.request_id = channel_.new_request();
  h.offset = call;
  h.length = sums.size() * sizeof(double) / 4;
  Frame payload(sums.data(), sums.size() * sizeof(double));
  channel_.send(0, h, &payload);
  std::vector<bool> pending(static_cast<size_t>(channel_.num_shards()), false);
  pending[0] = true;
  const std::vector<Message> replies =
      channel_.await(pending, h.request_id, Op::kStatsSum, "batch-norm statistics");
  const Message& reply = replies[0];
  if (reply.frames.size() != 2 || reply.frames[1].size() != sums.size() * sizeof(double)) {
    throw Error("ps0 sent batch-norm statistics of " +
                std::to_string(reply.frames.size() > 1 ? reply.frames[1].size() : 0) + " bytes, expected " +
                std::to_string(sums.size() * sizeof(double)));
  }
  std::memcpy(sums.data(), reply.frames[1].data(), sums.size() * sizeof(double));
}

}  // namespace pstrain
