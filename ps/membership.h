// Who a PS shard serves: the job every worker's HELLO must agree on (learned from the first),
// which peer (ZeroMQ route) is which worker, replacements (--allow-rejoin), the same-host
// workers' shared-memory segments, and who said DONE. Owned by the server loop's one thread
// (docs/threading.md); it neither sends nor touches the parameters.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ps/job_shape.h"
#include "ps/policy.h"
#include "ps/server_options.h"
#include "shared/wire/protocol.h"
#include "shared/net/shared_memory.h"

namespace pstrain {

class Membership {
 public:
  // Both must outlive it.
  Membership(const ServerOptions& options, const ConsistencyPolicy& policy);

  // A HELLO from `route`: "" when it may register, else why not (nothing is changed).
  std::string check_hello(const std::string& route, const Header& h) const;
  const JobShape& job() const { return job_; }
  bool job_known() const { return job_.total != 0; }
  void learn_job(const Header& hello);
  void forget_job();  // the first HELLO could not be served: every HELLO gets the same answer

  // Registers `route` as `worker` after check_hello; true when it replaces another peer of it.
  bool admit(const std::string& route, int worker);
  int worker_of(const std::string& route) const;  // -1: it never said HELLO
  bool rejoined(int worker) const { return rejoined_[static_cast<size_t>(worker)]; }
  std::vector<int> unregistered() const;

  // The worker's segment for this shard's slice of `slice_length` floats (docs/wire_protocol.md,
  // "Shared memory"): unmaps the one it had, maps the one its HELLO names; true if it did.
  bool map_segment(int worker, const Header& hello, uint64_t slice_length);
  bool has_segment(int worker) const { return segment_of_worker_[static_cast<size_t>(worker)].mapped(); }
  const float* gradient_in_segment(int worker) const;  // the slice's first float; nullptr: none
  float* params_in_segment(int worker) const;          // the PS's parameters of the slice there
  // The shard's parameter area: whether `worker` was offered it (WELCOME shm 2); heard_from says
  // whether it had been and has sent a message since; area_settled whether every worker has.
  void offered_area(int worker, bool offered) { area_unmapped_[static_cast<size_t>(worker)] = offered; }
  bool heard_from(int worker);
  bool area_settled() const;

  // Every message of a registered worker, by operation (from its HELLO on: a replacement starts
  // again), for DONE's check.
  void received(int worker, Op op) { ++received_[static_cast<size_t>(worker)][static_cast<size_t>(op)]; }
  // DONE `h` from `route` (its stop: the worker stopped before the job's end): true when the worker is done (every message its DONE counts has
  // arrived: acknowledge it). Else false: the DONE waits, *why names what has not arrived (or
  // says why its counts are refused, *refused set: answer ERROR).
  bool done(int worker, const std::string& route, const Header& h, std::string* why, bool* refused);
  // A waiting DONE of `worker` whose messages are all in now: the worker is done, and *route and
  // *request_id say whom to acknowledge.
  bool settle_done(int worker, std::string* route, uint64_t* request_id);
  // The DONEs that wait, for the stall report ("w2's DONE waits for 1 SPARSE_PUSH (39 of 40
  // arrived)"); "" when none.
  std::string waiting_dones() const;
  bool all_done() const { return num_done_ >= options_.num_workers; }
  // Whether any worker said it stopped before the job's end: the job has no result yet.
  bool stopped() const { return stopped_; }

 private:
  std::string check_job(const Header& h) const;
  std::string check_registration(const std::string& route, const Header& h) const;
  std::string shard_too_big(uint64_t total) const;

  const ServerOptions& options_;
  const ConsistencyPolicy& policy_;
  JobShape job_;
  std::map<std::string, int> worker_of_route_;
  std::vector<std::string> route_of_worker_;
  std::vector<SharedMemory> segment_of_worker_;  // same-host workers' segments (unmapped: sockets)
  uint64_t slice_length_ = 0;                    // of the slice the segments were mapped for
  std::vector<bool> area_unmapped_;  // by worker: offered the area, no message from it since
  std::vector<bool> done_;
  std::vector<OpCounts> received_;  // by worker
  struct WaitingDone {
    std::string route;
    uint64_t request_id = 0;
    OpCounts sent{};
  };
  std::map<int, WaitingDone> waiting_done_;  // by worker
  void mark_done(int worker);
  std::vector<bool> rejoined_;  // a replacement registered for this worker (--allow-rejoin)
  int num_done_ = 0;
  bool stopped_ = false;
};

}  // namespace pstrain
