// Deterministic pseudo-random numbers that depend only on their inputs (the same on every
// process and platform), for initialisation, shuffling, hashing IDs and synthetic test data.
#pragma once

#include <cstdint>

namespace pstrain {

// SplitMix64 (Steele, Lea and Flood 2014): a well-mixed 64-bit function of x. Successive values of
// a stream are splitmix64(seed), splitmix64(seed + kGolden), splitmix64(seed + 2 * kGolden), ...
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr uint64_t splitmix64(uint64_t x) {
  x += kGolden;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace pstrain
