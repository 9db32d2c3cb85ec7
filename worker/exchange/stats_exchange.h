// Batch norm's global statistics (docs/models.md, "batchnorm"): each batchnorm layer's
// per-channel sums combined across the workers of a step, so that N workers of batch b normalise
// as one process of batch N*b (the mirrored contract). The model calls it through LayerContext;
// the exchange that moves the gradients provides it (Exchange::stats_exchange): over the PS
// shards in sync mode, over the all-reduce collective in --mode allreduce.
#pragma once

#include <memory>
#include <vector>

namespace pstrain {

class Collective;

class StatsExchange {
 public:
  virtual ~StatsExchange() = default;
  // Replaces `sums` (this worker's, host memory) by their sums over every worker of the step:
  // the same bits on every worker. Every worker calls it the same number of times, in the same
  // order, with the same size (the model's batchnorm layers: forward, then backward). Throws
  // pstrain::Error when a peer does not answer before the deadline.
  virtual void combine(std::vector<double>& sums) = 0;
};

// Over the all-reduce collective (its double scalars, kMaxScalars at a time); `collective` must
// outlive it and is called from the thread that owns it (the trainer's).
std::unique_ptr<StatsExchange> make_collective_stats(Collective& collective);

}  // namespace pstrain
