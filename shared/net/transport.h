// Message transport behind small interfaces (docs/architecture.md), in the manner of gloo's
// transport::Pair: what the PS, its clients and the ring collective send and receive, with no
// ZeroMQ type in sight. A Message is a list of frames (shared/net/frame.h) plus its peer: the
// routing id on the server side, the shard index on the client side.
// - Endpoint: a PS's server side (many peers) or a worker's client side (one peer per shard).
// - Link: a rank's place in a ring, receiving from its left neighbour, sending to its right.
// ZeroMQ is the real implementation (shared/net/zmq_transport.h), with CURVE and the same-host
// local channel behind it; shared/net/fault_endpoint.h wraps either to inject faults. Every
// implementation passes the same suite (tests/transport_test.cc). A server receives each peer's
// messages in the order the peer sent them (with or without payloads), so a client that waits
// for the answer to its last message knows every earlier one arrived. An Endpoint or a Link is not
// thread-safe: exactly one thread owns it (docs/threading.md).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "shared/net/frame.h"
#include "shared/util/clock.h"

namespace pstrain {

struct Message {
  std::string route;  // server side: the routing id of the peer
  int shard = -1;     // client side: which server the message came from / goes to
  std::vector<Frame> frames;
  bool local = false;  // received over the same-host local channel (not ZeroMQ)
  // Server side, where the transport knows it: the address the peer's connection comes from.
  std::string peer_host;
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;
  // Sends msg to msg.route (server) or msg.shard (client). Returns false, with the reason in
  // *error, if the message could not be queued before `deadline` or the peer is gone.
  virtual bool send(Message&& msg, Clock::time_point deadline, std::string* error) = 0;
  // Waits for the next message from any peer until `deadline`; false on timeout.
  virtual bool recv(Message* msg, Clock::time_point deadline) = 0;
  // Client: from now on, every header-only message to `shard` goes over the same-host local
  // channel (docs/wire_protocol.md, "Same host"), and so do the server's header-only replies: no
  // ZeroMQ I/O thread on either side. Only for a peer whose payloads move through shared memory
  // (messages with a payload frame still go through ZeroMQ); the server still hands out the
  // client's messages in the order it sent them, whichever way each came. Call it with nothing
  // sent to `shard` still on its way. False, with *why, where there is none (a server not on this
  // host, or one without it).
  virtual bool use_local_channel(int shard, std::string* why) {
    (void)shard;
    *why = "not supported by this transport";
    return false;
  }
  // Human-readable address of peer/shard i (client) or the bound address (server).
  virtual std::string address(int shard = 0) const = 0;
  // Closes the socket(s), giving queued outgoing messages until `deadline` to leave (otherwise
  // they are dropped, so a dead peer never blocks shutdown). Idempotent.
  virtual void close(Clock::time_point deadline) = 0;
};

// A rank's place in a ring (docs/collective.md): it listens for its left neighbour at address()
// and sends to its right neighbour once connect_right() named it. Messages in each direction
// arrive whole and in order; queues are bounded, so a sender that runs ahead waits for room.
class Link {
 public:
  virtual ~Link() = default;
  // "host:port" it listens at (host as it was bound).
  virtual const std::string& address() const = 0;
  virtual void connect_right(const std::string& right_address) = 0;
  // Queues frames for the right neighbour without blocking: true with the frames consumed (the
  // vector emptied), false (frames untouched) when its queue is full. (`deadline` only bounds
  // the frames after the first, which go at once.)
  virtual bool try_send(std::vector<Frame>* frames, Clock::time_point deadline) = 0;
  // Waits for room until `deadline`; false at the deadline.
  virtual bool send(std::vector<Frame>* frames, Clock::time_point deadline) = 0;
  // Takes the next message from the left neighbour if one is ready.
  virtual bool try_recv(std::vector<Frame>* frames) = 0;
  // Waits until a message from the left is ready (want_in) or the right has room (want_out);
  // false when `deadline` passed first.
  virtual bool wait(bool want_in, bool want_out, Clock::time_point deadline) = 0;
  // How long, in milliseconds, what is still queued for the right neighbour may keep being
  // delivered once the link is destroyed.
  virtual void set_close_linger(int millis) = 0;
  // Drops what is still queued for the right neighbour (which releases the frames' keepers).
  // Nothing can be sent afterwards.
  virtual void close_right() = 0;
};

// Milliseconds left until `deadline`, clamped to [0, INT_MAX].
int millis_until(Clock::time_point deadline);
Clock::time_point deadline_after(double seconds);

}  // namespace pstrain
