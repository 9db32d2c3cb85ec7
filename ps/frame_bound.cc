#include "ps/frame_bound.h"

#include "shared/wire/protocol.h"
#include "shared/wire/sparse_wire.h"

namespace pstrain {

FrameBound frame_bound(int chunk_kib, bool takes_stats) {
  // A body's head (8 bytes), one section's (16), one ID (8) and its row's floats: a part holds
  // at least one ID, so this part passes any smaller chunk.
  const int64_t one_row = 8 + 16 + 8 + int64_t{4} * kMaxSparseDim;
  FrameBound bound{int64_t{chunk_kib} * 1024, "the chunk of --chunk-kib " + std::to_string(chunk_kib)};
  if (one_row > bound.bytes) {
    bound = {one_row, "a sparse part of one row of " + std::to_string(kMaxSparseDim) + " floats"};
  }
  if (takes_stats && static_cast<int64_t>(kMaxStatsValues * sizeof(double)) > bound.bytes) {
    bound = {static_cast<int64_t>(kMaxStatsValues * sizeof(double)),
             "a STATS of " + std::to_string(kMaxStatsValues) + " doubles, --batchnorm-stats global"};
  }
  if (static_cast<int64_t>(kMaxHeaderBytes) > bound.bytes) bound = {kMaxHeaderBytes, "a header"};
  // ZeroMQ compares the frame as it travels: CURVE boxes each in 33 bytes more (a full chunk's
  // frame passed a bound of exactly the chunk, and its worker was cut off).
  bound.bytes += kFrameSlack;
  bound.why += ", and " + std::to_string(kFrameSlack) + " bytes for CURVE's box";
  return bound;
}

}  // namespace pstrain
