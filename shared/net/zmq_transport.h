// The ZeroMQ implementation of the transport interfaces (shared/net/transport.h): a ROUTER for a
// PS, one DEALER per shard for a client, a PULL/PUSH pair for a ring link; CURVE on every socket
// when `security` is on (docs/security.md); the same-host local channel beside ZeroMQ.
#pragma once

#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "shared/net/curve.h"
#include "shared/net/transport.h"

namespace pstrain {

// One ZeroMQ context per process, owned by main() and passed down (no singletons).
// The server binds tcp://bind_host:port and, when `ipc_name` is not empty, also
// ipc://ipc_name (a Unix-domain socket for same-host peers; a leading '@' names one in Linux's
// abstract namespace, which leaves no file behind). address() is the TCP "host:port".
// `local_channel`: also listen at @NAME.local when `ipc_name` is @NAME (docs/wire_protocol.md,
// "Same host"); failing to is logged, not fatal.
std::unique_ptr<Endpoint> make_zmq_server(zmq::context_t& context, const std::string& bind_host,
                                          int port, const std::string& ipc_name = "",
                                          const Security& security = Security{}, bool local_channel = false);
// The same with every choice named, and two more.
struct ZmqServerOptions {
  std::string bind_host = "127.0.0.1";
  int port = 0;
  std::string ipc_name;
  Security security;
  bool local_channel = false;
  int64_t max_message_bytes = -1;           // a peer sending a larger frame is disconnected; -1: no limit
  std::string what = "the parameter server";  // names it in errors ("cannot bind <what> to ...")
  bool peer_hosts = false;                  // fill Message::peer_host of every message received
  // With max_message_bytes: log each peer connection that ends, as "<log_name>: ..." (ZeroMQ
  // ends that of a peer whose frame passes the bound: shared/net/disconnect_monitor.h).
  std::string log_name;
};
std::unique_ptr<Endpoint> make_zmq_server(zmq::context_t& context, const ZmqServerOptions& options);
// server_addresses: "host:port" (TCP) or "ipc://NAME", one per shard. `local_channel`: a shard at
// ipc://@NAME may be switched to the local channel (Endpoint::use_local_channel).
// `max_message_bytes`: a server sending a larger frame is disconnected; -1: no limit.
std::unique_ptr<Endpoint> make_zmq_client(zmq::context_t& context,
                                          const std::vector<std::string>& server_addresses,
                                          const Security& security = Security{}, bool local_channel = false,
                                          int64_t max_message_bytes = -1);
// A ring link listening on a free TCP port of `bind_host`. `close_linger_ms` bounds how long
// what is queued for the right neighbour may still be delivered after the link is destroyed.
std::unique_ptr<Link> make_zmq_link(zmq::context_t& context, const std::string& bind_host, int close_linger_ms,
                                    const Security& security = Security{});

}  // namespace pstrain
