#include "worker/collective/ring_rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/collective/ring_wire.h"
#include "shared/net/zmq_transport.h"

namespace pstrain {
namespace {

constexpr double kFirstWaitReportSeconds = 1;  // the first "waiting for" line, then one every:
constexpr double kWaitReportSeconds = 5;
constexpr int64_t kMaxCoordinatorFrame = 64 << 10;
constexpr int kAbortLingerMillis = 1000;  // lets ABORT reach the others although we are closing

// The rendezvous waits for peers that may still be starting.
double rendezvous_timeout(const RingOptions& o) { return o.start_timeout_s > 0 ? o.start_timeout_s : o.timeout_s; }

bool is_wildcard(const std::string& host) { return host.empty() || host == "*" || host == "0.0.0.0"; }

// "host:port" -> {host, port}; throws pstrain::Error naming `what`. Port 0 only if allow_any_port.
void split_host_port(const std::string& text, const std::string& what, bool allow_any_port, std::string* host,
                     int* port) {
  const size_t colon = text.rfind(':');
  const std::string digits = colon == std::string::npos ? "" : text.substr(colon + 1);
  const bool numeric =
      !digits.empty() && digits.size() <= 5 && digits.find_first_not_of("0123456789") == std::string::npos;
  const int value = numeric ? std::stoi(digits) : -1;
  if (colon == 0 || !numeric || value > 65535 || (value == 0 && !allow_any_port)) {
    throw Error(what + " '" + text + "' is not host:port");
  }
  *host = text.substr(0, colon);
  *port = value;
}

// A peer's text frame (address or reason): bounded, printable ASCII; false otherwise.
bool text_of(const Frame& frame, std::string* out) {
  if (frame.size() > kMaxRingTextBytes) return false;
  *out = frame.to_string();
  return std::all_of(out->begin(), out->end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

bool valid_address(const std::string& text) {
  try {
    std::string host;
    int port = 0;
    split_host_port(text, "address", false, &host, &port);
    return true;
  } catch (const Error&) {
    return false;
  }
}

RingHeader setup_header(RingOp op, const RingOptions& o) {
  RingHeader h;
  h.op = op;
  h.sender = static_cast<uint32_t>(o.rank);
  h.world = static_cast<uint32_t>(o.world);
  return h;
}

Frame text_frame(const std::string& text) { return Frame(text); }

// Rank 0: collects HELLO from ranks 1..N-1, keeps them told who is missing, answers ADDRESSES.
class Coordinator {
 public:
  Coordinator(zmq::context_t& context, const RingOptions& o) : o_(o) {
    ZmqServerOptions server;
    split_host_port(o.coordinator, "coordinator", true, &server.bind_host, &server.port);
    server.security = o.security;
    server.max_message_bytes = kMaxCoordinatorFrame;
    server.what = "the ring coordinator";
    server.peer_hosts = true;  // a rank bound on a wildcard is reached where it came from
    endpoint_ = make_zmq_server(context, server);
    bound_ = endpoint_->address();
    addresses_.resize(static_cast<size_t>(o.world));
    routes_.resize(static_cast<size_t>(o.world));
  }

  RingRendezvous run(const std::string& ring_address) {
    addresses_[0] = advertised(ring_address);
    if (o_.on_coordinator_bound) o_.on_coordinator_bound(bound_);
    const auto deadline = deadline_after(rendezvous_timeout(o_));
    auto report = deadline_after(kFirstWaitReportSeconds);
    while (!missing().empty()) {
      Message msg;
      if (endpoint_->recv(&msg, std::min(deadline, report))) {
        handle(msg);
        continue;
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        abort_all("ring rendezvous timed out after " + seconds_text(rendezvous_timeout(o_)) + ": " + rank_list(missing()) +
                  " did not join (coordinator rank 0 at " + bound_ + ")");
      }
      if (now >= report) {
        PSLOG(INFO) << "ring rank 0: waiting for " << rank_list(missing()) << " to join (coordinator at "
                    << bound_ << ")";
        report = deadline_after(kWaitReportSeconds);
      }
    }
    RingHeader h = setup_header(RingOp::kAddresses, o_);
    h.length = static_cast<uint64_t>(o_.world);
    for (int r = 1; r < o_.world; ++r) {
      std::vector<Frame> reply;
      reply.push_back(encode_ring_header(h));
      for (const auto& address : addresses_) reply.push_back(text_frame(address));
      send_to(routes_[static_cast<size_t>(r)], std::move(reply));
    }
    return RingRendezvous{addresses_, std::move(endpoint_)};
  }

 private:
  std::vector<int> missing() const {
    std::vector<int> ranks;
    for (int r = 1; r < o_.world; ++r) {
      if (routes_[static_cast<size_t>(r)].empty()) ranks.push_back(r);
    }
    return ranks;
  }

  // Rank 0's own ring address as the others are told it. Bound on all interfaces, it is the
  // coordinator's host; where that is a wildcard too, it stays one ("0.0.0.0:port"), and each
  // rank puts in the host it reached the coordinator at (Joiner::handle): this host's name may
  // not resolve to an address the others can reach, but the address they reached it at does.
  std::string advertised(const std::string& address) const {
    const size_t colon = address.rfind(':');
    if (!is_wildcard(address.substr(0, colon))) return address;
    const std::string host = o_.coordinator.substr(0, o_.coordinator.rfind(':'));
    return (is_wildcard(host) ? "0.0.0.0" : host) + address.substr(colon);
  }

  // Checks a HELLO [header, ring address]. A malformed one is ignored (with a log line and an
  // ABORT to its sender); a well-formed one that does not fit this ring fails the job.
  std::string check_hello(const Message& msg, RingHeader* h, std::string* address) {
    const std::vector<Frame>& frames = msg.frames;
    std::string error;
    if (frames.size() != 2) return "expected 2 frames, got " + std::to_string(frames.size());
    if (!decode_ring_header(frames[0].data(), frames[0].size(), h, &error)) return error;
    if (h->op != RingOp::kHello || h->seq != 0) {
      return std::string("expected HELLO, got ") + ring_op_name(h->op) + " #" + std::to_string(h->seq);
    }
    const std::string who = "rank " + std::to_string(h->sender);
    if (h->sender == 0 || h->sender >= static_cast<uint32_t>(o_.world) ||
        h->world != static_cast<uint32_t>(o_.world)) {
      abort_all(who + " of world " + std::to_string(h->world) + " tried to join a ring of world " +
                    std::to_string(o_.world),
                msg.route);
    }
    if (h->total != o_.chunk_bytes) {
      abort_all(who + " uses chunk_bytes " + std::to_string(h->total) + ", rank 0 uses " +
                    std::to_string(o_.chunk_bytes),
                msg.route);
    }
    if (!text_of(frames[1], address) || !valid_address(*address))
      return who + " sent an invalid ring address";
    return "";
  }

  void handle(const Message& msg) {
    const std::string& route = msg.route;
    RingHeader h;
    std::string address;
    const std::string error = check_hello(msg, &h, &address);
    if (!error.empty()) {
      PSLOG(WARN) << "ring rank 0: ignoring a malformed rendezvous message: " << error;
      send_to(route, abort_message(error));
      return;
    }
    const auto r = static_cast<size_t>(h.sender);
    if (routes_[r] == route) return;
    if (!routes_[r].empty()) abort_all("rank " + std::to_string(r) + " joined twice", route);
    routes_[r] = route;
    const size_t colon = address.rfind(':');
    if (is_wildcard(address.substr(0, colon))) {
      address = (msg.peer_host.empty() ? "127.0.0.1" : msg.peer_host) + address.substr(colon);
    }
    addresses_[r] = address;
    PSLOG(DEBUG) << "ring rank 0: rank " << r << " joined, ring address " << address;
    tell_pending();
  }

  void tell_pending() {
    const std::vector<int> ranks = missing();
    if (ranks.empty()) return;
    RingHeader h = setup_header(RingOp::kPending, o_);
    h.length = ranks.size();
    std::string list;
    for (int r : ranks) {
      for (int i = 0; i < 4; ++i)
        list.push_back(static_cast<char>((static_cast<uint32_t>(r) >> (8 * i)) & 0xff));
    }
    for (const auto& route : routes_) {
      if (route.empty()) continue;
      std::vector<Frame> frames;
      frames.push_back(encode_ring_header(h));
      frames.push_back(text_frame(list));
      send_to(route, std::move(frames));
    }
  }

  std::vector<Frame> abort_message(const std::string& why) const {
    std::vector<Frame> frames;
    frames.push_back(encode_ring_header(setup_header(RingOp::kAbort, o_)));
    frames.push_back(text_frame(why.substr(0, kMaxRingTextBytes)));
    return frames;
  }

  [[noreturn]] void abort_all(const std::string& why, const std::string& offender = "") {
    for (const auto& route : routes_) {
      if (!route.empty()) send_to(route, abort_message(why));
    }
    if (!offender.empty()) send_to(offender, abort_message(why));
    endpoint_->close(Clock::now() + std::chrono::milliseconds(kAbortLingerMillis));
    throw Error(why);
  }

  // Never blocks: a message for a peer that is gone or whose queue is full is dropped; that
  // peer then fails at its own deadline.
  void send_to(const std::string& route, std::vector<Frame> frames) {
    Message msg;
    msg.route = route;
    msg.frames = std::move(frames);
    std::string error;
    if (!endpoint_->send(std::move(msg), Clock::now(), &error)) {
      PSLOG(DEBUG) << "ring rank 0: a rendezvous message was not delivered: " << error;
    }
  }

  const RingOptions& o_;
  std::unique_ptr<Endpoint> endpoint_;
  std::string bound_;
  std::vector<std::string> addresses_;  // by rank
  std::vector<std::string> routes_;     // ZeroMQ routing id by rank; empty = not joined
};

// Ranks 1..N-1: HELLO to the coordinator, then PENDING updates until ADDRESSES or ABORT.
class Member {
 public:
  Member(zmq::context_t& context, const RingOptions& o) : o_(o) {
    std::string host;
    int port = 0;
    split_host_port(o.coordinator, "coordinator", false, &host, &port);
    endpoint_ = make_zmq_client(context, {o.coordinator}, o.security, false, kMaxCoordinatorFrame);
  }

  RingRendezvous run(const std::string& ring_address) {
    const auto deadline = deadline_after(rendezvous_timeout(o_));
    RingHeader hello = setup_header(RingOp::kHello, o_);
    hello.total = o_.chunk_bytes;
    Message msg;
    msg.shard = 0;
    msg.frames.push_back(encode_ring_header(hello));
    msg.frames.push_back(text_frame(ring_address));
    send(std::move(msg), deadline);
    auto report = deadline_after(kFirstWaitReportSeconds);
    for (;;) {
      Message in;
      if (endpoint_->recv(&in, std::min(deadline, report))) {
        if (handle(in.frames, ring_address)) return RingRendezvous{addresses_, std::move(endpoint_)};
        continue;
      }
      const auto now = Clock::now();
      if (now >= deadline)
        throw Error("ring rendezvous timed out after " + seconds_text(rendezvous_timeout(o_)) + ": " + problem());
      if (now >= report) {
        PSLOG(INFO) << "ring rank " << o_.rank << ": waiting for " << waiting_for();
        report = deadline_after(kWaitReportSeconds);
      }
    }
  }

 private:
  std::string waiting_for() const {
    if (pending_.empty()) return "rank 0 (the coordinator at " + o_.coordinator + ")";
    return rank_list(pending_) + " to join (rank 0, the coordinator at " + o_.coordinator +
           ", is waiting too)";
  }

  std::string problem() const {
    if (!heard_) return "rank 0 (the coordinator at " + o_.coordinator + ") has not answered";
    if (pending_.empty()) return "rank 0 (the coordinator at " + o_.coordinator + ") sent no address list";
    return rank_list(pending_) + " did not join (rank 0, the coordinator at " + o_.coordinator +
           ", is still waiting)";
  }

  void send(Message&& msg, Clock::time_point deadline) {
    std::string error;
    if (!endpoint_->send(std::move(msg), deadline, &error)) {
      throw Error("ring rendezvous timed out after " + seconds_text(rendezvous_timeout(o_)) +
                  ": cannot reach rank 0 (the coordinator at " + o_.coordinator + "): " + error);
    }
  }

  [[noreturn]] void malformed(const std::string& error) const {
    throw Error("ring rendezvous: malformed message from rank 0 (the coordinator at " + o_.coordinator +
                "): " + error);
  }

  // True once ADDRESSES arrived and were valid.
  bool handle(const std::vector<Frame>& frames, const std::string& ring_address) {
    RingHeader h;
    std::string error;
    if (!decode_ring_header(frames[0].data(), frames[0].size(), &h, &error)) malformed(error);
    RingHeader want = setup_header(h.op, o_);
    want.sender = 0;
    want.length = h.length;
    if (!ring_header_matches(h, want, &error)) malformed(error);
    heard_ = true;
    std::string text;
    switch (h.op) {
      case RingOp::kAbort:
        if (frames.size() != 2 || !text_of(frames[1], &text)) malformed("unreadable ABORT");
        throw Error("ring rendezvous failed: rank 0 (the coordinator at " + o_.coordinator +
                    ") reports: " + text);
      case RingOp::kPending:
        if (frames.size() != 2 || h.length >= static_cast<uint64_t>(o_.world) ||
            frames[1].size() != 4 * h.length) {
          malformed("bad PENDING list");
        }
        pending_.clear();
        for (size_t i = 0; i < h.length; ++i) {
          const unsigned char* p = frames[1].data() + 4 * i;
          const uint32_t r = p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
          if (r == 0 || r >= static_cast<uint32_t>(o_.world)) malformed("bad PENDING list");
          pending_.push_back(static_cast<int>(r));
        }
        return false;
      case RingOp::kAddresses:
        if (h.length != static_cast<uint64_t>(o_.world) || frames.size() != 1 + h.length)
          malformed("bad ADDRESSES");
        addresses_.clear();
        for (size_t r = 1; r < frames.size(); ++r) {
          if (!text_of(frames[r], &text) || !valid_address(text))
            malformed("bad address of rank " + std::to_string(r - 1));
          addresses_.push_back(text);
        }
        if (is_wildcard(addresses_[0].substr(0, addresses_[0].rfind(':')))) {  // see advertised()
          addresses_[0] = o_.coordinator.substr(0, o_.coordinator.rfind(':')) +
                          addresses_[0].substr(addresses_[0].rfind(':'));
        }
        if (!is_wildcard(ring_address.substr(0, ring_address.rfind(':'))) &&
            addresses_[static_cast<size_t>(o_.rank)] != ring_address) {
          malformed("it lists " + addresses_[static_cast<size_t>(o_.rank)] + " for this rank, which is at " +
                    ring_address);
        }
        return true;
      default:
        malformed(std::string("unexpected ") + ring_op_name(h.op));
    }
  }

  const RingOptions& o_;
  std::unique_ptr<Endpoint> endpoint_;
  bool heard_ = false;
  std::vector<int> pending_;
  std::vector<std::string> addresses_;
};

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

RingRendezvous ring_rendezvous(zmq::context_t& context, const RingOptions& options,
                               const std::string& ring_address) {
  if (options.rank == 0) return Coordinator(context, options).run(ring_address);
  return Member(context, options).run(ring_address);
}

}  // namespace pstrain
