// The one clock every deadline, wait and timing in pstrain is read from: monotonic, so a change of
// the system time neither fires nor postpones a deadline.
#pragma once

#include <chrono>

namespace pstrain {

using Clock = std::chrono::steady_clock;

}  // namespace pstrain
