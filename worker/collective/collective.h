// Collectives among the N workers of `--mode allreduce` (docs/design.md, "Modes"): no PS on the data path.
// `make_ring_collective` is the ZeroMQ ring on host buffers (docs/collective.md); an NCCL
// implementation of the same interface works on GPU buffers.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <zmq.hpp>

#include "shared/net/curve.h"
#include "shared/net/fault_endpoint.h"

namespace pstrain {

// One per worker process. Not thread-safe: the thread that created it owns its sockets and is
// the only one that may call it (docs/threading.md). Every rank must call the same collectives
// in the same order with the same sizes. After an Error the object stays failed: later calls
// throw at once.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Where allreduce_sum's `data` lives: host memory (false, the ring) or the memory of the
  // process's current CUDA device (true, NCCL).
  virtual bool on_device() const { return false; }
  // In-place sum of data[0, n) and of scalars[0, k) over all ranks; every rank gets identical
  // bits. Throws pstrain::Error naming the peer when a peer does not answer before the deadline.
  // Returns (or throws) only once ZeroMQ holds no reference to `data` any more.
  virtual void allreduce_sum(float* data, size_t n, double* scalars, size_t k) = 0;
  // Host memory of n floats this rank may fill with its next allreduce_sum's data and pass as
  // `data`: the sum is then done where it lies, with no copy in or out (the shared-memory
  // collective's own slot; it holds the sum after the call). nullptr where there is none: the
  // ring, NCCL, a shared-memory collective before its first call or for a larger n.
  virtual float* input_buffer(size_t n) {
    (void)n;
    return nullptr;
  }
  // Broadcast of a small blob (at most kMaxBroadcastBytes) from rank 0, e.g. an NCCL unique id;
  // returns rank 0's bytes on every rank. The argument is ignored on the other ranks.
  virtual std::string broadcast(const std::string& blob_from_rank0) = 0;
};

constexpr size_t kMaxBroadcastBytes = 1 << 20;
constexpr size_t kMaxScalars = 1024;

struct RingOptions {
  int rank = 0;                    // this rank, 0 <= rank < world
  int world = 1;                   // number of ranks
  std::string coordinator;         // "host:port" where rank 0 listens for the rendezvous; rank 0
                                   // may give port 0 (any free port, see on_coordinator_bound)
  std::string bind = "127.0.0.1";  // address this rank binds for its ring link (any free port);
                                   // 0.0.0.0 binds all interfaces and is announced as the address
                                   // rank 0 sees the rank's rendezvous connection come from
  double timeout_s = 60;           // deadline of every blocking wait, in seconds
  double start_timeout_s = 0;      // deadline of the rendezvous (peers still starting); 0 = timeout_s
  size_t chunk_bytes = 4 << 20;    // pipeline unit on the wire; must be the same on every rank
  Security security;               // CURVE on the coordinator and ring sockets when on
  std::vector<FaultRule> faults;   // testing: faults on the ring link's messages (--inject-faults)
  // Rank 0 only: called with the coordinator's bound "host:port" (the port chosen when
  // `coordinator` ends in ":0") before it waits for the others; e.g. to write a port file.
  std::function<void(const std::string& address)> on_coordinator_bound;
};

// Rendezvous: rank 0 binds `coordinator`; every rank binds its own ring socket on a free port of
// `bind`; ranks 1..N-1 tell rank 0 their address over the coordinator socket and rank 0 answers
// everyone with the full address list; then each rank connects to its right neighbour and checks
// the link. world == 1 needs no sockets. Throws pstrain::Error naming the missing rank(s) when
// the rendezvous does not complete within start_timeout_s (and the link check within
// timeout_s); while waiting it logs "waiting for rank r" after 1 s, then every 5 s.
std::unique_ptr<Collective> make_ring_collective(zmq::context_t& context, const RingOptions& options);

}  // namespace pstrain
