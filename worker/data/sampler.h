// Sharded sampling (DESIGN.md "Data"): per epoch one permutation of the record indices from a seed
// shared by all workers; worker i of N takes positions i, i+N, i+2N, ... . N workers of batch b
// therefore see exactly the global batches one worker of batch N*b sees.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pstrain {

// A bijection on [0, n) in O(1) memory: a keyed Feistel network over the smallest power-of-two
// domain of even bit width >= n, cycle-walked back into [0, n). Keyed by (seed, epoch); the
// identity when shuffle is false.
class Permutation {
 public:
  Permutation(uint64_t n, uint64_t seed, uint64_t epoch, bool shuffle);
  uint64_t operator()(uint64_t position) const;  // position < n

 private:
  static constexpr int kRounds = 6;
  uint64_t encrypt(uint64_t x) const;

  uint64_t n_;
  bool identity_;
  int half_bits_ = 0;
  uint64_t half_mask_ = 0;
  uint64_t keys_[kRounds] = {};
};

class ShardSampler {
 public:
  // n records, this worker's rank of world workers, per-worker batch size. Throws pstrain::Error
  // for invalid arguments or an empty shard (n < world * batch).
  ShardSampler(uint64_t n, int rank, int world, int batch, uint64_t seed, bool shuffle);

  // floor(n / (world * batch)): the epoch's remainder is dropped so all workers run equal steps.
  uint64_t steps_per_epoch() const { return steps_; }
  uint64_t shard_size() const { return steps_ * static_cast<uint64_t>(batch_); }
  int batch() const { return batch_; }
  int rank() const { return rank_; }
  int world() const { return world_; }

  // Fills out[j] = perm_epoch(rank + world * (step * batch + j)) for j < batch.
  // Throws pstrain::Error if step >= steps_per_epoch().
  void batch_records(uint64_t epoch, uint64_t step, size_t* out) const;

 private:
  uint64_t n_;
  int rank_;
  int world_;
  int batch_;
  uint64_t seed_;
  bool shuffle_;
  uint64_t steps_ = 0;
};

}  // namespace pstrain
