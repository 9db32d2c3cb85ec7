#include "worker/collective/ring_wire.h"

#include <cstring>
#include <sstream>

namespace pstrain {
namespace {

// Byte offsets of the fields in the 64-byte header; all little-endian.
constexpr size_t kAtMagic = 0, kAtVersion = 4, kAtOp = 6, kAtSender = 8, kAtWorld = 12, kAtSeq = 16,
                 kAtStep = 24, kAtSegment = 28, kAtOffset = 32, kAtLength = 40, kAtTotal = 48,
                 kAtScalars = 56, kAtFlags = 60;

void put(unsigned char* out, size_t at, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out[at + i] = static_cast<unsigned char>(value >> (8 * i));
}

uint64_t get(const unsigned char* in, size_t at, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(in[at + i]) << (8 * i);
  return value;
}

bool known_op(uint64_t op) {
  return op >= static_cast<uint64_t>(RingOp::kHello) && op <= static_cast<uint64_t>(RingOp::kBroadcast);
}

template <typename T>
bool same(const char* field, T got, T want, std::string* error) {
  if (got == want) return true;
  std::ostringstream os;
  os << field << " is " << got << ", expected " << want;
  *error = os.str();
  return false;
}

}  // namespace

const char* ring_op_name(RingOp op) {
  switch (op) {
    case RingOp::kHello:
      return "HELLO";
    case RingOp::kPending:
      return "PENDING";
    case RingOp::kAddresses:
      return "ADDRESSES";
    case RingOp::kAbort:
      return "ABORT";
    case RingOp::kLinkCheck:
      return "LINK_CHECK";
    case RingOp::kReduce:
      return "REDUCE";
    case RingOp::kGather:
      return "GATHER";
    case RingOp::kBroadcast:
      return "BROADCAST";
  }
  return "?";
}

std::vector<std::string> ring_op_names() {
  std::vector<std::string> names;
  for (auto op = static_cast<uint16_t>(RingOp::kHello); op <= static_cast<uint16_t>(RingOp::kBroadcast); ++op) {
    names.emplace_back(ring_op_name(static_cast<RingOp>(op)));
  }
  return names;
}

Frame encode_ring_header(const RingHeader& h) {
  std::string msg(kRingHeaderBytes, '\0');
  auto* out = reinterpret_cast<unsigned char*>(&msg[0]);
  put(out, kAtMagic, kRingMagic, 4);
  put(out, kAtVersion, kRingVersion, 2);
  put(out, kAtOp, static_cast<uint16_t>(h.op), 2);
  put(out, kAtSender, h.sender, 4);
  put(out, kAtWorld, h.world, 4);
  put(out, kAtSeq, h.seq, 8);
  put(out, kAtStep, h.step, 4);
  put(out, kAtSegment, h.segment, 4);
  put(out, kAtOffset, h.offset, 8);
  put(out, kAtLength, h.length, 8);
  put(out, kAtTotal, h.total, 8);
  put(out, kAtScalars, h.scalars, 4);
  put(out, kAtFlags, h.flags, 4);
  return Frame(std::move(msg));
}

bool decode_ring_header(const void* data, size_t size, RingHeader* out, std::string* error) {
  if (size != kRingHeaderBytes) {
    *error =
        "ring header is " + std::to_string(size) + " bytes, expected " + std::to_string(kRingHeaderBytes);
    return false;
  }
  const auto* in = static_cast<const unsigned char*>(data);
  std::ostringstream os;
  if (get(in, kAtMagic, 4) != kRingMagic) {
    os << "bad magic 0x" << std::hex << get(in, kAtMagic, 4) << " (not a pstrain ring message)";
  } else if (get(in, kAtVersion, 2) != kRingVersion) {
    os << "ring protocol version " << get(in, kAtVersion, 2) << ", this build speaks " << kRingVersion;
  } else if (!known_op(get(in, kAtOp, 2))) {
    os << "unknown ring op " << get(in, kAtOp, 2);
  } else if ((get(in, kAtFlags, 4) & ~uint64_t{kRingFlagScalars}) != 0) {
    os << "unknown flags 0x" << std::hex << get(in, kAtFlags, 4);
  }
  if (!os.str().empty()) {
    *error = os.str();
    return false;
  }
  out->op = static_cast<RingOp>(get(in, kAtOp, 2));
  out->sender = static_cast<uint32_t>(get(in, kAtSender, 4));
  out->world = static_cast<uint32_t>(get(in, kAtWorld, 4));
  out->seq = get(in, kAtSeq, 8);
  out->step = static_cast<uint32_t>(get(in, kAtStep, 4));
  out->segment = static_cast<uint32_t>(get(in, kAtSegment, 4));
  out->offset = get(in, kAtOffset, 8);
  out->length = get(in, kAtLength, 8);
  out->total = get(in, kAtTotal, 8);
  out->scalars = static_cast<uint32_t>(get(in, kAtScalars, 4));
  out->flags = static_cast<uint32_t>(get(in, kAtFlags, 4));
  return true;
}

bool ring_header_matches(const RingHeader& got, const RingHeader& want, std::string* error) {
  if (got.op != want.op) {
    *error = std::string("op is ") + ring_op_name(got.op) + ", expected " + ring_op_name(want.op);
    return false;
  }
  // Whole-operation fields first: a peer with another n reports "total", not the offsets it implies.
  return same("sender", got.sender, want.sender, error) && same("world", got.world, want.world, error) &&
         same("seq", got.seq, want.seq, error) && same("total", got.total, want.total, error) &&
         same("scalars", got.scalars, want.scalars, error) && same("step", got.step, want.step, error) &&
         same("segment", got.segment, want.segment, error) &&
         same("offset", got.offset, want.offset, error) && same("length", got.length, want.length, error) &&
         same("flags", got.flags, want.flags, error);
}

}  // namespace pstrain
