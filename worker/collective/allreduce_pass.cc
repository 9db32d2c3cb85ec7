#include "worker/collective/allreduce_pass.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/collective/ring_collective.h"

namespace pstrain {

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
  auto report = deadline_after(kRingWaitReportSeconds);
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
      report = deadline_after(kRingWaitReportSeconds);
      continue;
    }
    const bool want_in = recv_.step < steps_;
    if (link.wait(want_in, may_send(), std::min(deadline, report))) continue;
    const auto now = Clock::now();
    if (now >= deadline) stalled(want_in);
    if (now >= report) {
      PSLOG(INFO) << "ring rank " << rank_ << ": " << ring_.operation() << " waiting for "
                  << (want_in ? ring_.left_neighbour() : ring_.right_neighbour());
      report = deadline_after(kRingWaitReportSeconds);
    }
  }
  // The caller may overwrite `data` as soon as we return: the transport must have let go of it.
  if (!ring_.loans().wait_returned(deadline_after(timeout))) stalled(false);
  std::copy(acc_.begin(), acc_.end(), scalars_);
}

}  // namespace pstrain
