#include "shared/train/clip_norm.h"

#include <cmath>
#include <cstring>

namespace pstrain {

namespace {
constexpr int kFractionBits = 298;  // a square's exponent is at least 2 x -149
}

void ExactSquares::add_at(size_t limb, uint64_t value) {
  for (; value != 0 && limb < kLimbs; ++limb) {
    const uint64_t before = limbs_[limb];
    limbs_[limb] = before + value;
    value = limbs_[limb] < before ? 1 : 0;  // the carry
  }
}

void ExactSquares::add(const float* values, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], sizeof bits);
    const uint32_t exponent = (bits >> 23) & 0xff, fraction = bits & 0x7fffff;
    // |x| = m 2^e with m < 2^24: subnormals (exponent 0) have e = -149, the others an implicit bit.
    const uint64_t m = exponent == 0 ? fraction : (fraction | 0x800000u);
    if (m == 0) continue;
    const int e = exponent == 0 ? -149 : static_cast<int>(exponent) - 150;
    const unsigned position = static_cast<unsigned>(2 * e + kFractionBits);  // of m^2's lowest bit
    const unsigned __int128 shifted = static_cast<unsigned __int128>(m * m) << (position % 64);
    add_at(position / 64, static_cast<uint64_t>(shifted));
    add_at(position / 64 + 1, static_cast<uint64_t>(shifted >> 64));
  }
}

void ExactSquares::merge(const ExactSquares& other) {
  unsigned __int128 carry = 0;
  for (size_t i = 0; i < kLimbs; ++i) {
    const unsigned __int128 sum = static_cast<unsigned __int128>(limbs_[i]) + other.limbs_[i] + carry;
    limbs_[i] = static_cast<uint64_t>(sum);
    carry = sum >> 64;
  }
}

double ExactSquares::value() const {
  double sum = 0;  // from the most significant limb down: a fixed order, so a fixed rounding
  for (size_t i = kLimbs; i-- > 0;) {
    sum += std::ldexp(static_cast<double>(limbs_[i]), static_cast<int>(64 * i) - kFractionBits);
  }
  return sum;
}

bool ExactSquares::zero() const {
  for (uint64_t limb : limbs_) {
    if (limb != 0) return false;
  }
  return true;
}

ExactSquares ExactSquares::from_bytes(const void* bytes) {
  ExactSquares s;
  std::memcpy(s.limbs_.data(), bytes, sizeof(uint64_t) * kLimbs);
  return s;
}

ExactSquares ExactSquares::from_limbs(const uint64_t* limbs) {
  ExactSquares s;
  std::memcpy(s.limbs_.data(), limbs, sizeof(uint64_t) * kLimbs);
  return s;
}

double clip_factor(const ExactSquares& squares_of_sum, uint64_t samples, double clip_norm) {
  if (clip_norm <= 0 || samples == 0) return 1.0;
  const double norm = std::sqrt(squares_of_sum.value()) / static_cast<double>(samples);
  return norm > clip_norm ? clip_norm / norm : 1.0;
}

float clipped_scale(float scale, double factor) {
  return factor < 1.0 ? static_cast<float>(static_cast<double>(scale) * factor) : scale;
}

}  // namespace pstrain
