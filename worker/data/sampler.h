// Sharded sampling (docs/design.md, "Data sharding"): per epoch one permutation of the record indices from a seed
// shared by all workers; each global step takes the next B positions of it, split among the
// workers by their shares. N workers therefore see exactly the global batches one worker of batch
// B sees.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <vector>

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

// Worker i contributes shares[i] samples to every global step (docs/operations.md, "Batch
// sizes"): global step k of an epoch consumes positions [k*B, (k+1)*B) of the epoch's permutation,
// B = sum of the shares, and worker i takes the contiguous run of its share that starts after
// the shares of workers 0..i-1. So N workers with shares b_i see exactly the global batches one
// worker of batch B sees, whatever the b_i. A worker computes its share in micro-batches of up
// to `micro` samples (gradient accumulation): micro-batch j is the j-th run of `micro` positions
// of its share (the last one may be shorter).
class ShardSampler {
 public:
  // Equal shares: every one of `world` workers takes `batch` samples a step, in one micro-batch.
  ShardSampler(uint64_t n, int rank, int world, int batch, uint64_t seed, bool shuffle);
  // Throws pstrain::Error for invalid arguments or an empty epoch (n < sum of shares).
  ShardSampler(uint64_t n, int rank, std::vector<int> shares, int micro, uint64_t seed, bool shuffle);

  // floor(n / B): the epoch's remainder is dropped so all workers run equal steps.
  uint64_t steps_per_epoch() const { return steps_; }
  uint64_t shard_size() const { return steps_ * static_cast<uint64_t>(share()); }
  int share() const { return shares_[static_cast<size_t>(rank_)]; }  // this worker's samples a step
  uint64_t global_batch() const { return global_; }                  // B
  int batch() const { return micro_; }                               // the largest micro-batch
  int micro_batches() const { return (share() + micro_ - 1) / micro_; }
  int micro_size(int j) const { return std::min(micro_, share() - j * micro_); }
  int rank() const { return rank_; }
  int world() const { return static_cast<int>(shares_.size()); }

  // Fills out[0, micro_size(j)) with the records of micro-batch j of `step`. Throws
  // pstrain::Error if step >= steps_per_epoch() or j >= micro_batches().
  void micro_records(uint64_t epoch, uint64_t step, int j, size_t* out) const;
  // The whole share of `step` (all micro-batches in order): out[0, share()).
  void batch_records(uint64_t epoch, uint64_t step, size_t* out) const;

 private:
  uint64_t n_;
  int rank_;
  std::vector<int> shares_;
  int micro_;
  uint64_t seed_;
  bool shuffle_;
  uint64_t global_ = 0, offset_ = 0;  // B, and this worker's first position within a step
  uint64_t steps_ = 0;
};

}  // namespace pstrain
