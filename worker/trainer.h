// The worker's training loop, the same in every mode (sync, async, ssp through the PS; allreduce
// with the other workers): per step, take this worker's share of the global batch from the
// prefetch queue (in micro-batches with --accum-steps), compute its gradient, hand it to the
// Exchange (worker/exchange.h) chunk by chunk as the last micro-batch's backward produces it, and
// take the parameters the Exchange returns for the next step. The chief (worker 0) also
// initialises the parameter servers (INIT), prints progress (worker/progress.h), evaluates the
// test set (shared with the other workers at the epochs' ends where they hold the same
// parameters: worker/evaluation.h), decides checkpoints (worker/checkpoints.h) and saves the
// parameters (worker/param_files.h).
#pragma once

#include <atomic>

#include "shared/config/options.h"
#include "worker/exchange.h"
#include "worker/progress.h"  // TrainSummary

namespace pstrain {

// Runs the whole job for this worker; throws pstrain::Error on failure. `stop_requested` (may be
// null) is the chief's SIGTERM flag: with --checkpoint-dir it ends the job after a final
// checkpoint (docs/checkpoints.md).
TrainSummary train(const JobOptions& options, const ExchangeFactory& make_exchange,
                   const std::atomic<bool>* stop_requested = nullptr);

}  // namespace pstrain
