#include "worker/data/sampler.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>

#include "shared/util/error.h"
#include "shared/util/splitmix.h"

namespace pstrain {
namespace {


// Smallest even b with 2^b >= n, for n >= 2.
int even_domain_bits(uint64_t n) {
  const int bits = 64 - __builtin_clzll(n - 1);
  return bits + (bits & 1);
}

}  // namespace

Permutation::Permutation(uint64_t n, uint64_t seed, uint64_t epoch, bool shuffle)
    : n_(n), identity_(!shuffle || n <= 1) {
  if (identity_) return;
  half_bits_ = even_domain_bits(n) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  const uint64_t key = splitmix64(splitmix64(seed) ^ epoch);
  for (int r = 0; r < kRounds; ++r) keys_[r] = splitmix64(key + static_cast<uint64_t>(r));
}

uint64_t Permutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_;
  uint64_t right = x & half_mask_;
  for (const uint64_t key : keys_) {
    const uint64_t mixed = left ^ (splitmix64(right ^ key) & half_mask_);
    left = right;
    right = mixed;
  }
  return (left << half_bits_) | right;
}

uint64_t Permutation::operator()(uint64_t position) const {
  PSTRAIN_CHECK_LT(position, n_);
  if (identity_) return position;
  // The domain is < 4n, so on average fewer than 4 rounds of walking are needed.
  uint64_t x = encrypt(position);
  while (x >= n_) x = encrypt(x);
  return x;
}

ShardSampler::ShardSampler(uint64_t n, int rank, int world, int batch, uint64_t seed, bool shuffle)
    : ShardSampler(n, rank, std::vector<int>(static_cast<size_t>(std::max(world, 0)), batch), batch, seed, shuffle) {}

ShardSampler::ShardSampler(uint64_t n, int rank, std::vector<int> shares, int micro, uint64_t seed, bool shuffle)
    : n_(n), rank_(rank), shares_(std::move(shares)), micro_(micro), seed_(seed), shuffle_(shuffle) {
  const int world = static_cast<int>(shares_.size());
  if (world < 1) throw Error("data sampler: world size must be >= 1, got " + std::to_string(world));
  if (rank < 0 || rank >= world) {
    throw Error("data sampler: rank " + std::to_string(rank) + " out of range for " +
                std::to_string(world) + " workers");
  }
  for (size_t i = 0; i < shares_.size(); ++i) {
    if (shares_[i] < 1) throw Error("data sampler: batch size must be >= 1, got " + std::to_string(shares_[i]));
    if (static_cast<int>(i) < rank) offset_ += static_cast<uint64_t>(shares_[i]);
    global_ += static_cast<uint64_t>(shares_[i]);
  }
  if (micro < 1) throw Error("data sampler: micro-batch size must be >= 1, got " + std::to_string(micro));
  micro_ = std::min(micro, share());
  if (n < global_) {
    const bool equal = std::all_of(shares_.begin(), shares_.end(), [&](int b) { return b == shares_[0]; });
    throw Error("data sampler: empty shard: " + std::to_string(n) + " records < " +
                (equal ? std::to_string(world) + " workers x batch " + std::to_string(shares_[0])
                       : "a global batch of " + std::to_string(global_)));
  }
  steps_ = n / global_;
}

void ShardSampler::micro_records(uint64_t epoch, uint64_t step, int j, size_t* out) const {
  if (step >= steps_) {
    throw Error("data sampler: step " + std::to_string(step) + " out of range (" +
                std::to_string(steps_) + " steps per epoch)");
  }
  if (j < 0 || j >= micro_batches()) {
    throw Error("data sampler: micro-batch " + std::to_string(j) + " out of range (" +
                std::to_string(micro_batches()) + " per step)");
  }
  const Permutation perm(n_, seed_, epoch, shuffle_);
  const uint64_t first = step * global_ + offset_ + static_cast<uint64_t>(j) * static_cast<uint64_t>(micro_);
  const int size = micro_size(j);
  for (int i = 0; i < size; ++i) out[i] = static_cast<size_t>(perm(first + static_cast<uint64_t>(i)));
}

void ShardSampler::batch_records(uint64_t epoch, uint64_t step, size_t* out) const {
  for (int j = 0; j < micro_batches(); ++j) micro_records(epoch, step, j, out + static_cast<ptrdiff_t>(j) * micro_);
}

}  // namespace pstrain
