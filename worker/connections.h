// What a worker process connects to, made from the job's flags: ZeroMQ's context, CURVE (the
// job's key and the ZAP handler that checks peers), the PS shards' endpoint and the ring's
// rendezvous; and the exchange (worker/exchange/exchange.h) of the job's mode over them: the PS (sync,
// async, ssp), the all-reduce (ring, shared memory or NCCL), or hybrid, with --inject-faults and
// --push-jitter-ms. One place for it, used by pstrain-worker (worker/main.cc) and the Python
// package (worker/python/), so that a Python worker joins a job exactly as the binary does.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <zmq.hpp>

#include "shared/config/options.h"
#include "shared/net/curve.h"
#include "shared/net/fault_endpoint.h"
#include "shared/net/transport.h"
#include "worker/backend/replica.h"
#include "worker/exchange/exchange.h"

namespace pstrain {

// --inject-faults: a worker's rules name the PS protocol's operations and the ring's. Throws
// pstrain::UsageError for a malformed rule.
std::vector<FaultRule> worker_fault_rules(const JobOptions& o);

class WorkerConnections {
 public:
  // Resolves CURVE for the job's addresses and starts the ZAP handler; connects nothing yet.
  // Throws pstrain::UsageError for a key that cannot be read (docs/security.md).
  explicit WorkerConnections(const JobOptions& o);
  ~WorkerConnections();
  WorkerConnections(const WorkerConnections&) = delete;
  WorkerConnections& operator=(const WorkerConnections&) = delete;

  // The exchange of the job's mode for a model of `total` floats whose buffers `replica` holds.
  // Connects to the PS shards or joins the ring (with their deadlines: --timeout,
  // --start-timeout). Call at most once; the exchange must be destroyed before this object.
  std::unique_ptr<Exchange> make_exchange(uint64_t total, Replica& replica);

 private:
  std::unique_ptr<Exchange> make_dense_exchange(uint64_t total, Replica& replica);

  JobOptions o_;
  zmq::context_t context_{1};
  Security security_;
  std::unique_ptr<ZapHandler> zap_;  // ring links are CURVE servers too
  std::unique_ptr<Endpoint> servers_;
};

}  // namespace pstrain
