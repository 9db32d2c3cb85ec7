// --max-shard-mib's default (ps/shard_memory.h, docs/sparse.md "Memory"): a shard's share of its
// host, not the whole host per shard (issue 50: two shards on one host were each allowed all of
// its memory, and a save's second copy of the tables was counted nowhere).
#include "ps/shard_memory.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ps/options_from_job.h"
#include "shared/config/options.h"

namespace pstrain {
namespace {

JobOptions ps_flags(std::vector<const char*> more) {
  std::vector<const char*> args = {"prog",         "--index",   "1",           "--num-ps", "2",
                                   "--train-data", "train.tsv", "--test-data", "test.tsv"};
  args.insert(args.end(), more.begin(), more.end());
  const auto o = parse_job_options(Role::kPs, static_cast<int>(args.size()), args.data(), EnvMap{});
  EXPECT_TRUE(o);
  return o ? *o : JobOptions();
}

TEST(ShardMemoryTest, TheDefaultSharesTheHostAmongItsShardsLessASavesHeadroom) {
  // 24 GiB less an eighth: 21504 MiB for the host's shards.
  EXPECT_EQ(default_max_shard_mib(24576, 1, 0), 21504u);
  EXPECT_EQ(default_max_shard_mib(24576, 2, 0), 10752u);
  EXPECT_EQ(default_max_shard_mib(24576, 3, 0), 7168u);
  // Rows of 568 bytes (dim 64, Adagrad: 24 of bookkeeping, 2 x 256 of weights and slot, 32 of
  // index) need 16 more each to be saved: 10752 x 568 / 584.
  TableOptions t;
  t.dim = 64;
  t.optimizer.kind = TableOptimizer::kAdagrad;
  EXPECT_EQ(least_row_bytes({t}), 568u);
  EXPECT_EQ(default_max_shard_mib(24576, 2, 568), 10457u);
  TableOptions small = t;
  small.dim = 1;
  small.optimizer.kind = TableOptimizer::kSgd;
  EXPECT_EQ(least_row_bytes({t, small}), 60u);  // the smallest rows bound the save's share
  EXPECT_EQ(default_max_shard_mib(24576, 2, 60), 10752u * 60 / 76);
  EXPECT_EQ(least_row_bytes({}), 0u);
  EXPECT_EQ(default_max_shard_mib(24576, 0, 0), 21504u);    // no shard count: one
  EXPECT_EQ(default_max_shard_mib(4, 8, 60), 1u);           // never 0 ("no bound")
  EXPECT_EQ(default_max_shard_mib(UINT64_MAX, 2, 60), 0u);  // the host's memory unknown: no bound
  EXPECT_EQ(
      default_max_shard_text(24576, 2, 568),
      "10457 MiB (--max-shard-mib 0: 24576 MiB of this host, less 1/8, over 2 PS shard(s) on it, less a "
      "save's 16 bytes a row beside rows of 568)");
}

TEST(ShardMemoryTest, ThePsTakesItsShareOfThisHostUnlessTheBoundIsGiven) {
  const uint64_t host = physical_memory_mib();
  ASSERT_NE(host, UINT64_MAX);
  // Without --shards-on-host every one of --num-ps is taken to share this host.
  const JobOptions all = ps_flags({"--embedding-dim", "64", "--embedding-optimizer", "adagrad"});
  EXPECT_EQ(shards_on_host(all), 2);
  EXPECT_EQ(server_options(all).max_shard_mib, static_cast<int64_t>(default_max_shard_mib(host, 2, 568)));
  const JobOptions alone =
      ps_flags({"--embedding-dim", "64", "--embedding-optimizer", "adagrad", "--shards-on-host", "1"});
  EXPECT_EQ(server_options(alone).max_shard_mib, static_cast<int64_t>(default_max_shard_mib(host, 1, 568)));
  EXPECT_LT(server_options(all).max_shard_mib, static_cast<int64_t>(host) / 2);  // before: the whole host
  const JobOptions dense = ps_flags({});
  EXPECT_EQ(server_options(dense).max_shard_mib, static_cast<int64_t>(default_max_shard_mib(host, 2, 0)));
  const JobOptions given = ps_flags({"--embedding-dim", "64", "--max-shard-mib", "100000"});
  EXPECT_EQ(server_options(given).max_shard_mib, 100000);
  EXPECT_EQ(max_shard_text(given), "100000 MiB (--max-shard-mib)");
}

}  // namespace
}  // namespace pstrain
