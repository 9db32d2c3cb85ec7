#include "worker/connections.h"

#include <cstdlib>

#include "shared/config/job_topology.h"
#include "shared/config/part_options.h"
#include "shared/net/zmq_transport.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "worker/collective/ring_wire.h"
#include "worker/collective/shm_allreduce.h"
#include "worker/cuda/nccl_collective.h"
#include "worker/exchange/push_jitter.h"
#include "worker/options_from_job.h"
#include "worker/ps_link/ps_exchange.h"

namespace pstrain {
namespace {

// allreduce mode: rendezvous with the other workers through worker 0's coordinator. The ring
// is the collective itself (--collective ring) or NCCL's bootstrap (--collective nccl).
std::unique_ptr<Collective> join_ring(zmq::context_t& context, const JobOptions& o, const Security& security) {
  RingOptions ring;
  ring.rank = o.index;
  ring.world = o.num_workers;
  ring.coordinator = o.coordinator;
  ring.bind = o.bind;
  ring.timeout_s = o.timeout_s;
  ring.security = security;
  ring.start_timeout_s = o.start_timeout_s;
  ring.faults = worker_fault_rules(o);
  if (!o.port_file.empty()) {
    ring.on_coordinator_bound = [port_file = o.port_file](const std::string& address) {
      write_file_atomically(port_file, address + "\n");
    };
  }
  return make_ring_collective(context, ring);
}

std::vector<std::string> peer_addresses(const JobOptions& o) {
  std::vector<std::string> addresses = o.ps_hosts;
  if (o.mode == Mode::kAllreduce) addresses.insert(addresses.end(), {o.coordinator, o.bind + ":0"});
  return addresses;
}

}  // namespace

std::vector<FaultRule> worker_fault_rules(const JobOptions& o) {
  return parse_fault_rules(o.inject_faults, ring_op_names());
}

WorkerConnections::WorkerConnections(const JobOptions& o)
    : o_(o), security_(resolve_security(security_options(o_), peer_addresses(o_))),
      zap_(make_zap_handler(context_, security_)) {}

WorkerConnections::~WorkerConnections() = default;

std::unique_ptr<Exchange> WorkerConnections::make_dense_exchange(uint64_t total, Replica& replica) {
  if (o_.mode == Mode::kAllreduce && o_.collective == CollectiveKind::kNccl) {
    if (!replica.on_device()) {
      throw UsageError("--collective nccl needs a GPU (--device cuda, or auto where one is visible); "
                       "on the CPU use --collective ring");
    }
    auto nccl = make_nccl_collective(join_ring(context_, o_, security_), replica.cuda_device(), o_.timeout_s);
    return make_allreduce_exchange(exchange_options(o_), total, std::move(nccl), replica);
  }
  if (o_.mode == Mode::kAllreduce) {
    auto ring = make_shared_memory_collective(join_ring(context_, o_, security_), o_.timeout_s, o_.shared_memory);
    return make_allreduce_exchange(exchange_options(o_), total, std::move(ring), replica);
  }
  servers_ = make_zmq_client(context_, o_.ps_hosts, security_, o_.shared_memory);
  if (!o_.inject_faults.empty()) servers_ = with_faults(std::move(servers_), worker_fault_rules(o_));
  return make_ps_exchange(exchange_options(o_), total, *servers_, replica);
}

std::unique_ptr<Exchange> WorkerConnections::make_exchange(uint64_t total, Replica& replica) {
  auto exchange = make_dense_exchange(total, replica);
  // Hybrid mode: the dense parameters all-reduced, the embedding tables on the PS shards.
  if (job_topology(o_).hybrid) {
    servers_ = make_zmq_client(context_, o_.ps_hosts, security_, o_.shared_memory);
    exchange = make_hybrid_exchange(std::move(exchange), exchange_options(o_), total, *servers_);
  }
  return o_.push_jitter_ms > 0 ? with_push_jitter(std::move(exchange), o_.push_jitter_ms) : std::move(exchange);
}

}  // namespace pstrain
