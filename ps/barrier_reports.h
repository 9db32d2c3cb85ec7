// What a PS shard says of a barrier that waits: the stall line in its log every --stall-report-s
// (a DONE waiting for messages, the barrier's missing workers, or the workers not registered
// yet), and the WAITING its parked pulls get once a second, naming the pushes the barrier lacks
// (docs/operations.md, "Partitions": a worker whose PS is reachable waits on for a peer that is
// not). Words and timing only: the loop (ps/server.h) finds the barrier and sends.
#pragma once

#include <string>
#include <vector>

#include "ps/store.h"
#include "shared/net/transport.h"
#include "shared/util/clock.h"
#include "shared/wire/protocol.h"

namespace pstrain {

class BarrierReports {
 public:
  BarrierReports(int index, int num_workers, double stall_report_s)
      : index_(index), num_workers_(num_workers), stall_after_(stall_report_s) {}

  void start(Clock::time_point now) { last_stall_ = now; }
  bool stall_due(Clock::time_point now) const { return now - last_stall_ >= stall_after_; }
  // The stall lines due now: `dones` (Membership::waiting_dones), then the barrier's (`b`, the
  // dense store's if `dense`, else the tables'; null: none waits) or the `unregistered` workers'.
  std::vector<std::string> stall(Clock::time_point now, const std::string& dones, const Barrier* b,
                                 bool dense, const std::vector<int>& unregistered);
  // Whether the parked pulls get a WAITING now for barrier `b`; *h is it then (request id unset).
  bool waiting(Clock::time_point now, const Barrier& b, bool dense, Header* h);

 private:
  const int index_;
  const int num_workers_;
  const std::chrono::duration<double> stall_after_;
  Clock::time_point last_stall_;
  Clock::time_point last_waiting_;  // when the parked pulls were last told what their barrier waits for
};

}  // namespace pstrain
