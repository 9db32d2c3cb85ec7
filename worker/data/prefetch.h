// A bounded prefetch queue: one reader thread fills batches ahead of the trainer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace pstrain {

class Dataset;
class ShardSampler;

struct Batch {
  uint64_t epoch = 0, step = 0;
  int size = 0;
  std::vector<float> x;    // size * feature_dim features in [0, 1]
  std::vector<int32_t> y;  // size labels
};

class Prefetcher {
 public:
  // Produces batches (epoch, step) in order from (first_epoch, 0) for `epochs` epochs, or stops
  // after max_batches (0 = no limit). At most `depth` (>= 1) batches are queued. `data` and
  // `sampler` must outlive the Prefetcher. The reader thread starts here.
  Prefetcher(const Dataset& data, const ShardSampler& sampler, uint64_t first_epoch,
             uint64_t epochs, uint64_t max_batches, int depth);
  ~Prefetcher();  // stops the reader and joins it, also when the consumer stopped early
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Swaps the next batch into `out` and takes out's old buffers back for reuse, so a consumer
  // that keeps passing the same Batch causes no allocation in steady state. Returns false at the
  // end. A reader-thread failure is thrown here as pstrain::Error (after the batches before it).
  bool next(Batch& out);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pstrain
