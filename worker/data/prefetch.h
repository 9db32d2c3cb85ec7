// A bounded prefetch queue: one reader thread fills batches ahead of the trainer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/data/augment.h"
#include "worker/data/dataset.h"

namespace pstrain {

class ShardSampler;

struct Batch {  // one micro-batch of a step (the whole step's share without accumulation)
  uint64_t epoch = 0, step = 0;
  int micro = 0, micro_batches = 1;  // micro-batch `micro` of the step's `micro_batches`
  int size = 0;
  std::vector<float> x;    // size * feature_dim features in [0, 1]
  std::vector<int32_t> y;  // size labels
  std::vector<float> t;    // size * target_width() float targets (--loss bce | mse | huber; else empty)
  std::vector<uint64_t> records;  // size record indices (what dropout masks depend on)
  IdLists ids;  // size * id_fields() fields' categorical IDs (Criteo data; else empty)
};

class Prefetcher {
 public:
  // Produces the micro-batches of steps (epoch, step) in order from (first_epoch, first_step)
  // until the end of epoch first_epoch + epochs - 1, or stops after max_batches steps (0 = no
  // limit). A job that resumes
  // mid-epoch (a replaced worker, a checkpoint) starts at first_step > 0: the sampler is a pure
  // function of (seed, epoch, step), so its batches are the uninterrupted run's. At most `depth`
  // (>= 1) batches are queued. `data` and `sampler` must outlive the Prefetcher. The reader
  // thread starts here. With `augment`, each batch's images are augmented (worker/data/augment.h);
  // throws pstrain::UsageError when the data are not images it can apply to.
  Prefetcher(const Dataset& data, const ShardSampler& sampler, uint64_t first_epoch,
             uint64_t epochs, uint64_t max_batches, int depth, uint64_t first_step = 0,
             const AugmentOptions& augment = {});
  ~Prefetcher();  // stops the reader and joins it, also when the consumer stopped early
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Swaps the next batch into `out` and takes out's old buffers back for reuse, so a consumer
  // that keeps passing the same Batch causes no allocation in steady state. Returns false at the
  // end. A reader-thread failure is thrown here as pstrain::Error (after the batches before it).
  bool next(Batch& out);
  // The same, but the reader is not woken for the slot this frees (unless the queue ran empty):
  // the caller wakes it with wake_reader() when it is about to wait anyway (a worker waiting for
  // its parameters), so the reads use a core that would idle instead of preempting the step.
  bool take(Batch& out);
  void wake_reader();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pstrain
