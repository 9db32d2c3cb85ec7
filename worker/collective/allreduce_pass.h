// The ring all-reduce's algorithm, one call's state (AllreducePass): segments, chunks, the
// pipeline of reduce and gather steps, validation of each chunk, stall reports. Apart from the
// ring collective (ring_collective.h), which owns the link and the failures, because it is the
// arithmetic of docs/collective.md, "All-reduce" and nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shared/net/frame.h"
#include "worker/collective/ring_wire.h"

namespace pstrain {

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

}  // namespace pstrain
