// --push-jitter-ms (debugging, tests): an Exchange that sleeps a random time before each push of
// the one it wraps, so the parameter servers receive the workers' pushes in a different order
// from run to run. Sync's results must not change with that order (docs/operations.md,
// "Determinism"); the tests use it to show that they do not.
#pragma once

#include <memory>

#include "worker/exchange/exchange.h"

namespace pstrain {

// Sleeps up to max_ms (uniform, from a generator seeded by the clock) before each
// gradient_ready and finish_step of `inner` (both push); everything else is passed through.
std::unique_ptr<Exchange> with_push_jitter(std::unique_ptr<Exchange> inner, double max_ms);

}  // namespace pstrain
