#include <climits>
#include <map>
#include <random>

#include "shared/net/disconnect_monitor.h"
#include "shared/util/clock.h"
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


// The server keeps each same-host client's messages in the order the client sent them, though
// they come two ways: its header-only messages over the local channel, the others (a payload
// frame: INIT, SPARSE_PULL, SPARSE_PUSH, CLIP, STATS) through ZeroMQ, whose I/O threads a packet
// overtakes. Each packet says how many ZeroMQ messages the client had sent before it
// (sequenced_packet); the server counts those it received from that route since the client named
// itself, and hands out a packet only once they are all in, and a ZeroMQ message only after the
// packets sent before it. So a DONE never overtakes the push before it (docs/wire_protocol.md,
// "Same host").
class ZmqServer final : public Endpoint {
 public:
  ZmqServer(zmq::context_t& context, const ZmqServerOptions& o)
      : socket_(context, zmq::socket_type::router), peer_hosts_(o.peer_hosts) {
    set_socket_defaults(socket_, kHighWaterMark);
    o.security.server(socket_);
    socket_.set(zmq::sockopt::router_mandatory, 1);
    socket_.set(zmq::sockopt::maxmsgsize, o.max_message_bytes);
    if (o.max_message_bytes >= 0 && !o.log_name.empty()) {
      monitor_ = std::make_unique<DisconnectMonitor>(context, socket_, o.log_name, o.max_message_bytes);
    }
    address_ = bind_tcp(socket_, o.bind_host, o.port, o.what);
    if (!o.ipc_name.empty()) bind_ipc(socket_, o.ipc_name, o.what);
    const std::string name = o.local_channel ? local_channel_name(o.ipc_name) : std::string();
    std::string why;
    if (!name.empty() && !listen_local(name, &listener_, &why)) {
      PSLOG(WARN) << "no local channel (" << why << "): same-host workers' headers go through ZeroMQ";
    }
  }

  // A header-only message to a peer on the local channel goes there (its requests came that way);
  // anything else through ZeroMQ.
  bool send(Message&& msg, Clock::time_point deadline, std::string* error) override {
    const auto local = named_.find(msg.route);
    if (local != named_.end() && msg.frames.size() == 1) {
      // One try: the PS's one thread must not block on a peer that does not read. A full queue
      // (a pull of very many chunks) overflows into ZeroMQ, where the peer reads it as well: the
      // replies of one pull may come in any order. A gone peer is forgotten.
      if (send_packet(local->second.socket, msg.frames[0].data(), msg.frames[0].size(), error)) return true;
      if (*error != kPeerQueueFull) forget(local);
    }
    std::vector<zmq::message_t> frames = to_zmq(&msg.frames, &msg.route);
    return send_frames(socket_, frames, 0, deadline, error);
  }

  bool recv(Message* msg, Clock::time_point deadline) override {
    for (;;) {
      accept_local_peers();
      if (pending_ && take_pending(msg)) return true;
      if (take_local(msg)) return true;
      if (socket_.get(zmq::sockopt::events) & ZMQ_POLLIN) {
        Message in;
        receive_zmq(&in);
        // A client names itself on the local channel before it sends any ZeroMQ message that
        // the count covers: its naming packet is in the kernel already.
        if (named_.count(in.route) == 0) accept_local_peers();
        if (named_.count(in.route) == 0) {
          *msg = std::move(in);
          return true;
        }
        pending_ = std::make_unique<Message>(std::move(in));
        continue;  // after the packets its client sent before it
      }
      std::vector<zmq::pollitem_t> items{zmq::pollitem_t{socket_.handle(), 0, ZMQ_POLLIN, 0}};
      if (listener_.valid()) items.push_back(poll_fd(listener_.fd()));
      for (const LocalSocket& peer : unnamed_) items.push_back(poll_fd(peer.fd()));
      for (const auto& peer : named_) {
        if (!peer.second.blocked()) items.push_back(poll_fd(peer.second.socket.fd()));
      }
      const int wait = millis_until(deadline);
      if (wait == 0) return false;
      if (zmq::poll(items.data(), items.size(), std::chrono::milliseconds(wait)) == 0) return false;
    }
  }

  std::string address(int) const override { return address_; }

  void close(Clock::time_point deadline) override {
    named_.clear();
    unnamed_.clear();
    pending_.reset();
    listener_ = LocalSocket();
    if (!socket_) return;
    monitor_.reset();
    socket_.set(zmq::sockopt::linger, millis_until(deadline));
    socket_.close();
  }

 private:
  struct LocalPeer {
    LocalSocket socket;
    uint64_t zmq_seen = 0;    // ZeroMQ messages handed out from its route since it named itself
    bool has_head = false;    // a packet read, not handed out yet
    uint64_t head_after = 0;  // the ZeroMQ messages its client had sent before it
    std::string head;
    // Its next packet waits for a ZeroMQ message sent before it (its socket is not polled).
    bool blocked() const { return has_head && head_after > zmq_seen; }
  };

  void receive_zmq(Message* msg) {
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
  }

  // New connections, and their first packet (the peer's ZeroMQ routing id: from then on its route).
  void accept_local_peers() {
    if (!listener_.valid()) return;
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
      if (r == PacketResult::kPacket && named_.count(packet) == 0) {
        LocalPeer named;
        named.socket = std::move(unnamed_[i]);
        named_.emplace(packet, std::move(named));
      }
      unnamed_.erase(unnamed_.begin() + static_cast<long>(i));
    }
  }

  // Reads the peer's next packet into its head if it has none; false when there is none (a
  // closed peer is forgotten: *gone set).
  bool peek(LocalPeer& peer, bool* gone) {
    *gone = false;
    if (peer.has_head) return true;
    std::string packet;
    const PacketResult r = receive_packet(peer.socket, &packet);
    if (r == PacketResult::kClosed) *gone = true;
    if (r != PacketResult::kPacket) return false;
    // A packet too short to carry its count is handed out as it is, for the PS to refuse.
    if (!split_sequenced(packet, &peer.head_after, &peer.head)) {
      peer.head_after = 0;
      peer.head = std::move(packet);
    }
    peer.has_head = true;
    return true;
  }

  void hand_out_head(const std::string& route, LocalPeer& peer, Message* msg) {
    msg->route = route;
    msg->peer_host.clear();
    msg->shard = -1;
    msg->local = true;
    msg->frames.clear();
    msg->frames.emplace_back(std::move(peer.head));
    peer.head.clear();
    peer.has_head = false;
  }

  void forget(std::map<std::string, LocalPeer>::iterator peer) {
    if (peer->second.has_head) {
      PSLOG(WARN) << "a same-host peer's local channel closed with a message waiting for "
                  << peer->second.head_after - peer->second.zmq_seen
                  << " earlier one(s) it sent through ZeroMQ";
    }
    named_.erase(peer);
  }

  // The ZeroMQ message read last, from a peer on the local channel: first any packet that peer
  // sent before it, then it.
  bool take_pending(Message* msg) {
    const auto it = named_.find(pending_->route);
    if (it != named_.end()) {
      bool gone = false;
      if (peek(it->second, &gone) && it->second.head_after <= it->second.zmq_seen) {
        hand_out_head(it->first, it->second, msg);
        return true;
      }
      ++it->second.zmq_seen;
      if (gone) forget(it);
    }
    *msg = std::move(*pending_);
    pending_.reset();
    return true;
  }

  // One packet from a named peer whose earlier ZeroMQ messages are all in, round robin; false
  // if none is ready.
  bool take_local(Message* msg) {
    if (named_.empty()) return false;
    auto it = named_.upper_bound(last_route_);
    for (size_t k = 0, n = named_.size(); k < n && !named_.empty(); ++k) {
      if (it == named_.end()) it = named_.begin();
      bool gone = false;
      if (peek(it->second, &gone) && !it->second.blocked()) {
        last_route_ = it->first;
        hand_out_head(it->first, it->second, msg);
        return true;
      }
      if (gone) {
        const auto next = std::next(it);
        forget(it);
        it = next;
        continue;
      }
      ++it;
    }
    return false;
  }

  zmq::socket_t socket_;
  std::unique_ptr<DisconnectMonitor> monitor_;  // destroyed before socket_ closes
  bool peer_hosts_;
  std::string address_;
  LocalSocket listener_;
  std::vector<LocalSocket> unnamed_;          // connected, routing id not received yet
  std::map<std::string, LocalPeer> named_;    // by ZeroMQ route
  std::string last_route_;                    // round robin over named_
  std::unique_ptr<Message> pending_;          // see take_pending
};

class ZmqClient final : public Endpoint {
 public:
  ZmqClient(zmq::context_t& context, const std::vector<std::string>& servers, const Security& security,
            bool local_channel, int64_t max_message_bytes)
      : addresses_(servers), locals_(servers.size()), zmq_sent_(servers.size(), 0) {
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
    const auto s = static_cast<size_t>(msg.shard);
    if (local.valid() && msg.frames.size() == 1) {
      // A peer on the local channel sends its headers there, each with the count of its ZeroMQ
      // messages before it: the server hands it out after them (ZmqServer).
      const std::string packet = sequenced_packet(zmq_sent_[s], msg.frames[0].data(), msg.frames[0].size());
      return send_packet(local, packet.data(), packet.size(), error, &deadline);
    }
    std::vector<zmq::message_t> frames = to_zmq(&msg.frames);
    if (!send_frames(sockets_[s], frames, 0, deadline, error)) return false;
    if (local.valid()) ++zmq_sent_[s];
    return true;
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
    zmq_sent_[i] = 0;
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
  std::vector<uint64_t> zmq_sent_;        // by shard: ZeroMQ messages sent since on the local channel
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
