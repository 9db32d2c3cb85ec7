// Framing of the ring collective, version 1 (docs/collective.md). Every message is a list of
// frames (shared/net/frame.h) whose frame 0 is a fixed 64-byte little-endian header; the frames after it
// depend on the op. A receiver knows exactly which message comes next, so it compares the whole
// header with the one it expects (ring_header_matches) before any payload touches a buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/net/frame.h"

namespace pstrain {

constexpr uint32_t kRingMagic = 0x43525350;  // the bytes "PSRC" on the wire
constexpr uint16_t kRingVersion = 1;
constexpr size_t kRingHeaderBytes = 64;
constexpr size_t kMaxRingTextBytes = 4096;  // addresses and abort reasons
constexpr uint32_t kRingFlagScalars = 1;    // REDUCE/GATHER: a frame of `scalars` doubles follows

enum class RingOp : uint16_t {
  kHello = 1,      // rank -> coordinator: frame 1 = its ring address; total = its chunk_bytes
  kPending = 2,    // coordinator -> rank: frame 1 = `length` uint32 ranks that have not joined
  kAddresses = 3,  // coordinator -> rank: frames 1..world = every rank's ring address
  kAbort = 4,      // anyone -> rank: frame 1 = why the rendezvous or operation `seq` failed
  kLinkCheck = 5,  // rank -> right neighbour once connected (seq 0), no payload
  kReduce = 6,     // reduce-scatter chunk: frame 1 = `length` floats at `offset` [+ scalars]
  kGather = 7,     // all-gather chunk: the same frames, final values
  kBroadcast = 8,  // frame 1 = `length` bytes of rank 0's blob
};
const char* ring_op_name(RingOp op);
// Every op's name, for --inject-faults (shared/net/fault_endpoint.h).
std::vector<std::string> ring_op_names();

struct RingHeader {
  RingOp op = RingOp::kAbort;
  uint32_t sender = 0;   // rank of the sender
  uint32_t world = 0;    // number of ranks as the sender knows it
  uint64_t seq = 0;      // operation sequence number: 1, 2, ... per collective call; 0 = setup
  uint32_t step = 0;     // step within the ring: 0..2(N-1)-1 (REDUCE, GATHER), hop (BROADCAST)
  uint32_t segment = 0;  // REDUCE/GATHER: which of the N segments the chunk belongs to
  uint64_t offset = 0;   // REDUCE/GATHER: first float of the chunk in the flat buffer
  uint64_t length = 0;   // floats (REDUCE/GATHER), bytes (BROADCAST), entries (PENDING, ADDRESSES)
  uint64_t total = 0;    // REDUCE/GATHER: n of the whole buffer; HELLO: chunk_bytes
  uint32_t scalars = 0;  // REDUCE/GATHER: k, the number of double scalars of the operation
  uint32_t flags = 0;    // kRingFlagScalars
};

Frame encode_ring_header(const RingHeader& header);

// Decodes frame 0: size, magic, version, a known op and known flags. On failure returns false
// and sets *error to a message naming the offending field.
bool decode_ring_header(const void* data, size_t size, RingHeader* out, std::string* error);

// Compares every field of `got` with `want`; on the first difference returns false and sets
// *error to "<field> is <got>, expected <want>".
bool ring_header_matches(const RingHeader& got, const RingHeader& want, std::string* error);

}  // namespace pstrain
