// A parameter-server shard's loop: it owns the endpoint (docs/threading.md), receives with a
// deadline, decodes and validates every message, answers HELLO with the workers' membership
// (ps/membership.h), and routes the rest by operation to the shard's services: the dense one
// (ps/dense_service.h: INIT, PUSH, PULL, CLIP), the sparse one (ps/sparse_service.h: SPARSE_PULL,
// SPARSE_PUSH) and the statistics (ps/stats_service.h: STATS). The services return what a request
// did; the loop then asks the step gate (ps/step_gate.h) whether a sync step is whole across the
// dense chunks and the tables, writes the checkpoints (ps/checkpoints.h) and tells the services
// what may go out. It sends the replies and rejections (the services' Replier), reports stalled
// barriers and tells waiting workers what they wait for (ps/barrier_reports.h), and serves until
// every worker said DONE.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ps/barrier_reports.h"
#include "ps/checkpoints.h"
#include "ps/dense_service.h"
#include "ps/membership.h"
#include "ps/peer_log.h"
#include "ps/policy.h"
#include "ps/replier.h"
#include "ps/server_options.h"
#include "ps/sparse_service.h"
#include "ps/stats_service.h"
#include "ps/step_gate.h"
#include "shared/net/transport.h"
#include "shared/wire/protocol.h"

namespace pstrain {

class ParameterServer : private Replier {
 public:
  // `endpoint` must outlive the server; the calling thread of serve() owns it.
  ParameterServer(const ServerOptions& options, Endpoint& endpoint);
  ~ParameterServer() override;
  // Serves until every worker has said DONE. Throws pstrain::Error on a fatal failure.
  void serve();

  uint64_t version() const;                // of the least advanced chunk
  std::vector<float> params() const;       // a copy of the slice
  uint64_t rejected() const { return rejected_; }  // messages answered with an error or dropped

 private:
  void handle(Message& msg);
  bool route(Message& msg, const Header& h, int worker, std::string* error);
  void on_hello(const Message& msg, const Header& h);
  bool start_job(const Header& h, std::string* error);
  bool on_push(Message& msg, const Header& h, std::string* error);
  bool on_sparse_push(const Message& msg, const Header& h, std::string* error);
  void on_done(const Message& msg, const Header& h);
  // What follows a service's outcome: checkpoints, the gate, and the chunks or rows that may go.
  void advanced(const Outcome& out);  // chunk_advanced for the part(s) an update advanced
  void chunk_advanced(size_t index);
  void tables_advanced();
  void settle_step();  // held steps: applies a step once the gate says it is whole
  uint64_t dense_limit() const;
  void reject(const std::string& route, uint64_t request_id, const std::string& why);
  void answer(const std::string& route, Op op, uint64_t request_id, const std::string& message);  // no payload
  void reply(const std::string& route, Header h, Frame* payload) override;
  Traffic traffic() const override { return Traffic{bytes_in_, bytes_out_}; }
  void report_stall();
  void tell_waiting();
  bool oldest_barrier(Barrier* b, bool* dense) const;

  const ServerOptions options_;
  Endpoint& endpoint_;
  ConsistencyPolicy policy_;
  StepGate gate_;
  Membership members_;
  ShardCheckpoints checkpoints_;
  DenseService dense_;
  SparseService sparse_;
  StatsService stats_;
  BarrierReports reports_;
  uint64_t rejected_ = 0;
  // Message frame bytes received and handed to the endpoint (headers and payload frames; values
  // in shared memory are not frames), for the PARAMS headers' b_in and b_out.
  uint64_t bytes_in_ = 0, bytes_out_ = 0;
  ReplyDrops drops_;  // peers whose replies cannot go, logged once each (ps/peer_log.h)
  long rss_start_kib_ = 0;  // resident memory when serve() began (the last line shows it beside the peak)
};

}  // namespace pstrain
