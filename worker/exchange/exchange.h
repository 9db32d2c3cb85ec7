// How a worker turns its gradient into the next parameters: through the parameter servers
// (--mode sync, async, ssp) or by all-reducing with the other workers and applying the optimizer
// locally (--mode allreduce). The trainer's loop is the same for all of them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "shared/checkpoint/checkpoint_options.h"
#include "shared/net/transport.h"
#include "shared/train/optimizer.h"
#include "shared/util/modes.h"
#include "worker/backend/replica.h"
#include "worker/collective/collective.h"
#include "worker/exchange/ps_client_options.h"
#include "worker/exchange/stats_exchange.h"
#include "worker/exchange/step_metrics.h"
#include "worker/sparse/row_source.h"

namespace pstrain {

// What an exchange needs of the job (filled from the job's flags in main: worker/options_from_job.h).
struct ExchangeOptions {
  int index = 0;                 // this worker's index (0, the chief: INIT; allreduce: the checkpoints)
  Mode mode = Mode::kSync;       // the version a PULL asks for (allreduce: all-reduces instead)
  int staleness = 2;             // ssp: a PULL asks for at least step + 1 - staleness
  int backup_workers = 0;        // sync: a late worker goes on from the version it received
  OptimizerOptions optimizer;    // allreduce: applied here
  CheckpointOptions checkpoint;  // allreduce: the chief's whole-vector checkpoints; --resume on every worker
  PsClientOptions client;        // the PS modes: the client's
};

class Exchange {
 public:
  virtual ~Exchange() = default;
  // host_params holds this worker's deterministic initialisation; afterwards it holds the
  // parameters of the returned step, the first this worker runs: 0 in a new job, later for a
  // worker that replaces one that died (the step that one did not finish). total_steps is the
  // job's length (learning-rate schedule).
  virtual uint64_t start(float* host_params, uint64_t total_steps) = 0;
  // host_grad[from, total) of step `step` is final (called during backward, `from` decreasing).
  virtual void gradient_ready(uint64_t step, float* host_grad, size_t from, const PushInfo& info) = 0;
  // Step `step`'s plan (info.checkpoint) before any of its pushes, for a caller that pushes the
  // step's embedding rows before its dense gradient (a script's EmbeddingBag, worker/python/);
  // the trainer's first gradient_ready comes before its rows. Hybrid: the rows' pushes carry the
  // version to checkpoint.
  virtual void plan_step(uint64_t /*step*/, const PushInfo& /*info*/) {}
  // The whole gradient is final: leaves version step+1 in host_params. Sets times->push_us,
  // wait_us and pull_us to what this call took (pushes made by gradient_ready are the caller's
  // to time).
  virtual StepMetrics finish_step(uint64_t step, float* host_params, float* host_grad, const PushInfo& info,
                                  StepTimes* times) = 0;
  // The end of this worker's part: `stopped` when the job stopped before its last step (the
  // chief's stop, docs/checkpoints.md), which the PS shards are told so that they do not write
  // --save-params' tables of a job that has no result yet.
  virtual void done(bool stopped) = 0;
  // Whether the trainer copies the gradient to host_grad during backward (as each layer's part
  // is final). False when the exchange reduces the device's own gradient buffer (NCCL): it then
  // brings the reduced gradient to host_grad itself, in finish_step.
  virtual bool stages_gradient() const { return true; }
  // The PS shards' embedding tables (docs/sparse.md), for the trainer's CTR input; nullptr where
  // there are none (allreduce).
  virtual RowSource* row_source() { return nullptr; }
  // Batch norm's global statistics among the workers of a step (worker/exchange/stats_exchange.h);
  // nullptr where the mode has none (async, ssp).
  virtual StatsExchange* stats_exchange() { return nullptr; }
  // Called by finish_step once this worker has sent what it had to send and only waits (for its
  // parameters, or its peers): the trainer wakes its data reader there, into a core that would
  // otherwise idle, instead of letting it preempt the step's compute.
  void set_idle_hook(std::function<void()> hook) { idle_ = std::move(hook); }

 protected:
  void idle() const {
    if (idle_) idle_();
  }

 private:
  std::function<void()> idle_;
};

// Makes the exchange once the model's size (floats) and the worker's replica are known.
using ExchangeFactory = std::function<std::unique_ptr<Exchange>(uint64_t total, Replica& replica)>;

// In allreduce mode: push_us is the all-reduce, pull_us the local optimizer update, wait_us 0.
// A collective that is on_device() (NCCL) sums replica.grad() where the backend keeps it; the
// ring sums the host copy.
std::unique_ptr<Exchange> make_allreduce_exchange(const ExchangeOptions& options, uint64_t total,
                                                  std::unique_ptr<Collective> collective, Replica& replica);

}  // namespace pstrain
