// STATS on shard 0 (docs/models.md, "batchnorm"): the loop (ps/server.h) routes a worker's
// batch-norm sums here; once every worker's sums of a call are in (ps/stats_combiner.h), each gets
// STATS_SUM through the loop's Replier. Single-threaded: the loop's thread.
#pragma once

#include <string>

#include "ps/replier.h"
#include "ps/server_options.h"
#include "ps/stats_combiner.h"
#include "shared/net/transport.h"
#include "shared/wire/protocol.h"

namespace pstrain {

class StatsService {
 public:
  // `options` and `replier` must outlive it.
  StatsService(const ServerOptions& options, Replier& replier)
      : options_(options), replier_(replier), stats_(options.num_workers) {}

  // A STATS of registered `worker`: false, with the reason, for one refused.
  bool stats(const Message& msg, const Header& h, int worker, std::string* error);

 private:
  const ServerOptions& options_;
  Replier& replier_;
  StatsCombiner stats_;
};

}  // namespace pstrain
