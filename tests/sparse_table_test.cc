// The PS's embedding tables (ps/sparse/): hashing, the initialiser, the step's apply and its
// determinism, lazy Adam, admission, expiry, the memory bound and hostile input.
#include <gtest/gtest.h>

#include <cmath>

#include "shared/train/row_init.h"
#include "shared/train/optimizer.h"
#include "shared/util/error.h"
#include "tests/sparse_test_util.h"

namespace pstrain {
namespace {

using namespace sparse_test;

TEST(SparseIdTest, ShardOfIsPinned) {
  EXPECT_EQ(mix_id(0), 0xe220a8397b1dcdafull);  // SplitMix64's first output for seed 0
  EXPECT_EQ(mix_id(1), 0x910a2dec89025cc1ull);
  EXPECT_EQ(shard_of(0, 7), static_cast<int>(0xe220a8397b1dcdafull % 7));
  EXPECT_EQ(shard_of(123456789, 1), 0);
  const std::vector<int> pinned = {shard_of(1, 3), shard_of(2, 3), shard_of(3, 3), shard_of(1ull << 63, 3)};
  EXPECT_EQ(pinned, (std::vector<int>{2, 1, 0, 1}));
}

TEST(SparseIdTest, ConsecutiveIdsSpreadEvenly) {
  std::vector<int> count(7, 0);
  for (uint64_t id = 0; id < 70000; ++id) ++count[static_cast<size_t>(shard_of(id, 7))];
  for (int c : count) EXPECT_NEAR(c, 10000, 300);
}

TEST(SparseInitTest, RowIsAPureFunctionOfSeedTableAndId) {
  const RowInit init;
  std::vector<float> a(16), b(16), c(16);
  init_row(init, 42, 7, 1234, 16, a.data());
  init_row(init, 42, 7, 1234, 16, b.data());
  EXPECT_TRUE(same_bits(a, b));
  init_row(init, 42, 8, 1234, 16, c.data());
  EXPECT_FALSE(same_bits(a, c));
  init_row(init, 43, 7, 1234, 16, c.data());
  EXPECT_FALSE(same_bits(a, c));
  double sum = 0;
  std::vector<float> row(64);
  for (uint64_t id = 0; id < 1000; ++id) {
    init_row(init, 1, 2, id, 64, row.data());
    for (float v : row) {
      ASSERT_LE(std::fabs(v), 0.125f);  // 1 / sqrt(64)
      sum += v;
    }
  }
  EXPECT_NEAR(sum / 64000, 0.0, 0.002);
}

TEST(SparseInitTest, PulledRowsAreTheSameOnAnyShardCountInAnyOrder) {
  const std::vector<uint64_t> ids = {5, 99, 1ull << 40, 17, 3};
  const ShardTables one = shard(table("adagrad"));
  const std::vector<float> want = pull(one, ids);
  for (int num_ps : {2, 3, 5}) {
    std::vector<ShardTables> shards;
    for (int s = 0; s < num_ps; ++s) shards.push_back(shard(table("adagrad"), s, num_ps));
    for (size_t k = ids.size(); k-- > 0;) {  // backwards, one at a time
      const auto row = pull(shards[static_cast<size_t>(shard_of(ids[k], num_ps))], {ids[k]});
      EXPECT_TRUE(same_bits(row, std::vector<float>(want.begin() + k * 4, want.begin() + (k + 1) * 4)));
    }
  }
}

// One process's state after `steps` on num_ps shards: every ID's row, pulled from its shard.
std::vector<float> train(const TableOptions& t, int num_ps, const std::vector<std::vector<Grads>>& steps,
                         const std::vector<uint64_t>& ids) {
  std::vector<ShardTables> shards;
  for (int s = 0; s < num_ps; ++s) shards.push_back(shard(t, s, num_ps));
  for (size_t k = 0; k < steps.size(); ++k) {
    for (int s = 0; s < num_ps; ++s) {
      std::vector<Grads> mine;
      for (const Grads& g : steps[k]) mine.push_back(split(g, s, num_ps, t.dim));
      apply_ok(shards[static_cast<size_t>(s)], k, mine);
    }
  }
  std::vector<float> out;
  for (uint64_t id : ids) {
    const auto row = pull(shards[static_cast<size_t>(shard_of(id, num_ps))], {id});
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

TEST(SparseStoreTest, EveryOptimizerGivesTheSameBitsOnAnyShardCount) {
  const auto steps = random_steps(6, 3, 40, 4, 11);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 40; ++i) ids.push_back(i * 0x100000001b3ull);
  for (const char* kind : {"sgd", "adagrad", "adam", "ftrl"}) {
    TableOptions t = table(kind);
    t.min_count = 2;
    t.expiry_steps = 3;
    const std::vector<float> one = train(t, 1, steps, ids);
    EXPECT_TRUE(same_bits(train(t, 2, steps, ids), one)) << kind;
    EXPECT_TRUE(same_bits(train(t, 3, steps, ids), one)) << kind;
  }
}

// A sample's IDs and gradient rows; a worker's push sums its samples' rows per ID in sample order.
struct Sample {
  std::vector<uint64_t> ids;
  std::vector<float> g;
};

Grads summed(const std::vector<Sample>& samples, size_t dim) {
  Grads out;
  for (const Sample& s : samples) {
    for (size_t i = 0; i < s.ids.size(); ++i) {
      size_t at = 0;
      while (at < out.ids.size() && out.ids[at] != s.ids[i]) ++at;
      if (at == out.ids.size()) {
        out.ids.push_back(s.ids[i]);
        out.g.resize(out.g.size() + dim, 0.0f);
      }
      for (size_t j = 0; j < dim; ++j) out.g[at * dim + j] += s.g[i * dim + j];
    }
  }
  return out;
}

// N workers of batch b against one worker of batch N * b, the concatenation of theirs. The
// gradients are multiples of 1/16 below 1, so every sum is exact and the two agree bit for bit;
// with other values the sums' grouping (per worker, then in worker order) rounds otherwise, as
// for the dense variables (docs/design.md: "to float rounding").
TEST(SparseStoreTest, MirroredContractNWorkersEqualOneWithTheConcatenatedBatch) {
  constexpr int kWorkers = 3, kBatch = 4, kSteps = 5;
  std::mt19937 gen(5);
  for (const char* kind : {"sgd", "adagrad", "adam", "ftrl"}) {
    ShardTables many = shard(table(kind)), one = shard(table(kind));
    for (uint64_t step = 0; step < kSteps; ++step) {
      std::vector<Grads> pushes;
      std::vector<Sample> all;
      for (int w = 0; w < kWorkers; ++w) {
        std::vector<Sample> batch(kBatch);
        for (Sample& s : batch) {
          s.ids = {gen() % 10, 10 + gen() % 10};
          for (int j = 0; j < 8; ++j) s.g.push_back(static_cast<float>(static_cast<int>(gen() % 31) - 15) / 16.0f);
        }
        pushes.push_back(summed(batch, 4));
        all.insert(all.end(), batch.begin(), batch.end());
      }
      apply_ok(many, step, pushes, 1.0f / (kWorkers * kBatch));
      apply_ok(one, step, {summed(all, 4)}, 1.0f / (kWorkers * kBatch));
    }
    EXPECT_EQ(saved(many), saved(one)) << kind;
  }
}

TEST(EmbeddingTableTest, LazyAdamLeavesUntouchedRowsUnchanged) {
  ShardTables s = shard(table("adam", 2));
  const std::vector<float> b0 = pull(s, {2});
  const Grads both{kTable, {1, 2}, {0.5f, -1.0f, 2.0f, 0.25f}}, only_a{kTable, {1}, {1.0f, 1.0f}};
  apply_ok(s, 0, {both});
  const std::vector<float> b1 = pull(s, {2});
  apply_ok(s, 1, {only_a});
  apply_ok(s, 2, {only_a});
  EXPECT_TRUE(same_bits(pull(s, {2}), b1));
  const Grads again{kTable, {2}, {-0.5f, 0.75f}};
  apply_ok(s, 3, {again});
  // Row 2's second update: t = 2 in its bias corrections, not the step's 4.
  OptimizerOptions dense;
  dense.kind = OptimizerKind::kAdam;
  dense.weight_decay = 0;
  auto ref = make_optimizer(dense, 2);
  std::vector<float> w = b0;
  ref->apply(0, 2, w.data(), both.g.data() + 2, 0.25f, 0.1, 0);
  EXPECT_TRUE(same_bits(w, b1));
  ref->apply(0, 2, w.data(), again.g.data(), 0.25f, 0.1, 1);
  EXPECT_TRUE(same_bits(pull(s, {2}), w));
}

TEST(EmbeddingTableTest, AnIdIsAdmittedAtItsMinCountThSighting) {
  TableOptions t = table("sgd", 2);
  t.min_count = 3;
  ShardTables s = shard(t);
  const std::vector<float> zeros(2, 0.0f);
  std::vector<float> fresh(2);
  init_row(t.init, t.seed, t.id, 9, 2, fresh.data());
  const Grads x{kTable, {9, 4}, {1, 1, 1, 1}}, x_only{kTable, {9}, {1, 1}};
  apply_ok(s, 0, {x, x});  // two workers: one sighting per step
  EXPECT_EQ(pull(s, {9}), zeros);
  apply_ok(s, 1, {x});
  EXPECT_EQ(pull(s, {9}), zeros);
  EXPECT_EQ(s.table(kTable)->stats().sightings, 2u);
  apply_ok(s, 2, {x_only});  // the third sighting: a fresh row, the gradient dropped
  EXPECT_TRUE(same_bits(pull(s, {9}), fresh));
  EXPECT_EQ(pull(s, {4}), zeros);
  const TableStats stats = s.table(kTable)->stats();
  EXPECT_EQ(stats.rows, 1u);
  EXPECT_EQ(stats.admissions, 1u);
  EXPECT_EQ(stats.sightings, 1u);  // ID 4, seen twice
  apply_ok(s, 3, {x_only});
  EXPECT_FALSE(same_bits(pull(s, {9}), fresh));
}

TEST(EmbeddingTableTest, RowsUnusedForExpiryStepsAreEvicted) {
  TableOptions t = table("adagrad", 2);
  t.expiry_steps = 2;  // swept every step
  ShardTables s = shard(t);
  const std::vector<float> fresh = pull(s, {1});
  const Grads a_b{kTable, {1, 2}, {1, 1, 1, 1}}, b{kTable, {2}, {1, 1}};
  apply_ok(s, 0, {a_b});
  apply_ok(s, 1, {b});
  EXPECT_EQ(s.table(kTable)->stats().rows, 2u);
  apply_ok(s, 2, {b});
  const TableStats stats = s.table(kTable)->stats();
  EXPECT_EQ(stats.rows, 1u);
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_TRUE(same_bits(pull(s, {1}), fresh));  // gone: it reads as new again
}

TEST(EmbeddingTableTest, ExpirySweepsEveryQuarterOfItsSteps) {
  TableOptions t = table("sgd", 1);
  t.expiry_steps = 8;  // swept at the end of steps 1, 3, 5, ...
  ShardTables s = shard(t);
  apply_ok(s, 0, {Grads{kTable, {1}, {1}}});
  for (uint64_t step = 1; step < 9; ++step) apply_ok(s, step, {Grads{kTable, {3}, {1}}});
  EXPECT_EQ(s.table(kTable)->stats().rows, 2u);  // 8 steps unused, but no sweep after step 8
  apply_ok(s, 9, {Grads{kTable, {3}, {1}}});
  EXPECT_EQ(s.table(kTable)->stats().rows, 1u);
  EXPECT_EQ(s.table(kTable)->stats().evictions, 1u);
}

TEST(EmbeddingTableTest, SightingsExpireToo) {
  TableOptions t = table("sgd", 1);
  t.expiry_steps = 2;
  t.min_count = 2;
  ShardTables s = shard(t);
  apply_ok(s, 0, {Grads{kTable, {5}, {1}}});
  apply_ok(s, 1, {Grads{kTable, {6}, {1}}});
  EXPECT_EQ(s.table(kTable)->stats().sightings, 2u);
  apply_ok(s, 2, {Grads{kTable, {6}, {1}}});  // 6 admitted; 5's sighting expired
  EXPECT_EQ(s.table(kTable)->stats().sightings, 0u);
  apply_ok(s, 3, {Grads{kTable, {5}, {1}}});  // counted from 1 again: not admitted
  EXPECT_EQ(s.table(kTable)->stats().rows, 1u);
  EXPECT_EQ(s.table(kTable)->stats().sightings, 1u);
}

}  // namespace
}  // namespace pstrain
