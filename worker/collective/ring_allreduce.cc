// The ring collective (docs/collective.md): rendezvous, link check, ring all-reduce (reduce-scatter
// then all-gather, pipelined in chunks) and ring broadcast over one PUSH/PULL link per rank.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <sstream>

#include "shared/util/clock.h"
#include "worker/collective/collective.h"
#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/collective/ring_rendezvous.h"
#include "worker/collective/ring_wire.h"
#include "shared/net/zmq_transport.h"

namespace pstrain {
namespace {

constexpr double kWaitReportSeconds = 5;
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

// Buffers on loan to the link: a frame that borrows the caller's memory holds a loan until the
// transport is done with it (Frame's keeper), so the collective can wait until nothing reads the
// caller's buffer any more before it returns it.
class Loans {
 public:
  Loans() : state_(std::make_shared<State>()) {}

  // A frame over [data, data + bytes) without a copy. The memory must stay unchanged until
  // outstanding() drops back (wait_returned).
  Frame borrow(const void* data, size_t bytes) {
    if (bytes == 0) return Frame();
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      ++state_->outstanding;
    }
    // The deleter runs once, from whichever thread lets go of the last reference (usually
    // ZeroMQ's I/O thread, after the bytes were written to the kernel).
    std::shared_ptr<State> state = state_;
    std::shared_ptr<const void> keeper(data, [state](const void*) {
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        --state->outstanding;
      }
      state->returned.notify_all();
    });
    return Frame(std::move(keeper), data, bytes);
  }

  size_t outstanding() const {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->outstanding;
  }

  bool wait_returned(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    return state_->returned.wait_until(lock, deadline, [&] { return state_->outstanding == 0; });
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable returned;
    size_t outstanding = 0;
  };
  std::shared_ptr<State> state_;  // shared with the keepers, which may run later
};

// world == 1: nothing to talk to.
class LocalCollective final : public Collective {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void allreduce_sum(float*, size_t, double*, size_t) override {}
  std::string broadcast(const std::string& blob) override { return blob; }
};

class RingCollective;

// One all-reduce of n floats and k scalars (docs/collective.md, "All-reduce"). Step t of
// T = 2(N-1): rank r sends segment send_segment(t) to the right and receives recv_segment(t)
// from the left; steps 0..N-2 reduce (add), steps N-1..T-1 gather (overwrite). Chunk c of step t
// is sent once chunk c of step t-1 arrived, so a large buffer flows through the ring as a
// pipeline. The scalars travel with chunk 0 of segment 0.
class AllreducePass {
 public:
  AllreducePass(RingCollective& ring, float* data, size_t n, double* scalars, size_t k);
  void run();

 private:
  struct Cursor {
    int step = 0;
    size_t chunk = 0;
  };
  struct Span {
    size_t offset = 0, length = 0;
  };

  int send_segment(int t) const;
  int recv_segment(int t) const;
  Span segment_span(int s) const;
  size_t chunks_of(int s) const;
  Span chunk_span(int s, size_t c) const;
  void advance(Cursor* cursor, int segment) const;
  bool may_send() const;
  RingHeader chunk_header(int step, int segment, size_t chunk, uint32_t sender) const;
  std::vector<Frame> make_chunk();
  void accept(std::vector<Frame>& frames);
  [[noreturn]] void stalled(bool waiting_for_left) const;

  RingCollective& ring_;
  float* data_;
  size_t n_, k_;
  double* scalars_;
  int rank_, world_, steps_;
  size_t chunk_floats_;
  std::vector<double> acc_;  // this rank's running sum of the scalars
  Cursor send_, recv_;
  std::vector<Frame> unsent_;  // the next chunk, built, waiting for room on the link
};

class RingCollective final : public Collective {
 public:
  RingCollective(const RingOptions& options, std::unique_ptr<Link> link, RingRendezvous rendezvous)
      : options_(options),
        link_(std::move(link)),
        rendezvous_(std::move(rendezvous)),
        left_((options.rank + options.world - 1) % options.world),
        right_((options.rank + 1) % options.world) {
    options_.on_coordinator_bound = nullptr;
  }

  int rank() const override { return options_.rank; }
  int world() const override { return options_.world; }

  void allreduce_sum(float* data, size_t n, double* scalars, size_t k) override {
    PSTRAIN_CHECK(data != nullptr || n == 0);
    PSTRAIN_CHECK(scalars != nullptr || k == 0);
    PSTRAIN_CHECK_LE(k, kMaxScalars);
    begin("allreduce");
    guarded([&] { AllreducePass(*this, data, n, scalars, k).run(); });
  }

  std::string broadcast(const std::string& blob) override {
    begin("broadcast");
    std::string result;
    guarded([&] { result = run_broadcast(blob); });
    return result;
  }

  // Sends LINK_CHECK to the right and waits for the left's: the ring is closed and every rank
  // talks to the neighbour it expects.
  void check_link() {
    operation_ = "ring link check";
    RingHeader h = header(RingOp::kLinkCheck);
    std::vector<Frame> frames;
    frames.push_back(encode_ring_header(h));
    send_right(&frames);
    receive_left(&frames, "LINK_CHECK");
    h.sender = static_cast<uint32_t>(left_);
    expect(frames, h, 0, 0);
  }

  // Helpers the pass uses.
  Link& link() { return *link_; }
  Loans& loans() { return loans_; }
  const RingOptions& options() const { return options_; }
  int left() const { return left_; }
  std::string left_neighbour() const { return neighbour(left_, "left"); }
  std::string right_neighbour() const { return neighbour(right_, "right"); }
  const std::string& operation() const { return operation_; }
  RingHeader header(RingOp op) const {
    RingHeader h;
    h.op = op;
    h.sender = static_cast<uint32_t>(options_.rank);
    h.world = static_cast<uint32_t>(options_.world);
    h.seq = seq_;
    return h;
  }

  // Validates a message from the left against `want` and its frames against the sizes `want`
  // implies. An ABORT instead fails this rank with the reason it carries.
  void expect(const std::vector<Frame>& frames, const RingHeader& want, size_t payload_bytes,
              size_t scalar_bytes) {
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

  [[noreturn]] void aborted(const std::vector<Frame>& frames, const RingHeader& h) {
    std::string reason = frames.size() == 2 ? frames[1].to_string().substr(0, kMaxRingTextBytes) : "";
    if (reason.empty()) reason = "rank " + std::to_string(h.sender) + " gave no reason";
    cause_ = reason;
    throw Error(operation_ + " aborted: " + reason);
  }

 private:
  std::string neighbour(int r, const char* side) const {
    return "rank " + std::to_string(r) + " (" + side + " neighbour at " +
           rendezvous_.addresses[static_cast<size_t>(r)] + ")";
  }

  void begin(const char* what) {
    if (!failed_.empty())
      throw Error("ring collective rank " + std::to_string(options_.rank) + " failed earlier: " + failed_);
    ++seq_;
    operation_ = std::string(what) + " #" + std::to_string(seq_);
  }

  template <typename Fn>
  void guarded(Fn&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      on_failure(e.what());
      throw;
    }
  }

  std::string run_broadcast(const std::string& blob) {
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

  void send_right(std::vector<Frame>* frames) {
    if (!link_->send(frames, deadline_after(options_.timeout_s))) {
      throw Error(operation_ + " timed out after " + seconds_text(options_.timeout_s) + ": " + right_neighbour() +
                  " is not taking messages");
    }
  }

  void receive_left(std::vector<Frame>* frames, const std::string& what) {
    const auto deadline = deadline_after(options_.timeout_s);
    auto report = deadline_after(kWaitReportSeconds);
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
        report = deadline_after(kWaitReportSeconds);
      }
    }
  }

  // Tells the right neighbour why (ABORT, which it forwards), then makes sure ZeroMQ no longer
  // reads the caller's buffer: wait briefly for the queue to drain, else drop it.
  void on_failure(const std::string& what) {
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

  RingOptions options_;
  std::unique_ptr<Link> link_;
  Loans loans_;
  RingRendezvous rendezvous_;
  int left_, right_;
  uint64_t seq_ = 0;
  std::string operation_;
  std::string failed_;  // why the collective failed; empty while it works
  std::string cause_;   // root cause received in an ABORT, forwarded unchanged
};

AllreducePass::AllreducePass(RingCollective& ring, float* data, size_t n, double* scalars, size_t k)
    : ring_(ring),
      data_(data),
      n_(n),
      k_(k),
      scalars_(scalars),
      rank_(ring.rank()),
      world_(ring.world()),
      steps_(2 * (ring.world() - 1)),
      chunk_floats_(std::max<size_t>(1, ring.options().chunk_bytes / sizeof(float))),
      acc_(scalars, scalars + k) {}

int AllreducePass::send_segment(int t) const {
  const int s = t < world_ - 1 ? rank_ - t : rank_ + 1 - (t - (world_ - 1));
  return ((s % world_) + world_) % world_;
}

int AllreducePass::recv_segment(int t) const { return send_segment(t + 1); }

// The first n % N segments hold one float more than the others.
AllreducePass::Span AllreducePass::segment_span(int s) const {
  const size_t base = n_ / static_cast<size_t>(world_), extra = n_ % static_cast<size_t>(world_);
  const auto i = static_cast<size_t>(s);
  return Span{i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

// Every segment is at least one chunk (possibly empty), so the message count never depends on n.
size_t AllreducePass::chunks_of(int s) const {
  return std::max<size_t>(1, (segment_span(s).length + chunk_floats_ - 1) / chunk_floats_);
}

AllreducePass::Span AllreducePass::chunk_span(int s, size_t c) const {
  const Span seg = segment_span(s);
  const size_t begin = std::min(seg.length, c * chunk_floats_);
  return Span{seg.offset + begin, std::min(chunk_floats_, seg.length - begin)};
}

void AllreducePass::advance(Cursor* cursor, int segment) const {
  if (++cursor->chunk == chunks_of(segment)) {
    ++cursor->step;
    cursor->chunk = 0;
  }
}

// Chunk c of step t forwards what arrived as chunk c of step t-1.
bool AllreducePass::may_send() const {
  if (send_.step >= steps_) return false;
  if (send_.step == 0) return true;
  return recv_.step > send_.step - 1 || (recv_.step == send_.step - 1 && recv_.chunk > send_.chunk);
}

RingHeader AllreducePass::chunk_header(int step, int segment, size_t chunk, uint32_t sender) const {
  RingHeader h = ring_.header(step < world_ - 1 ? RingOp::kReduce : RingOp::kGather);
  const Span span = chunk_span(segment, chunk);
  h.sender = sender;
  h.step = static_cast<uint32_t>(step);
  h.segment = static_cast<uint32_t>(segment);
  h.offset = span.offset;
  h.length = span.length;
  h.total = n_;
  h.scalars = static_cast<uint32_t>(k_);
  h.flags = segment == 0 && chunk == 0 ? kRingFlagScalars : 0;
  return h;
}

// Zero copy: the frame borrows data_. That region changes again only when this rank receives the
// same segment later in the pass (a reduce-step region in the gather phase), which cannot happen
// before the right neighbour received these bytes; and run() waits for every borrowed frame to
// be returned before the caller gets its buffer back.
std::vector<Frame> AllreducePass::make_chunk() {
  const int segment = send_segment(send_.step);
  const RingHeader h = chunk_header(send_.step, segment, send_.chunk, static_cast<uint32_t>(rank_));
  std::vector<Frame> frames;
  frames.push_back(encode_ring_header(h));
  frames.push_back(ring_.loans().borrow(data_ + h.offset, h.length * sizeof(float)));
  if (h.flags & kRingFlagScalars) frames.emplace_back(acc_.data(), k_ * sizeof(double));
  return frames;
}

// Reduce steps add the incoming partial sum to this rank's (incoming + own, so every element
// is summed in ring order starting at its segment's first rank); gather steps overwrite.
void AllreducePass::accept(std::vector<Frame>& frames) {
  const int segment = recv_segment(recv_.step);
  const RingHeader want = chunk_header(recv_.step, segment, recv_.chunk, static_cast<uint32_t>(ring_.left()));
  ring_.expect(frames, want, want.length * sizeof(float), k_ * sizeof(double));
  const auto* in = static_cast<const unsigned char*>(frames[1].data());  // maybe unaligned
  float* out = data_ + want.offset;
  if (want.op == RingOp::kReduce) {
    for (size_t i = 0; i < want.length; ++i) {
      float v;
      std::memcpy(&v, in + i * sizeof(float), sizeof(float));
      out[i] = v + out[i];
    }
  } else if (want.length > 0) {
    std::memcpy(out, in, want.length * sizeof(float));
  }
  if (want.flags & kRingFlagScalars) {
    const auto* s = static_cast<const unsigned char*>(frames[2].data());
    for (size_t i = 0; i < k_; ++i) {
      double v;
      std::memcpy(&v, s + i * sizeof(double), sizeof(double));
      acc_[i] = want.op == RingOp::kReduce ? v + acc_[i] : v;
    }
  }
}

void AllreducePass::stalled(bool waiting_for_left) const {
  std::ostringstream os;
  os << ring_.operation() << " (" << n_ << " floats, " << k_ << " scalars) timed out after "
     << seconds_text(ring_.options().timeout_s) << ": ";
  if (waiting_for_left) {
    os << "no data from " << ring_.left_neighbour() << " for step " << recv_.step << " chunk " << recv_.chunk;
  } else {
    os << ring_.right_neighbour() << " is not taking data";
  }
  throw Error(os.str());
}

void AllreducePass::run() {
  Link& link = ring_.link();
  const double timeout = ring_.options().timeout_s;
  auto deadline = deadline_after(timeout);  // moves on with every chunk sent or received
  auto report = deadline_after(kWaitReportSeconds);
  std::vector<Frame> frames;
  while (send_.step < steps_ || recv_.step < steps_) {
    bool progressed = false;
    while (may_send()) {
      if (unsent_.empty()) unsent_ = make_chunk();
      if (!link.try_send(&unsent_, deadline)) break;
      unsent_.clear();
      advance(&send_, send_segment(send_.step));
      progressed = true;
    }
    // Only this pass's messages: the left neighbour may already be sending the next operation's.
    while (recv_.step < steps_ && link.try_recv(&frames)) {
      accept(frames);
      advance(&recv_, recv_segment(recv_.step));
      progressed = true;
    }
    if (progressed) {
      deadline = deadline_after(timeout);
      report = deadline_after(kWaitReportSeconds);
      continue;
    }
    const bool want_in = recv_.step < steps_;
    if (link.wait(want_in, may_send(), std::min(deadline, report))) continue;
    const auto now = Clock::now();
    if (now >= deadline) stalled(want_in);
    if (now >= report) {
      PSLOG(INFO) << "ring rank " << rank_ << ": " << ring_.operation() << " waiting for "
                  << (want_in ? ring_.left_neighbour() : ring_.right_neighbour());
      report = deadline_after(kWaitReportSeconds);
    }
  }
  // The caller may overwrite `data` as soon as we return: the transport must have let go of it.
  if (!ring_.loans().wait_returned(deadline_after(timeout))) stalled(false);
  std::copy(acc_.begin(), acc_.end(), scalars_);
}

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
