#include "shared/zmq_util.h"

#include "shared/error.h"
#include "shared/options.h"

namespace pstrain {

void set_socket_defaults(zmq::socket_t& socket, int high_water_mark) {
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndhwm, high_water_mark);
  socket.set(zmq::sockopt::rcvhwm, high_water_mark);
}

std::string bind_tcp(zmq::socket_t& socket, const std::string& host, int port, const std::string& what) {
  const std::string endpoint = "tcp://" + host + ":" + (port == 0 ? "*" : std::to_string(port));
  try {
    socket.bind(endpoint);
  } catch (const zmq::error_t& e) {
    throw Error("cannot bind " + what + " on " + endpoint + ": " + e.what());
  }
  const std::string bound = socket.get(zmq::sockopt::last_endpoint);
  return host + bound.substr(bound.rfind(':'));
}

void bind_ipc(zmq::socket_t& socket, const std::string& name, const std::string& what) {
  const std::string endpoint = "ipc://" + name;
  if (name.empty() || name.size() > kMaxIpcName) {
    throw Error("cannot bind " + what + " on " + endpoint + ": the name must have 1 to " +
                std::to_string(kMaxIpcName) + " characters");
  }
  try {
    socket.bind(endpoint);
  } catch (const zmq::error_t& e) {
    throw Error("cannot bind " + what + " on " + endpoint + ": " + e.what());
  }
}

std::string zmq_endpoint(const std::string& address) {
  return address.rfind("ipc://", 0) == 0 ? address : "tcp://" + address;
}

void recv_multipart(zmq::socket_t& socket, std::vector<zmq::message_t>* frames) {
  frames->clear();
  do {
    zmq::message_t part;
    if (!socket.recv(part, zmq::recv_flags::none)) throw Error("zmq: message vanished mid-receive");
    frames->push_back(std::move(part));
  } while (socket.get(zmq::sockopt::rcvmore));
}

bool poll_in(zmq::socket_t& socket, Clock::time_point deadline) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  return zmq::poll(&item, 1, std::chrono::milliseconds(millis_until(deadline))) > 0;
}

}  // namespace pstrain
