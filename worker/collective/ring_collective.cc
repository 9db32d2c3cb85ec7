// The ring collective (docs/collective.md): its operations' common ground (ring_collective.h), the
// link check, the ring broadcast, failures, and make_ring_collective; the all-reduce's algorithm
// is allreduce_pass.cc.
#include "worker/collective/ring_collective.h"

#include <algorithm>

#include "shared/net/zmq_transport.h"
#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/collective/allreduce_pass.h"

namespace pstrain {
namespace {

// After a failure: how long the right neighbour may take to drain what we queued before the queue
// is dropped, and how long our ABORT may linger once the collective is destroyed; then how long
// ZeroMQ may take to let go of dropped frames.
constexpr double kDrainGraceSeconds = 0.2;
constexpr double kDropWaitSeconds = 5;
constexpr double kCloseLingerSeconds = 2;  // see make_zmq_link

// Frame count and sizes of a message whose header matched `want`; "" when they fit.
std::string frame_size_error(const std::vector<Frame>& frames, const RingHeader& want,
                             size_t payload_bytes, size_t scalar_bytes) {
  const bool scalars = (want.flags & kRingFlagScalars) != 0;
  const size_t count = want.op == RingOp::kLinkCheck ? 1 : scalars ? 3 : 2;
  if (frames.size() != count) {
    return std::to_string(frames.size()) + " frames, expected " + std::to_string(count);
  }
  if (count > 1 && frames[1].size() != payload_bytes) {
    return "payload of " + std::to_string(frames[1].size()) + " bytes, expected " +
           std::to_string(payload_bytes);
  }
  if (scalars && frames[2].size() != scalar_bytes) {
    return "scalars of " + std::to_string(frames[2].size()) + " bytes, expected " +
           std::to_string(scalar_bytes);
  }
  return "";
}

// world == 1: nothing to talk to.
class LocalCollective final : public Collective {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void allreduce_sum(float*, size_t, double*, size_t) override {}
  std::string broadcast(const std::string& blob) override { return blob; }
};

// The fault double's names for the ring's messages: "REDUCE", "seq 2 step 1 offset 0".
std::string name_ring_message(const std::vector<Frame>& frames, std::string* detail) {
  RingHeader h;
  std::string error;
  if (frames.empty() || !decode_ring_header(frames[0].data(), frames[0].size(), &h, &error)) return "";
  *detail = "seq " + std::to_string(h.seq) + " step " + std::to_string(h.step) + " offset " + std::to_string(h.offset);
  return ring_op_name(h.op);
}

void check_options(const RingOptions& o) {
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world) {
    throw Error("ring collective: rank " + std::to_string(o.rank) + " is not in a world of " +
                std::to_string(o.world));
  }
  if (!(o.timeout_s > 0)) throw Error("ring collective: the timeout must be positive");
  if (o.chunk_bytes < sizeof(float)) throw Error("ring collective: chunk_bytes must be at least 4");
  if (o.world > 1 && o.coordinator.empty()) throw Error("ring collective: no coordinator address");
}

}  // namespace

RingCollective::RingCollective(const RingOptions& options, std::unique_ptr<Link> link, RingRendezvous rendezvous)
    : options_(options),
      link_(std::move(link)),
      rendezvous_(std::move(rendezvous)),
      left_((options.rank + options.world - 1) % options.world),
      right_((options.rank + 1) % options.world) {
  options_.on_coordinator_bound = nullptr;
}

void RingCollective::allreduce_sum(float* data, size_t n, double* scalars, size_t k) {
  PSTRAIN_CHECK(data != nullptr || n == 0);
  PSTRAIN_CHECK(scalars != nullptr || k == 0);
  PSTRAIN_CHECK_LE(k, kMaxScalars);
  begin("allreduce");
  guarded([&] { AllreducePass(*this, data, n, scalars, k).run(); });
}

std::string RingCollective::broadcast(const std::string& blob) {
  begin("broadcast");
  std::string result;
  guarded([&] { result = run_broadcast(blob); });
  return result;
}

void RingCollective::check_link() {
  operation_ = "ring link check";
  RingHeader h = header(RingOp::kLinkCheck);
  std::vector<Frame> frames;
  frames.push_back(encode_ring_header(h));
  send_right(&frames);
  receive_left(&frames, "LINK_CHECK");
  h.sender = static_cast<uint32_t>(left_);
  expect(frames, h, 0, 0);
}

RingHeader RingCollective::header(RingOp op) const {
  RingHeader h;
  h.op = op;
  h.sender = static_cast<uint32_t>(options_.rank);
  h.world = static_cast<uint32_t>(options_.world);
  h.seq = seq_;
  return h;
}

void RingCollective::expect(const std::vector<Frame>& frames, const RingHeader& want,
                            size_t payload_bytes, size_t scalar_bytes) {
  RingHeader got;
  std::string error;
  if (frames.empty() || !decode_ring_header(frames[0].data(), frames[0].size(), &got, &error)) {
    throw Error(operation_ + ": malformed message from " + left_neighbour() + ": " + error);
  }
  if (got.op == RingOp::kAbort) aborted(frames, got);
  if (ring_header_matches(got, want, &error))
    error = frame_size_error(frames, want, payload_bytes, scalar_bytes);
  if (!error.empty()) {
    throw Error(operation_ + ": unexpected " + ring_op_name(got.op) + " from " + left_neighbour() + ": " +
                error);
  }
}

void RingCollective::aborted(const std::vector<Frame>& frames, const RingHeader& h) {
  std::string reason = frames.size() == 2 ? frames[1].to_string().substr(0, kMaxRingTextBytes) : "";
  if (reason.empty()) reason = "rank " + std::to_string(h.sender) + " gave no reason";
  cause_ = reason;
  throw Error(operation_ + " aborted: " + reason);
}

std::string RingCollective::neighbour(int r, const char* side) const {
  return "rank " + std::to_string(r) + " (" + side + " neighbour at " +
         rendezvous_.addresses[static_cast<size_t>(r)] + ")";
}

void RingCollective::begin(const char* what) {
  if (!failed_.empty())
    throw Error("ring collective rank " + std::to_string(options_.rank) + " failed earlier: " + failed_);
  ++seq_;
  operation_ = std::string(what) + " #" + std::to_string(seq_);
}

std::string RingCollective::run_broadcast(const std::string& blob) {
  const int rank = options_.rank;
  std::string result = blob;
  std::vector<Frame> frames;
  if (rank == 0) {
    if (blob.size() > kMaxBroadcastBytes) {
      throw Error(operation_ + ": blob of " + std::to_string(blob.size()) + " bytes exceeds the limit of " +
                  std::to_string(kMaxBroadcastBytes));
    }
  } else {
    receive_left(&frames, "the broadcast blob");
    RingHeader want = header(RingOp::kBroadcast);
    want.sender = static_cast<uint32_t>(left_);
    want.step = static_cast<uint32_t>(rank - 1);
    RingHeader got;
    std::string error;
    if (!frames.empty() && decode_ring_header(frames[0].data(), frames[0].size(), &got, &error)) {
      if (got.op == RingOp::kBroadcast && got.length > kMaxBroadcastBytes) {
        throw Error(operation_ + ": " + left_neighbour() + " announced a blob of " +
                    std::to_string(got.length) + " bytes, over the limit of " +
                    std::to_string(kMaxBroadcastBytes));
      }
      want.length = got.length;
    }
    expect(frames, want, static_cast<size_t>(want.length), 0);
    result = frames[1].to_string();
  }
  if (right_ != 0) {
    RingHeader h = header(RingOp::kBroadcast);
    h.step = static_cast<uint32_t>(rank);
    h.length = result.size();
    frames.clear();
    frames.push_back(encode_ring_header(h));
    frames.emplace_back(result.data(), result.size());
    send_right(&frames);
  }
  return result;
}

void RingCollective::send_right(std::vector<Frame>* frames) {
  if (!link_->send(frames, deadline_after(options_.timeout_s))) {
    throw Error(operation_ + " timed out after " + seconds_text(options_.timeout_s) + ": " + right_neighbour() +
                " is not taking messages");
  }
}

void RingCollective::receive_left(std::vector<Frame>* frames, const std::string& what) {
  const auto deadline = deadline_after(options_.timeout_s);
  auto report = deadline_after(kRingWaitReportSeconds);
  while (!link_->try_recv(frames)) {
    if (link_->wait(true, false, std::min(deadline, report))) continue;
    const auto now = Clock::now();
    if (now >= deadline) {
      throw Error(operation_ + " timed out after " + seconds_text(options_.timeout_s) + ": no " + what +
                  " from " + left_neighbour());
    }
    if (now >= report) {
      PSLOG(INFO) << "ring rank " << options_.rank << ": " << operation_ << " waiting for "
                  << left_neighbour();
      report = deadline_after(kRingWaitReportSeconds);
    }
  }
}

void RingCollective::on_failure(const std::string& what) {
  failed_ = what;
  const std::string cause = cause_.empty() ? "rank " + std::to_string(options_.rank) + ": " + what : cause_;
  std::vector<Frame> frames;
  frames.push_back(encode_ring_header(header(RingOp::kAbort)));
  frames.emplace_back(cause.data(), std::min(cause.size(), kMaxRingTextBytes));
  try {
    link_->try_send(&frames, deadline_after(kDrainGraceSeconds));
  } catch (const std::exception&) {
    // Best effort: the neighbour fails at its own deadline instead.
  }
  link_->set_close_linger(static_cast<int>(kDrainGraceSeconds * 1000));
  if (loans_.wait_returned(deadline_after(kDrainGraceSeconds))) return;
  link_->close_right();
  if (!loans_.wait_returned(deadline_after(kDropWaitSeconds))) {
    PSLOG(ERROR) << "ring rank " << options_.rank << ": the transport still holds " << loans_.outstanding()
                 << " message(s) pointing into the caller's buffer";
  }
}

std::unique_ptr<Collective> make_ring_collective(zmq::context_t& context, const RingOptions& options) {
  check_options(options);
  if (options.world == 1) return std::make_unique<LocalCollective>();
  const double linger_s = std::min(options.timeout_s, kCloseLingerSeconds);
  std::unique_ptr<Link> link = make_zmq_link(context, options.bind, static_cast<int>(linger_s * 1000), options.security);
  if (!options.faults.empty()) link = with_faults(std::move(link), options.faults, &name_ring_message);
  RingRendezvous rendezvous = ring_rendezvous(context, options, link->address());
  link->connect_right(rendezvous.addresses[static_cast<size_t>((options.rank + 1) % options.world)]);
  auto ring = std::make_unique<RingCollective>(options, std::move(link), std::move(rendezvous));
  ring->check_link();
  PSLOG(DEBUG) << "ring rank " << options.rank << " of " << options.world << " connected";
  return ring;
}

}  // namespace pstrain
