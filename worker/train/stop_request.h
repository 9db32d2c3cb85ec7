// The chief's side of a checkpointing job's life, shared by pstrain-worker (worker/main.cc) and
// the Python package's workers (worker/python/): the checkpoint directory's lock and SIGTERM as
// the request for a final checkpoint (docs/checkpoints.md).
#pragma once

#include <atomic>

#include "shared/config/options.h"
#include "shared/util/dir_lock.h"

namespace pstrain {

// The chief claims --checkpoint-dir before any work: a second job there is refused at once,
// naming this one (and launch.sh's run directory, PSTRAIN_RUN_DIR, when it has one).
DirLock claim_checkpoint_dir(const JobOptions& o);

// The chief of a job with --checkpoint-dir takes the first SIGTERM (the launcher's Ctrl-C,
// Slurm's preemption) as a request for a final checkpoint at the next step, after which the job
// stops everywhere; a second SIGTERM ends it at once (the launcher sends one when it stops the
// job without a final checkpoint, so a chief blocked on a dead PS does not wait out the grace
// period). Call it in the thread that starts every other (before ZeroMQ's): SIGTERM is blocked
// there, so no ZeroMQ wait is cut short with EINTR, and a thread of its own keeps it unblocked.
// Returns the flag the first SIGTERM sets (one per process).
const std::atomic<bool>* take_sigterm_as_stop_request();

}  // namespace pstrain
