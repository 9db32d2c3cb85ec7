// Message transport behind a small interface (docs/architecture.md). A Message is a list of frames
// plus its peer: the routing id on the server side, the shard index on the client side.
// ZeroMQ is the real implementation (ROUTER on the server, one DEALER per shard on a client).
// An Endpoint is not thread-safe: exactly one thread owns it (docs/threading.md).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "shared/net/curve.h"

namespace pstrain {

using Clock = std::chrono::steady_clock;

struct Message {
  std::string route;  // server side: the ZeroMQ routing id of the peer
  int shard = -1;     // client side: which server the message came from / goes to
  std::vector<zmq::message_t> frames;
  bool local = false;  // received over the same-host local channel (not ZeroMQ)
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
  // (messages with a payload frame still go through ZeroMQ, so they may overtake). False, with
  // *why, where there is none (a server not on this host, or one without it).
  virtual bool use_local_channel(int shard, std::string* why) {
    (void)shard;
    *why = "not supported by this transport";
    return false;
  }
  // Human-readable address of peer/shard i (client) or the bound address (server).
  virtual std::string address(int shard = 0) const = 0;
  // Closes the socket(s), giving queued outgoing messages until `deadline` to leave (otherwise
  // sockets drop them: linger is 0 so a dead peer never blocks shutdown). Idempotent.
  virtual void close(Clock::time_point deadline) = 0;
};

// One ZeroMQ context per process, owned by main() and passed down (no singletons).
// The server binds tcp://bind_host:port and, when `ipc_name` is not empty, also
// ipc://ipc_name (a Unix-domain socket for same-host peers; a leading '@' names one in Linux's
// abstract namespace, which leaves no file behind). address() is the TCP "host:port".
// `security`: CURVE server (docs/security.md) when on.
// `local_channel`: also listen at @NAME.local when `ipc_name` is @NAME (docs/wire_protocol.md,
// "Same host"); failing to is logged, not fatal.
std::unique_ptr<Endpoint> make_zmq_server(zmq::context_t& context, const std::string& bind_host,
                                          int port, const std::string& ipc_name = "",
                                          const Security& security = Security{}, bool local_channel = false);
// server_addresses: "host:port" (TCP) or "ipc://NAME", one per shard. `local_channel`: a shard at
// ipc://@NAME may be switched to the local channel (Endpoint::use_local_channel).
std::unique_ptr<Endpoint> make_zmq_client(zmq::context_t& context,
                                          const std::vector<std::string>& server_addresses,
                                          const Security& security = Security{}, bool local_channel = false);

// Milliseconds left until `deadline`, clamped to [0, INT_MAX].
int millis_until(Clock::time_point deadline);
Clock::time_point deadline_after(double seconds);

}  // namespace pstrain
