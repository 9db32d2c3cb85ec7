#include <climits>
#include <map>
#include <random>

#include "shared/util/error.h"
#include "shared/net/local_channel.h"
#include "shared/util/log.h"
#include "shared/net/zmq_transport.h"
#include "shared/net/zmq_util.h"

namespace pstrain {
namespace {

constexpr int kHighWaterMark = 1000;

// The local channel of a server bound at ipc://@NAME listens at @NAME.local (docs/wire_protocol.md,
// "Same host"); a server without an abstract ipc name has none.
std::string local_channel_name(const std::string& ipc_name) {
  return ipc_name.size() > 1 && ipc_name[0] == '@' ? ipc_name.substr(1) + ".local" : std::string();
}

// A client's ZeroMQ routing id, chosen by the client so that it can name itself on the local
// channel: 16 random bytes, the first not 0 (ZeroMQ reserves those).
std::string random_routing_id() {
  std::random_device device;
  std::string id(16, '\0');
  for (char& c : id) c = static_cast<char>(device() & 0xff);
  id[0] = static_cast<char>(id[0] | 0x80);
  return id;
}

zmq::pollitem_t poll_fd(int fd) { return zmq::pollitem_t{nullptr, fd, ZMQ_POLLIN, 0}; }


class ZmqServer final : public Endpoint {
 public:
  ZmqServer(zmq::context_t& context, const ZmqServerOptions& o)
      : socket_(context, zmq::socket_type::router), peer_hosts_(o.peer_hosts) {
    set_socket_defaults(socket_, kHighWaterMark);
    o.security.server(socket_);
    socket_.set(zmq::sockopt::router_mandatory, 1);
    socket_.set(zmq::sockopt::maxmsgsize, o.max_message_bytes);
    address_ = bind_tcp(socket_, o.bind_host, o.port, o.what);
    if (!o.ipc_name.empty()) bind_ipc(socket_, o.ipc_name, o.what);
    const std::string name = o.local_channel ? local_channel_name(o.ipc_name) : std::string();
    std::string why;
    if (!name.empty() && !listen_local(name, &listener_, &why)) {
      PSLOG(WARN) << "no local channel (" << why << "): same-host workers' headers go through ZeroMQ";
    }
  }

  // A header-only message to a peer on the local channel goes there (its requests came that way:
  // one channel per direction keeps them in order); anything else through ZeroMQ.
  bool send(Message&& msg, Clock::time_point deadline, std::string* error) override {
    const auto local = named_.find(msg.route);
    if (local != named_.end() && msg.frames.size() == 1) {
      // One try: the PS's one thread must not block on a peer that does not read. A full queue
      // (a pull of very many chunks) overflows into ZeroMQ, where the peer reads it as well: the
      // replies of one pull may come in any order. A gone peer is forgotten.
      if (send_packet(local->second, msg.frames[0].data(), msg.frames[0].size(), error)) return true;
      if (*error != kPeerQueueFull) named_.erase(local);
    }
    std::vector<zmq::message_t> frames = to_zmq(&msg.frames, &msg.route);
    return send_frames(socket_, frames, 0, deadline, error);
  }

  bool recv(Message* msg, Clock::time_point deadline) override {
    for (;;) {
      if (take_local(msg)) return true;
      if (socket_.get(zmq::sockopt::events) & ZMQ_POLLIN) {
        std::vector<zmq::message_t> parts;
        recv_multipart(socket_, &parts);
        msg->route = parts.front().to_string();
        msg->peer_host.clear();
        if (peer_hosts_ && parts.size() > 1) {
          try {  // the metadata of the peer's own frames (the ROUTER makes the routing id's)
            msg->peer_host = parts[1].gets("Peer-Address");
          } catch (const zmq::error_t&) {
            // not over TCP: no address
          }
        }
        msg->frames.clear();
        for (size_t i = 1; i < parts.size(); ++i) msg->frames.push_back(from_zmq(std::move(parts[i])));
        msg->shard = -1;
        msg->local = false;
        return true;
      }
      std::vector<zmq::pollitem_t> items{zmq::pollitem_t{socket_.handle(), 0, ZMQ_POLLIN, 0}};
      if (listener_.valid()) items.push_back(poll_fd(listener_.fd()));
      for (const LocalSocket& peer : unnamed_) items.push_back(poll_fd(peer.fd()));
      for (const auto& peer : named_) items.push_back(poll_fd(peer.second.fd()));
      const int wait = millis_until(deadline);
      if (wait == 0) return false;
      if (zmq::poll(items.data(), items.size(), std::chrono::milliseconds(wait)) == 0) return false;
    }
  }

  std::string address(int) const override { return address_; }

  void close(Clock::time_point deadline) override {
    named_.clear();
    unnamed_.clear();
    listener_ = LocalSocket();
    if (!socket_) return;
    socket_.set(zmq::sockopt::linger, millis_until(deadline));
    socket_.close();
  }

 private:
  // New connections, their first packet (the peer's ZeroMQ routing id: from then on its route),
  // then one packet from a named peer, round robin; false if nothing is ready.
  bool take_local(Message* msg) {
    if (!listener_.valid()) return false;
    LocalSocket peer;
    bool refused = false;
    while (accept_local(listener_, &peer, &refused)) unnamed_.push_back(std::move(peer));
    if (refused) PSLOG(WARN) << "refused a local-channel connection from another user";
    std::string packet;
    for (size_t i = 0; i < unnamed_.size();) {
      const PacketResult r = receive_packet(unnamed_[i], &packet);
      if (r == PacketResult::kNone) {
        ++i;
        continue;
      }
      // The first route wins: a second connection naming it is closed (a replacement worker
      // comes with a new routing id).
      if (r == PacketResult::kPacket && named_.count(packet) == 0) named_.emplace(packet, std::move(unnamed_[i]));
      unnamed_.erase(unnamed_.begin() + static_cast<long>(i));
    }
    if (named_.empty()) return false;
    auto it = named_.upper_bound(last_route_);
    for (size_t k = 0; k < named_.size(); ++k, ++it) {
      if (it == named_.end()) it = named_.begin();
      const PacketResult r = receive_packet(it->second, &packet);
      if (r == PacketResult::kNone) continue;
      const std::string route = it->first;
      if (r == PacketResult::kClosed) {
        named_.erase(it);
        return take_local(msg);
      }
      last_route_ = route;
      msg->route = route;
      msg->peer_host.clear();
      msg->shard = -1;
      msg->local = true;
      msg->frames.clear();
      msg->frames.emplace_back(std::move(packet));
      return true;
    }
    return false;
  }

  zmq::socket_t socket_;
  bool peer_hosts_;
  std::string address_;
  LocalSocket listener_;
  std::vector<LocalSocket> unnamed_;           // connected, routing id not received yet
  std::map<std::string, LocalSocket> named_;   // by ZeroMQ route
  std::string last_route_;                     // round robin over named_
};

class ZmqClient final : public Endpoint {
 public:
  ZmqClient(zmq::context_t& context, const std::vector<std::string>& servers, const Security& security,
            bool local_channel, int64_t max_message_bytes)
      : addresses_(servers), locals_(servers.size()) {
    for (const auto& address : servers) {
      sockets_.emplace_back(context, zmq::socket_type::dealer);
      set_socket_defaults(sockets_.back(), kHighWaterMark);
      sockets_.back().set(zmq::sockopt::maxmsgsize, max_message_bytes);
      security.client(sockets_.back());
      const bool abstract_ipc = address.rfind("ipc://@", 0) == 0;
      routing_ids_.push_back(local_channel && abstract_ipc ? random_routing_id() : std::string());
      if (!routing_ids_.back().empty()) sockets_.back().set(zmq::sockopt::routing_id, zmq::buffer(routing_ids_.back()));
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
    const LocalSocket& local = locals_[static_cast<size_t>(msg.shard)];
    if (local.valid() && msg.frames.size() == 1) {
      // A peer on the local channel sends all its headers there, in order. Its payloads are in
      // shared memory; the one message that still has a frame, the chief's INIT, goes through
      // ZeroMQ, and nothing depends on its order: pulls wait for it at the PS.
      return send_packet(local, msg.frames[0].data(), msg.frames[0].size(), error, &deadline);
    }
    std::vector<zmq::message_t> frames = to_zmq(&msg.frames);
    return send_frames(sockets_[msg.shard], frames, 0, deadline, error);
  }

  bool recv(Message* msg, Clock::time_point deadline) override {
    std::string packet;
    for (;;) {
      // Round-robin start so one busy shard cannot starve the others.
      for (size_t k = 0; k < sockets_.size(); ++k) {
        const size_t i = (next_ + k) % sockets_.size();
        const LocalSocket& local = locals_[i];
        const PacketResult r = local.valid() ? receive_packet(local, &packet) : PacketResult::kNone;
        if (r == PacketResult::kClosed) {
          // The PS is gone; its ZeroMQ socket reports nothing more either. Waiting on goes on to
          // the caller's deadline, as for a PS on another host.
          locals_[i] = LocalSocket();
          rebuild_items();
        } else if (r == PacketResult::kPacket) {
          msg->frames.clear();
          msg->frames.emplace_back(std::move(packet));
          msg->shard = static_cast<int>(i);
          msg->local = true;
          next_ = i + 1;
          return true;
        }
        if (sockets_[i].get(zmq::sockopt::events) & ZMQ_POLLIN) {
          recv_multipart(sockets_[i], &msg->frames);
          msg->shard = static_cast<int>(i);
          msg->local = false;
          next_ = i + 1;
          return true;
        }
      }
      const int wait = millis_until(deadline);
      if (wait == 0) return false;
      if (zmq::poll(items_.data(), items_.size(), std::chrono::milliseconds(wait)) == 0) return false;
    }
  }

  bool use_local_channel(int shard, std::string* why) override {
    PSTRAIN_CHECK(shard >= 0 && shard < static_cast<int>(sockets_.size()));
    const auto i = static_cast<size_t>(shard);
    if (routing_ids_[i].empty()) {
      *why = "not an ipc://@ address";
      return false;
    }
    const std::string address = addresses_[i];
    LocalSocket local;
    if (!connect_local(address.substr(7) + ".local", &local, why)) return false;
    if (!send_packet(local, routing_ids_[i].data(), routing_ids_[i].size(), why)) return false;
    locals_[i] = std::move(local);
    rebuild_items();
    return true;
  }

  std::string address(int shard) const override { return addresses_.at(shard); }

  void close(Clock::time_point deadline) override {
    for (auto& local : locals_) local = LocalSocket();
    for (auto& socket : sockets_) {
      if (!socket) continue;
      socket.set(zmq::sockopt::linger, millis_until(deadline));
      socket.close();
    }
  }

 private:
  std::vector<std::string> addresses_;
  std::vector<zmq::socket_t> sockets_;
  void rebuild_items() {
    items_.clear();
    for (auto& socket : sockets_) items_.push_back(zmq::pollitem_t{socket.handle(), 0, ZMQ_POLLIN, 0});
    for (const LocalSocket& local : locals_) {
      if (local.valid()) items_.push_back(poll_fd(local.fd()));
    }
  }

  std::vector<zmq::pollitem_t> items_;
  std::vector<std::string> routing_ids_;  // chosen for shards reached by ipc://@ (else empty)
  std::vector<LocalSocket> locals_;       // by shard: the local channel, once in use
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

std::unique_ptr<Endpoint> make_zmq_server(zmq::context_t& context, const ZmqServerOptions& options) {
  return std::make_unique<ZmqServer>(context, options);
}

std::unique_ptr<Endpoint> make_zmq_server(zmq::context_t& context, const std::string& bind_host,
                                          int port, const std::string& ipc_name, const Security& security,
                                          bool local_channel) {
  ZmqServerOptions o;
  o.bind_host = bind_host;
  o.port = port;
  o.ipc_name = ipc_name;
  o.security = security;
  o.local_channel = local_channel;
  return make_zmq_server(context, o);
}

std::unique_ptr<Endpoint> make_zmq_client(zmq::context_t& context,
                                          const std::vector<std::string>& server_addresses,
                                          const Security& security, bool local_channel, int64_t max_message_bytes) {
  return std::make_unique<ZmqClient>(context, server_addresses, security, local_channel, max_message_bytes);
}

}  // namespace pstrain
