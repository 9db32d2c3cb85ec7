#include "shared/util/numeric.h"

#include <cstdint>
#include <cstring>

namespace pstrain {

PSTRAIN_MULTIVERSION
bool all_finite(const float* data, size_t n) {
  constexpr uint32_t kExponent = 0x7f800000u;  // all ones: infinity or NaN
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & kExponent) == kExponent);
  }
  return bad == 0;
}

PSTRAIN_MULTIVERSION
void add_into(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += src[i];
}

const char* numeric_isa() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512f";
  if (__builtin_cpu_supports("avx2")) return "avx2";
#endif
  return "baseline";
}

}  // namespace pstrain
