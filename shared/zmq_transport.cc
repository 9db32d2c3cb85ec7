#include <climits>

#include "shared/error.h"
#include "shared/log.h"
#include "shared/transport.h"
#include "shared/zmq_util.h"

namespace pstrain {
namespace {

constexpr int kHighWaterMark = 1000;


// Sends frames, waiting for queue space until deadline. ROUTER sockets report unroutable peers.
bool send_frames(zmq::socket_t& socket, std::vector<zmq::message_t>& frames, size_t first,
                 Clock::time_point deadline, std::string* error) {
  for (size_t i = first; i < frames.size(); ++i) {
    const auto more = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    for (;;) {
      try {
        if (socket.send(frames[i], more | zmq::send_flags::dontwait)) break;
      } catch (const zmq::error_t& e) {
        *error = e.what();
        return false;
      }
      // Queue full (EAGAIN): wait for room, bounded by the deadline.
      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLOUT, 0};
      const int wait = millis_until(deadline);
      if (wait == 0 || zmq::poll(&item, 1, std::chrono::milliseconds(wait)) == 0) {
        *error = "send timed out (peer not reading)";
        return false;
      }
    }
  }
  return true;
}

class ZmqServer final : public Endpoint {
 public:
  ZmqServer(zmq::context_t& context, const std::string& host, int port, const std::string& ipc_name,
            const Security& security)
      : socket_(context, zmq::socket_type::router) {
    set_socket_defaults(socket_, kHighWaterMark);
    security.server(socket_);
    socket_.set(zmq::sockopt::router_mandatory, 1);
    address_ = bind_tcp(socket_, host, port, "the parameter server");
    if (!ipc_name.empty()) bind_ipc(socket_, ipc_name, "the parameter server");
  }

  bool send(Message&& msg, Clock::time_point deadline, std::string* error) override {
    msg.frames.insert(msg.frames.begin(), zmq::message_t(msg.route.data(), msg.route.size()));
    return send_frames(socket_, msg.frames, 0, deadline, error);
  }

  bool recv(Message* msg, Clock::time_point deadline) override {
    if (!poll_in(socket_, deadline)) return false;
    recv_multipart(socket_, &msg->frames);
    msg->route = msg->frames.front().to_string();
    msg->frames.erase(msg->frames.begin());
    msg->shard = -1;
    return true;
  }

  std::string address(int) const override { return address_; }

  void close(Clock::time_point deadline) override {
    if (!socket_) return;
    socket_.set(zmq::sockopt::linger, millis_until(deadline));
    socket_.close();
  }

 private:
  zmq::socket_t socket_;
  std::string address_;
};

class ZmqClient final : public Endpoint {
 public:
  ZmqClient(zmq::context_t& context, const std::vector<std::string>& servers, const Security& security)
      : addresses_(servers) {
    for (const auto& address : servers) {
      sockets_.emplace_back(context, zmq::socket_type::dealer);
      set_socket_defaults(sockets_.back(), kHighWaterMark);
      security.client(sockets_.back());
      try {
        sockets_.back().connect(zmq_endpoint(address));
      } catch (const zmq::error_t& e) {
        throw Error("cannot connect to " + address + ": " + e.what());
      }
      items_.push_back(zmq::pollitem_t{sockets_.back().handle(), 0, ZMQ_POLLIN, 0});
    }
  }

  bool send(Message&& msg, Clock::time_point deadline, std::string* error) override {
    PSTRAIN_CHECK(msg.shard >= 0 && msg.shard < static_cast<int>(sockets_.size()));
    return send_frames(sockets_[msg.shard], msg.frames, 0, deadline, error);
  }

  bool recv(Message* msg, Clock::time_point deadline) override {
    for (;;) {
      // Round-robin start so one busy shard cannot starve the others.
      for (size_t k = 0; k < sockets_.size(); ++k) {
        const size_t i = (next_ + k) % sockets_.size();
        if (sockets_[i].get(zmq::sockopt::events) & ZMQ_POLLIN) {
          recv_multipart(sockets_[i], &msg->frames);
          msg->shard = static_cast<int>(i);
          next_ = i + 1;
          return true;
        }
      }
      const int wait = millis_until(deadline);
      if (wait == 0) return false;
      if (zmq::poll(items_.data(), items_.size(), std::chrono::milliseconds(wait)) == 0) return false;
    }
  }

  std::string address(int shard) const override { return addresses_.at(shard); }

  void close(Clock::time_point deadline) override {
    for (auto& socket : sockets_) {
      if (!socket) continue;
      socket.set(zmq::sockopt::linger, millis_until(deadline));
      socket.close();
    }
  }

 private:
  std::vector<std::string> addresses_;
  std::vector<zmq::socket_t> sockets_;
  std::vector<zmq::pollitem_t> items_;
  size_t next_ = 0;
};

}  // namespace

int millis_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > INT_MAX ? INT_MAX : static_cast<int>(left.count());
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::unique_ptr<Endpoint> make_zmq_server(zmq::context_t& context, const std::string& bind_host,
                                          int port, const std::string& ipc_name, const Security& security) {
  return std::make_unique<ZmqServer>(context, bind_host, port, ipc_name, security);
}

std::unique_ptr<Endpoint> make_zmq_client(zmq::context_t& context,
                                          const std::vector<std::string>& server_addresses,
                                          const Security& security) {
  return std::make_unique<ZmqClient>(context, server_addresses, security);
}

}  // namespace pstrain
