// Says in the log when ZeroMQ ends a peer's connection to a server socket that has a frame bound
// (ZMQ_MAXMSGSIZE; docs/wire_protocol.md, "Frame bound"). ZeroMQ disconnects a peer whose frame
// passes the bound without receiving the frame, and tells the application nothing but a socket
// monitor's DISCONNECTED event, which it sends for every connection that ends, whatever the cause
// (ZeroMQ 4.3 gives none): the line names the bound, so an operator who sees it next to a worker
// that lost its PS knows one of the two reasons to look for.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <zmq.hpp>

namespace pstrain {

class DisconnectMonitor {
 public:
  // Watches `socket` (which must outlive this object) from a thread of its own; each line starts
  // with `name` ("ps0").
  DisconnectMonitor(zmq::context_t& context, zmq::socket_t& socket, const std::string& name,
                    int64_t max_bytes);
  ~DisconnectMonitor();  // stops the monitor and joins its thread; call before the socket closes
  DisconnectMonitor(const DisconnectMonitor&) = delete;
  DisconnectMonitor& operator=(const DisconnectMonitor&) = delete;

  uint64_t disconnects() const { return disconnects_.load(); }

 private:
  void run(zmq::socket_t pair);

  zmq::socket_t& socket_;
  std::string name_;
  int64_t max_bytes_;
  std::atomic<uint64_t> disconnects_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace pstrain
