// The dense side of a PS shard: the loop (ps/server.h) routes INIT, PUSH, PULL and CLIP here. It
// owns the shard's slice (ps/dense_store.h) and the PULLs parked until their chunks reach the
// version asked for, sends PARAMS chunk by chunk (zero-copy, copy-on-write, or into a same-host
// worker's segment) and --clip-norm's NORM, and fills a same-host worker's WELCOME. It answers
// through the loop's Replier and returns what an update did (Outcome); the loop then tells it which
// chunks may go out (send_ready), after asking the step gate (ps/step_gate.h) and writing any
// checkpoint. Single-threaded: the loop's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ps/checkpoints.h"
#include "ps/dense_store.h"
#include "ps/membership.h"
#include "ps/policy.h"
#include "ps/replier.h"
#include "ps/server_options.h"
#include "shared/net/transport.h"
#include "shared/wire/protocol.h"

namespace pstrain {

class DenseService {
 public:
  // All must outlive it; `checkpoints` marks each PARAMS (ShardCheckpoints::stamp).
  DenseService(const ServerOptions& options, const ConsistencyPolicy& policy, Membership& members,
               const ShardCheckpoints& checkpoints, Replier& replier);
  ~DenseService();

  // At the job's start (its first HELLO): the slice, zeroed (`hold_steps`: the step gate's held
  // steps); stop() forgets it again (the job could not be set up).
  void start(const JobShape& job, bool hold_steps);
  void stop() { store_.reset(); }
  bool active() const { return store_ != nullptr; }
  DenseStore& store() { return *store_; }
  const DenseStore& store() const { return *store_; }

  // The WELCOME of registered `worker` (its HELLO `hello`): its segment and the parameter area.
  Header welcome(int worker, const Header& hello);
  // False, with the reason, for a request refused (nothing is changed then).
  bool init(Message& msg, const Header& h, Outcome* out, std::string* error);
  bool push(Message& msg, const Header& h, Outcome* out, std::string* error);
  bool clip(const Message& msg, const Header& h, Outcome* out, std::string* error);
  // A PULL: each chunk the store has at its version, and that `limit` allows (the step gate's
  // dense_limit), goes at once; the rest wait, parked.
  bool pull(const Message& msg, const Header& h, uint64_t limit, std::string* error);
  // Chunk `part` advanced: to every parked PULL it can go to now (as pull() decides).
  void send_ready(size_t part, uint64_t limit);
  // --clip-norm with several shards: NORM to each parked PULL of the step after the one waiting
  // for its norm (once each).
  void send_norms();
  // The area's name goes once every worker has registered and each that was offered the area has
  // sent a message since (so it has mapped it, or given up on it).
  void release_area_name();

  // Held steps (ps/step_gate.h): by worker, who pushed every chunk of the step being collected;
  // and that step applied with `workers`' pushes (returns their samples).
  std::vector<bool> pushed_every_chunk() const;
  uint64_t apply_step(const std::vector<bool>& workers);

  bool waiting() const { return !parked_.empty(); }
  void tell_waiting(Header h);  // `h` (a WAITING) to every parked PULL

 private:
  struct Parked;

  void send_norm(Parked& p);
  void send_chunk(const std::string& route, uint64_t request_id, size_t part, uint64_t want, uint64_t shm);
  Update update_of(Message& msg, const Header& h) const;

  const ServerOptions& options_;
  const ConsistencyPolicy& policy_;
  Membership& members_;
  const ShardCheckpoints& checkpoints_;
  Replier& replier_;
  std::unique_ptr<DenseStore> store_;  // made at start(), when the model's size is known
  std::vector<Parked> parked_;
  // The traffic and the store's apply time as they were when the shard first sent a chunk of the
  // newest version (in sync: right after applying it), stamped into every PARAMS of that version:
  // the workers get the same figures for a version, whatever order their PARAMS leave in.
  struct Figures {
    bool taken = false;
    uint64_t version = 0, apply_us = 0, bytes_in = 0, bytes_out = 0;
  } figures_;
};

}  // namespace pstrain
