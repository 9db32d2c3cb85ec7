// The one clock every deadline, wait and timing in pstrain is read from: monotonic, so a change of
// the system time neither fires nor postpones a deadline.
#pragma once

#include <chrono>
#include <cstdint>

namespace pstrain {

using Clock = std::chrono::steady_clock;

// A duration in whole microseconds (the step breakdown's unit).
inline uint64_t micros(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

}  // namespace pstrain
