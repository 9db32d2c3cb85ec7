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

}  // namespace

uint32_t extend(uint32_t crc, const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint32_t r = ~crc;
  for (size_t i = 0; i < n; ++i) r = kTable[(r ^ p[i]) & 0xffu] ^ (r >> 8);
  return ~r;
}

uint32_t value(const void* data, size_t n) { return extend(0, data, n); }

uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kMaskDelta; }

uint32_t unmask(uint32_t masked) {
  const uint32_t rotated = masked - kMaskDelta;
  return (rotated >> 17) | (rotated << 15);
}

}  // namespace pstrain::crc32c
