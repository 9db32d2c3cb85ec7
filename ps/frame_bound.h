// The largest frame a legal message to one PS shard has (docs/wire_protocol.md, "Frame bound").
// The shard's ROUTER gets it as ZMQ_MAXMSGSIZE, so ZeroMQ disconnects a peer sending a larger
// frame instead of receiving it whole before the shard's own checks could refuse it: one hostile
// SPARSE_PULL of gigabytes costs the shard at most this many bytes, not the request's.
#pragma once

#include <cstdint>
#include <string>

namespace pstrain {

constexpr int64_t kFrameSlack = 4096;  // beyond the largest payload: CURVE's 33 bytes a frame, and room

struct FrameBound {
  int64_t bytes = 0;
  std::string why;  // what sets it: "the chunk of --chunk-kib 1024", ...
};

// `chunk_kib`: the job's --chunk-kib (INIT, PUSH and the sparse parts carry at most a chunk);
// `takes_stats`: the shard receives batch norm's STATS (shard 0 of a job with --batchnorm-stats
// global), whose payload may hold 2^22 doubles. A sparse part of one row of the widest table
// (--embedding-dim at most 4096) may pass a small chunk.
FrameBound frame_bound(int chunk_kib, bool takes_stats);

}  // namespace pstrain
