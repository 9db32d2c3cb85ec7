#include "shared/util/crc32c.h"

#include <array>

namespace pstrain::crc32c {
namespace {

constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;  // 0x1EDC6F41, bits reversed
constexpr uint32_t kMaskDelta = 0xa282ead8u;

// table[b]: the CRC register after shifting the byte b through it, one bit at a time.
constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int bit = 0; bit < 8; ++bit) r = (r & 1u) ? (r >> 1) ^ kReflectedPolynomial : r >> 1;
    table[b] = r;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t extend_bytes(uint32_t r, const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i) r = kTable[(r ^ p[i]) & 0xffu] ^ (r >> 8);
  return r;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// SSE 4.2's crc32 instruction computes this very CRC (the same reflected polynomial), 8 bytes at
// a time: a checkpoint's tables are checksummed at several GB/s where the table above does about
// 0.4 (issue 48: a background write of gigabytes should be bound by the disk).
__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t r, const unsigned char* p, size_t n) {
  uint64_t r64 = r;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    __builtin_memcpy(&word, p, 8);
    r64 = __builtin_ia32_crc32di(r64, word);
  }
  return extend_bytes(static_cast<uint32_t>(r64), p, n);
}
const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

uint32_t extend(uint32_t crc, const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (kHaveSse42) return ~extend_sse42(~crc, p, n);
#endif
  return ~extend_bytes(~crc, p, n);
}

uint32_t value(const void* data, size_t n) { return extend(0, data, n); }

uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t unmask(uint32_t masked) {
  const uint32_t rotated = masked - kMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace pstrain::crc32c
