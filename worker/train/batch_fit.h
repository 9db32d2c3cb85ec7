// The micro-batch a worker computes and what its device holds for it: the memory plan of the
// model on the backend (worker/model/memory_plan.h's figures), the micro-batch --batch-size auto picks
// from it (or the job's), and the checks the choice must pass (global batch-norm statistics,
// --gpu-memory-limit). A room beside worker/train/trainer.cc, whose setup calls it once, so that the
// trainer keeps the order of the setup and not its arithmetic.
#pragma once

#include <cstdint>
#include <string>

#include "worker/backend/backend.h"
#include "worker/model/memory_plan.h"
#include "worker/model/model.h"

namespace pstrain {

// What the device holds of the model, its gradient, activations and input for batches of up to
// `rows` samples, computed before allocating anything but the backend's own workspace (already
// held).
MemoryPlan plan_memory(const Backend& backend, bool recompute, const Network& network, int rows);

struct BatchFitRequest {
  int share = 0;                  // this worker's samples a step
  uint64_t global_batch = 0;      // every worker's (for the log line)
  int micro_batch = 64;           // the job's micro-batch, unless automatic
  bool automatic = false;         // --batch-size auto
  bool evaluates = false;         // this worker evaluates the test set (its batch must fit too)
  double memory_limit_mib = 0;    // --gpu-memory-limit (0: the device's free memory, on a GPU)
  bool recompute = false;         // --recompute
  bool batchnorm_global = false;  // --batchnorm-stats global (where the mode has it)
  int backup_workers = 0;         // --backup-workers
  std::string tag;                // the worker's log prefix
};

// The micro-batch of `network` on `backend` for `r`, logged. Throws pstrain::UsageError when
// global batch-norm statistics cannot be kept with it, pstrain::Error when not one sample fits.
BatchChoice fit_batch(const BatchFitRequest& r, const Backend& backend, const Network& network);

// Throws pstrain::Error when a GPU's plan exceeds `limit_mib` (0: no limit).
void check_memory_limit(const MemoryPlan& plan, const Backend& backend, double limit_mib);

}  // namespace pstrain
