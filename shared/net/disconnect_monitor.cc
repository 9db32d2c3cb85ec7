#include "shared/net/disconnect_monitor.h"

#include <chrono>
#include <cstring>

#include "shared/util/error.h"
#include "shared/util/log.h"

namespace pstrain {

DisconnectMonitor::DisconnectMonitor(zmq::context_t& context, zmq::socket_t& socket, const std::string& name,
                                     int64_t max_bytes)
    : socket_(socket), name_(name), max_bytes_(max_bytes) {
  // One inproc address per monitored socket of the process.
  const std::string address = "inproc://pstrain-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  if (zmq_socket_monitor(socket_.handle(), address.c_str(),
                         ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_MONITOR_STOPPED) != 0) {
    throw Error(name_ + ": cannot monitor its socket: " + zmq_strerror(zmq_errno()));
  }
  // Connected here, before the thread starts, so that no event is sent before anyone listens.
  zmq::socket_t pair(context, zmq::socket_type::pair);
  pair.connect(address);
  thread_ = std::thread([this, p = std::move(pair)]() mutable { run(std::move(p)); });
}

DisconnectMonitor::~DisconnectMonitor() {
  // Stopping sends MONITOR_STOPPED, the thread's last event; ZeroMQ closes its end of the pair
  // without lingering, so the thread also looks at stopping_ between waits of kStopCheckMs.
  stopping_ = true;
  zmq_socket_monitor(socket_.handle(), nullptr, 0);
  thread_.join();
}

void DisconnectMonitor::run(zmq::socket_t pair) {
  constexpr int kStopCheckMs = 100;
  for (;;) {
    zmq::message_t event, endpoint;
    try {
      zmq::pollitem_t item{pair.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(kStopCheckMs)) == 0) {
        if (stopping_) return;
        continue;
      }
      if (!pair.recv(event) || !event.more() || !pair.recv(endpoint)) continue;
    } catch (const zmq::error_t&) {
      return;  // the context is ending
    }
    if (event.size() < 6) continue;
    uint16_t id = 0;
    std::memcpy(&id, event.data(), sizeof(id));
    if (id == ZMQ_EVENT_MONITOR_STOPPED) return;
    if (id != ZMQ_EVENT_DISCONNECTED) continue;
    ++disconnects_;
    PSLOG(INFO) << name_ << ": a peer's connection to " << endpoint.to_string()
                << " ended: it closed it, or sent a frame over " << max_bytes_
                << " bytes, this server's bound, and was disconnected before the frame was received "
                   "(docs/wire_protocol.md, \"Frame bound\")";
  }
}

}  // namespace pstrain
