// Rendezvous of the ring collective (docs/collective.md): rank 0 runs a server endpoint on the
// coordinator address; every other rank connects a client endpoint (shared/net/transport.h),
// sends HELLO with the address of its ring link and receives PENDING updates (who has not joined
// yet) and finally ADDRESSES, every rank's ring address. A missing, duplicate or misconfigured
// rank is a pstrain::Error naming it.
#pragma once

#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "shared/net/transport.h"
#include "worker/collective/collective.h"

namespace pstrain {

struct RingRendezvous {
  std::vector<std::string> addresses;  // ring link address of every rank, indexed by rank
  // The coordinator endpoint. The collective keeps it open so that the last ADDRESSES rank 0
  // sent are delivered even if rank 0 goes on quickly; nothing else uses it.
  std::unique_ptr<Endpoint> coordinator;
};

// Runs the rendezvous for options.rank (world >= 2) within options.timeout_s. `ring_address` is
// the "host:port" this rank's ring link is bound to; a wildcard host (0.0.0.0 or *) is replaced
// by an address the others can reach (see RingOptions::bind).
RingRendezvous ring_rendezvous(zmq::context_t& context, const RingOptions& options,
                               const std::string& ring_address);

// "rank 2" / "ranks 2, 3".
std::string rank_list(const std::vector<int>& ranks);

}  // namespace pstrain
