// A rank's place in the ring (docs/collective.md): a PULL socket bound for the left neighbour and
// a PUSH socket connected to the right neighbour, linger 0 and bounded high-water marks. Owned by
// one thread (docs/threading.md). Outgoing frames may borrow the caller's memory instead of
// copying it; the link counts the borrowed frames ZeroMQ still holds, so the caller can wait
// until its buffer is no longer read before handing it back.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "shared/net/curve.h"
#include "shared/net/transport.h"

namespace pstrain {

class RingLink {
 public:
  // Binds the PULL socket on a free port of `bind_host`. `close_linger_ms` bounds how long the
  // PUSH socket may keep delivering after the link is destroyed (see ~RingLink).
  // `security`: the PULL socket is a CURVE server and the PUSH socket a client when it is on.
  RingLink(zmq::context_t& context, const std::string& bind_host, int close_linger_ms,
           const Security& security = Security{});
  ~RingLink();
  void set_close_linger(int millis) { close_linger_ms_ = millis; }
  RingLink(const RingLink&) = delete;
  RingLink& operator=(const RingLink&) = delete;

  // "host:port" the PULL socket is bound to (host as given to the constructor).
  const std::string& address() const { return address_; }
  void connect_right(const std::string& right_address);

  // Queues frames for the right neighbour without blocking; false (frames untouched) when its
  // queue is full. (`deadline` only bounds the frames after the first, which libzmq accepts at
  // once.) Blocking variant: waits for room until `deadline`; false at the deadline.
  bool try_send(std::vector<zmq::message_t>* frames, Clock::time_point deadline);
  bool send(std::vector<zmq::message_t>* frames, Clock::time_point deadline);
  // Takes the next message from the left neighbour if one is ready.
  bool try_recv(std::vector<zmq::message_t>* frames);
  // Waits until a message from the left is ready (want_in) or the right has room (want_out);
  // false when `deadline` passed first.
  bool wait(bool want_in, bool want_out, Clock::time_point deadline);

  // A frame over [data, data + bytes) without a copy. The memory must stay unchanged until
  // borrowed() drops back (wait_returned).
  zmq::message_t borrow(const void* data, size_t bytes);
  size_t borrowed() const;
  bool wait_returned(Clock::time_point deadline);
  // Closes the PUSH socket: ZeroMQ drops what it still queues for the right neighbour, which
  // returns borrowed frames. Nothing can be sent afterwards.
  void close_right();

 private:
  struct Loans;
  std::shared_ptr<Loans> loans_;  // shared with ZeroMQ's free callbacks, which may run later
  zmq::socket_t left_;
  zmq::socket_t right_;
  std::string address_;
  int close_linger_ms_;
};

}  // namespace pstrain
