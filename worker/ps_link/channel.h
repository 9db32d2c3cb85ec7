// A worker's link to the PS shards (docs/wire_protocol.md): registers with every shard (HELLO,
// WELCOME), sends each request, and runs the one receive loop that hands every arriving message
// to whoever awaits it, by request id and operation. The clients build on it: the dense
// parameters (worker/ps_link/dense_client.h), the embedding rows (row_client.h) and batch norm's
// statistics (stats_client.h); any of them may be used without the others (hybrid mode has only
// the rows), and a caller may drive them without the trainer.
//
// Threads: one thread owns the channel and every client on it, as it owns the Endpoint
// (docs/threading.md); nothing here blocks but send (bounded by --timeout) and receive.
// Errors: every failure throws pstrain::Error naming the shard (ps<s> at host:port where it
// helps): a shard's ERROR ("ps<s> rejected <what>: <its reason>"), a malformed or unexpected
// message, a send that could not be queued, a wait past its deadline. WAITING (a shard's barrier
// waits for someone else) goes to the awaiter of its request, which may extend its wait; one
// about no pending request is dropped (it is about a request answered since).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/net/shared_memory.h"
#include "shared/net/transport.h"
#include "shared/train/layout.h"
#include "shared/util/clock.h"
#include "shared/wire/protocol.h"
#include "worker/exchange/ps_client_options.h"

namespace pstrain {

class PsChannel {
 public:
  // Whoever expects answers from the shards: a client with requests out.
  class Awaiter {
   public:
    virtual ~Awaiter() = default;
    // Whether `h` belongs to it (a reply to one of its requests, or an operation it alone takes).
    virtual bool owns(const Header& h) const = 0;
    // What its requests are called in an ERROR's text ("ps1 rejected <what>: ...").
    virtual std::string what() const = 0;
    // A WAITING about one of its requests from `shard`: the shard is alive, its barrier waits.
    virtual void waiting(int shard, const Header& h) {
      (void)shard;
      (void)h;
    }
    // A message (never ERROR or WAITING) it owns; or, for the running Wait, one nobody owns:
    // takes it or throws (an unexpected message).
    virtual void take(Message& msg, const Header& h) = 0;
  };
  // A receive in progress (receive()): when it is finished, how long it waits.
  class Wait : public Awaiter {
   public:
    virtual bool finished() const = 0;
    // When receive() stops waiting for the next message and calls expired().
    virtual Clock::time_point until() const = 0;
    // Nothing arrived by until(): throws (a deadline passed) or logs what is waited for.
    virtual void expired() = 0;
  };

  // `total` = floats of the flat parameter vector, cut into options.num_ps slices (one per
  // shard, balance_slices). `endpoint` has one peer per shard, in shard order; it must outlive
  // the channel.
  PsChannel(const PsClientOptions& options, uint64_t total, Endpoint& endpoint);
  PsChannel(const PsChannel&) = delete;
  PsChannel& operator=(const PsChannel&) = delete;

  // Registers with every shard, logging "waiting for ps<s> at host:port" while one has not
  // answered (after 1 s, then every 5 s), up to --start-timeout (--timeout when 0). HELLO
  // offers a same-host shard a shared-memory segment for its payloads (--shared-memory auto);
  // WELCOME says whether it took it, and with it the shard's chunk size and, in plain sync on
  // this host, its parameter area (mapped read-only here). The headers of same-host shards then
  // take the local channel. `total_steps` = the job's length (the PS's learning-rate schedule).
  // Returns the step this worker runs first: the version the shards are at, or for a replaced
  // worker the step its predecessor left undone. Throws when a shard holds another slice, the
  // shards' steps differ by more than one, or the wait times out. Call it once, first.
  uint64_t hello(uint64_t total_steps);
  // DONE to every shard, with how many messages of each kind this worker sent it; `stopped` when
  // the job stopped before its end (the PS then keeps --save-params' directory as it is). Waits
  // up to --timeout for every acknowledgement (a shard acknowledges once every message counted
  // arrived): the process may exit right after, and ZeroMQ drops what is still queued.
  void done(bool stopped = false);

  // After hello(): shard s's slice of the flat vector, its chunk (floats per PUSH/PARAMS, and the
  // bytes of a sparse message's part), its payload segment (mapped: payloads go through it) and
  // its parameter area (mapped: the PS's values, read-only).
  int num_shards() const { return options_.num_ps; }
  const Slice& slice(int s) const { return slices_[static_cast<size_t>(s)]; }
  const std::vector<Slice>& slices() const { return slices_; }
  uint64_t chunk(int s) const { return chunks_.at(static_cast<size_t>(s)); }
  SharedMemory& segment(int s) { return segments_.at(static_cast<size_t>(s)); }
  const SharedMemory& segment(int s) const { return segments_.at(static_cast<size_t>(s)); }
  const SharedMemory& area(int s) const { return areas_.at(static_cast<size_t>(s)); }
  const PsClientOptions& options() const { return options_; }
  std::string address(int s) const { return endpoint_.address(s); }
  // When the last message of any kind from shard s arrived (the channel's start before any).
  Clock::time_point heard(int s) const { return heard_[static_cast<size_t>(s)]; }

  // Request ids: one counter for every client, so that an id names one request of this worker.
  // request() fills a header from this worker to shard s (its slice) with the current id;
  // new_request() takes the current id and moves the counter on.
  Header request(Op op, uint64_t step, int shard) const;
  uint64_t new_request() { return next_request_++; }
  // Sends h (+ payload, consumed) to shard s; counts it for DONE. Throws when it cannot be queued
  // within --timeout ("sending <op> to ps<s> at <address> failed: <why>").
  void send(int shard, const Header& h, Frame* payload);

  // Clients on this channel: an attached awaiter is offered every message receive() takes.
  // Detach before it is destroyed.
  void attach(Awaiter* awaiter);
  void detach(Awaiter* awaiter);
  // Receives until wait.finished(), handing each message to its owner: the wait or an attached
  // awaiter (owns()). An ERROR throws, named by its owner's what() (the wait's when nobody owns
  // it); a WAITING goes to its owner's waiting() (dropped when none); anything else nobody owns
  // goes to wait.take(). When no message arrives by wait.until(), calls wait.expired().
  void receive(Wait& wait);
  // Receives the one reply `want` to request_id from each shard marked pending, up to --timeout
  // (HELLO: --start-timeout), logging the missing shards every 5 s; replies by shard. Its WAITINGs
  // are named in the timeout's text. `what` names the request in errors and logs.
  std::vector<Message> await(const std::vector<bool>& pending, uint64_t request_id, Op want,
                             const char* what);

 private:
  class Await;
  void dispatch(Message& msg, Wait& wait);
  Header decode(const Message& msg) const;
  // hello's parts: HELLO to shard s; its WELCOME checked and kept; the local channels.
  void send_hello(int s, uint64_t rid, uint64_t total_steps);
  void welcome(int s, const Header& h);
  void use_local_channels();

  const PsClientOptions options_;
  const uint64_t total_;
  Endpoint& endpoint_;
  const std::vector<Slice> slices_;
  std::vector<uint64_t> chunks_;  // by shard: WELCOME's chunk
  // Per shard: the segment its payloads go through when the shard is on this host (HELLO
  // offers it, WELCOME says whether the PS mapped it); unmapped: the sockets.
  std::vector<SharedMemory> segments_;
  // Per shard: its parameter area, when WELCOME shm 2 named one and it could be mapped (read-only).
  std::vector<SharedMemory> areas_;
  std::vector<Clock::time_point> heard_;  // by shard
  std::vector<OpCounts> sent_;  // by shard: messages sent since HELLO, by operation (DONE says them)
  std::vector<Awaiter*> awaiters_;
  uint64_t next_request_ = 1;
};

}  // namespace pstrain
