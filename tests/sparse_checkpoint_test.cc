// A table's checkpoint bytes: the round trip, re-slicing onto another shard count, and damaged
// or mismatched files refused with nothing changed.
#include <gtest/gtest.h>

#include "tests/sparse_test_util.h"

namespace pstrain {
namespace {

using namespace sparse_test;

TableOptions admitting_table() {
  TableOptions t = table("adam");
  t.min_count = 2;  // so that files hold sightings too
  return t;
}

// Shards 0 .. num_ps - 1 after `steps`, each applying its part of every push.
std::vector<ShardTables> trained(int num_ps, const std::vector<std::vector<Grads>>& steps) {
  std::vector<ShardTables> shards;
  for (int s = 0; s < num_ps; ++s) shards.push_back(shard(admitting_table(), s, num_ps));
  for (size_t k = 0; k < steps.size(); ++k) {
    for (int s = 0; s < num_ps; ++s) {
      std::vector<Grads> mine;
      for (const Grads& g : steps[k]) mine.push_back(split(g, s, num_ps, 4));
      apply_ok(shards[static_cast<size_t>(s)], k, mine);
    }
  }
  return shards;
}

TEST(SparseCheckpointTest, RoundTripGivesTheSameBytesAndTraining) {
  const auto steps = random_steps(5, 2, 30, 4, 3);
  ShardTables a = std::move(trained(1, steps)[0]);
  apply_ok(a, 5, {Grads{kTable, {12345}, {1, 1, 1, 1}}});  // a sighting, not a row yet
  const std::string bytes = saved(a);
  ShardTables b = shard(admitting_table());
  std::string error;
  ASSERT_TRUE(b.load(kTable, bytes, &error)) << error;
  EXPECT_EQ(saved(b), bytes);
  EXPECT_EQ(b.table(kTable)->stats().rows, a.table(kTable)->stats().rows);
  EXPECT_GT(a.table(kTable)->stats().sightings, 0u);
  const auto more = random_steps(1, 2, 30, 4, 4)[0];
  apply_ok(a, 6, more);
  apply_ok(b, 6, more);
  EXPECT_EQ(saved(b), saved(a));  // slots and per-row update counts came back
}

TEST(SparseCheckpointTest, TwoShardsFilesResliceOntoThree) {
  const auto steps = random_steps(5, 3, 60, 4, 8);
  std::vector<ShardTables> two = trained(2, steps);
  std::vector<ShardTables> three;
  for (int s = 0; s < 3; ++s) {
    three.push_back(shard(admitting_table(), s, 3));
    for (const ShardTables& old : two) {
      std::string error;
      ASSERT_TRUE(three.back().load(kTable, saved(old), &error)) << error;
    }
  }
  size_t rows2 = 0, rows3 = 0, seen2 = 0, seen3 = 0;
  for (const auto& s : two) rows2 += s.table(kTable)->stats().rows, seen2 += s.table(kTable)->stats().sightings;
  for (const auto& s : three) rows3 += s.table(kTable)->stats().rows, seen3 += s.table(kTable)->stats().sightings;
  EXPECT_EQ(rows3, rows2);
  EXPECT_EQ(seen3, seen2);
  // One more step on each layout: every ID's row the same bits (weights, slots and counts moved).
  const auto more = random_steps(1, 3, 60, 4, 9)[0];
  for (int s = 0; s < 2; ++s) {
    std::vector<Grads> mine;
    for (const Grads& g : more) mine.push_back(split(g, s, 2, 4));
    apply_ok(two[static_cast<size_t>(s)], 5, mine);
  }
  for (int s = 0; s < 3; ++s) {
    std::vector<Grads> mine;
    for (const Grads& g : more) mine.push_back(split(g, s, 3, 4));
    apply_ok(three[static_cast<size_t>(s)], 5, mine);
  }
  for (uint64_t i = 0; i < 60; ++i) {
    const uint64_t id = i * 0x100000001b3ull;
    EXPECT_TRUE(same_bits(pull(three[static_cast<size_t>(shard_of(id, 3))], {id}),
                          pull(two[static_cast<size_t>(shard_of(id, 2))], {id})))
        << id;
  }
}

TEST(SparseCheckpointTest, DamagedOrMismatchedFilesAreRefusedAndChangeNothing) {
  const std::string bytes = saved(trained(1, random_steps(2, 1, 6, 4, 1))[0]);
  ShardTables s = shard(admitting_table());
  std::string error;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_FALSE(s.load(kTable, bad, &error)) << i;
  }
  EXPECT_NE(error.find("checksum mismatch"), std::string::npos) << error;
  for (size_t n : {size_t{0}, size_t{11}, bytes.size() - 1}) {
    EXPECT_FALSE(s.load(kTable, bytes.substr(0, n), &error)) << n;
  }
  EXPECT_FALSE(s.load(kTable, bytes + "x", &error));
  TableOptions wide = admitting_table();
  wide.dim = 8;
  ShardTables other = shard(wide);
  EXPECT_FALSE(other.load(kTable, bytes, &error));
  EXPECT_NE(error.find("dim 4, this job's is 8"), std::string::npos) << error;
  TableOptions ftrl = admitting_table();
  ftrl.optimizer.kind = TableOptimizer::kFtrl;
  ShardTables ftrl_shard = shard(ftrl);
  EXPECT_FALSE(ftrl_shard.load(kTable, bytes, &error));
  EXPECT_NE(error.find("optimizer adam, this job's is ftrl"), std::string::npos) << error;
  EXPECT_EQ(s.table(kTable)->stats().rows, 0u);
  ASSERT_TRUE(s.load(kTable, bytes, &error)) << error;
  const std::string once = saved(s);
  EXPECT_FALSE(s.load(kTable, bytes, &error));
  EXPECT_NE(error.find("is saved twice"), std::string::npos) << error;
  EXPECT_EQ(saved(s), once);
}

TEST(SparseCheckpointTest, LoadingPastTheMemoryBoundIsRefused) {
  const std::string bytes = saved(trained(1, random_steps(2, 1, 30, 4, 1))[0]);
  ShardTables s = shard(admitting_table(), 0, 1, 1000);
  std::string error;
  EXPECT_FALSE(s.load(kTable, bytes, &error));
  EXPECT_NE(error.find("over the shard's bound"), std::string::npos) << error;
  EXPECT_EQ(s.table(kTable)->stats().rows, 0u);
}

}  // namespace
}  // namespace pstrain
