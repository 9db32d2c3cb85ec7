// The sparse tables' bounds: the memory bound (--max-shard-mib), hostile pushes and pulls
// refused with nothing changed, and the memory accounting against an expectation and malloc.
#include <gtest/gtest.h>

#include <malloc.h>

#include <limits>

#include "shared/util/error.h"
#include "tests/sparse_test_util.h"

namespace pstrain {
namespace {

using namespace sparse_test;

TEST(SparseStoreTest, MaxBytesRefusesAnInsertionAndChangesNothing) {
  TableOptions t = table("sgd");
  t.block_rows = 4;
  const Grads four{kTable, {1, 2, 3, 4}, std::vector<float>(16, 1.0f)};
  ShardTables unbounded = shard(t);
  apply_ok(unbounded, 0, {four});
  const size_t four_rows = unbounded.bytes();
  ShardTables s = shard(t, 0, 1, four_rows + 80);  // less than another block (4 rows of 40 bytes)
  apply_ok(s, 0, {four});
  const std::string before = saved(s);
  const std::string counters = s.counters_text();
  std::string error;
  EXPECT_FALSE(apply(s, 1, {Grads{kTable, {1, 5}, std::vector<float>(8, 1.0f)}}, &error));
  EXPECT_NE(error.find("1 new embedding rows would bring shard 0's tables to"), std::string::npos) << error;
  EXPECT_NE(error.find("(--max-shard-mib, less the dense slice's state)"), std::string::npos) << error;
  EXPECT_EQ(saved(s), before);
  EXPECT_EQ(s.counters_text(), counters);
  apply_ok(s, 1, {four});  // rows it holds still train
}

// Each hostile step is refused with its reason, and the table is as it was.
TEST(SparseStoreTest, HostilePushesAreRefusedAndChangeNothing) {
  ShardTables s = shard(table("adam", 2), 0, 2);
  const std::vector<uint64_t> mine = ids_of(0, 2, 3), theirs = ids_of(1, 2, 1);
  const Grads good{kTable, {mine[0], mine[1]}, {1, 2, 3, 4}};
  apply_ok(s, 0, {good});
  const std::string before = saved(s);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::vector<Grads> workers;
    const char* error;
  };
  const std::vector<Case> cases = {
      {{Grads{kTable, {mine[0], mine[0]}, {1, 2, 3, 4}}}, "appears twice"},
      {{Grads{kTable, {mine[0], mine[1]}, {1, 2, 3}}}, "3 gradient floats for 2 IDs of dim 2"},
      {{Grads{kTable, {mine[0]}, {1, nan}}}, "NaN or infinite"},
      {{Grads{kTable, {mine[0]}, {-inf, 1}}}, "NaN or infinite"},
      {{Grads{99, {mine[0]}, {1, 1}}}, "unknown embedding table 99"},
      {{Grads{kTable, {theirs[0]}, {1, 1}}}, "is not held by shard 0 of 2"},
      {{good, Grads{kTable, {mine[2], mine[2]}, {1, 1, 1, 1}}}, "worker 1: embedding table 'clicks': ID"},
  };
  for (const Case& c : cases) {
    std::string error;
    EXPECT_FALSE(apply(s, 1, c.workers, &error));
    EXPECT_NE(error.find(c.error), std::string::npos) << error;
  }
  std::string error;
  std::vector<std::vector<TablePush>> twice = {{good.push(), good.push()}};
  EXPECT_FALSE(s.apply_step(SparseStep{1, 0.1, 1.0f}, twice, &error));
  EXPECT_NE(error.find("table 7 pushed twice"), std::string::npos) << error;
  std::vector<std::vector<TablePush>> huge = {{TablePush{kTable, nullptr, SIZE_MAX / 2, nullptr, 0}}};
  EXPECT_FALSE(s.apply_step(SparseStep{1, 0.1, 1.0f}, huge, &error));
  EXPECT_NE(error.find("gradient floats"), std::string::npos) << error;
  EXPECT_FALSE(apply(s, 0, {good}, &error));
  EXPECT_NE(error.find("sparse step 0 after step 0"), std::string::npos) << error;
  EXPECT_FALSE(apply(s, 1, {good}, &error, std::numeric_limits<double>::quiet_NaN()));
  EXPECT_EQ(saved(s), before);
  apply_ok(s, 1, {good});
}

TEST(SparseStoreTest, HostilePullsAreRefused) {
  const ShardTables s = shard(table("sgd", 2), 1, 2);
  const uint64_t mine = ids_of(1, 2, 1)[0], theirs = ids_of(0, 2, 1)[0];
  std::vector<float> out(4);
  std::string error;
  const uint64_t twice[] = {mine, mine};
  EXPECT_FALSE(s.pull(kTable, twice, 2, out.data(), &error));
  EXPECT_NE(error.find("appears twice"), std::string::npos) << error;
  EXPECT_FALSE(s.pull(kTable, &theirs, 1, out.data(), &error));
  EXPECT_NE(error.find("not held by shard 1 of 2"), std::string::npos) << error;
  EXPECT_FALSE(s.pull(3, &mine, 1, out.data(), &error));
  EXPECT_NE(error.find("unknown embedding table 3"), std::string::npos) << error;
  EXPECT_EQ(s.table(kTable)->stats().rows, 0u);
}

// Messages of more than 16 IDs go through a map: a duplicate is found wherever it
// is (here last, or a repeat of the first), every push and pull after a step's apply is checked
// afresh (nothing of the step's sums or an earlier message is taken for a duplicate).
TEST(SparseStoreTest, DuplicatesInLongMessagesAreFoundAndNothingElseIs) {
  ShardTables s = shard(table("adagrad", 2), 0, 2);
  const std::vector<uint64_t> mine = ids_of(0, 2, 40);
  const std::vector<uint64_t> first(mine.begin(), mine.begin() + 30), second(mine.begin() + 10, mine.end());
  apply_ok(s, 0, {Grads{kTable, first, std::vector<float>(60, 0.5f)}, Grads{kTable, second, std::vector<float>(60, 1.0f)}});
  std::vector<float> out(2 * 40);
  std::string error;
  EXPECT_TRUE(s.pull(kTable, mine.data(), mine.size(), out.data(), &error)) << error;  // the step's IDs again
  EXPECT_TRUE(s.pull(kTable, second.data(), second.size(), out.data(), &error)) << error;
  for (const size_t at : {size_t{0}, size_t{29}}) {
    std::vector<uint64_t> twice(first);
    twice.push_back(twice[at]);
    EXPECT_FALSE(s.pull(kTable, twice.data(), twice.size(), out.data(), &error));
    EXPECT_NE(error.find("ID " + std::to_string(twice[at]) + " appears twice"), std::string::npos) << error;
    EXPECT_FALSE(apply(s, 1, {Grads{kTable, twice, std::vector<float>(2 * twice.size(), 1.0f)}}, &error));
    EXPECT_NE(error.find("appears twice"), std::string::npos) << error;
  }
  // The checks share one map, kept from message to message unless a message needed more than
  // its kept slots (4 MiB: these 140000 IDs); after either, a message is checked afresh.
  const std::vector<uint64_t> many = ids_of(0, 2, 140000);
  std::vector<float> rows(2 * many.size());
  EXPECT_TRUE(s.pull(kTable, many.data(), many.size(), rows.data(), &error)) << error;
  EXPECT_TRUE(s.pull(kTable, mine.data(), mine.size(), out.data(), &error)) << error;
  std::vector<uint64_t> twice(first);
  twice.push_back(twice[7]);
  EXPECT_FALSE(s.pull(kTable, twice.data(), twice.size(), out.data(), &error));
  EXPECT_NE(error.find("ID " + std::to_string(twice[7]) + " appears twice"), std::string::npos) << error;
  apply_ok(s, 1, {Grads{kTable, second, std::vector<float>(60, 1.0f)}, Grads{kTable, first, std::vector<float>(60, 1.0f)}});
  EXPECT_EQ(s.table(kTable)->stats().rows, 40u);
}

TEST(SparseStoreTest, FtrlRefusesAZeroLearningRate) {
  ShardTables s = shard(table("ftrl", 1));
  std::string error;
  EXPECT_FALSE(apply(s, 0, {Grads{kTable, {1}, {1}}}, &error, 0.0));
  EXPECT_NE(error.find("ftrl needs a positive learning rate"), std::string::npos) << error;
}

TEST(SparseStoreTest, BadTablesAreErrors) {
  SparseShardOptions o;
  EXPECT_THROW(ShardTables(o, {table("sgd"), table("adam")}), Error);
  EXPECT_THROW(ShardTables(o, {table("sgd", 0)}), Error);
  o.index = 2;
  o.num_ps = 2;
  EXPECT_THROW(ShardTables(o, {table("sgd")}), Error);
}

// 10^5 rows of dim 16 with Adagrad: rows * ((16 + 16) * 4 + 24 bookkeeping) bytes, plus the ID
// index's 2^18 slots of 16 bytes each (the power of two at most half full), within 20%; and what
// malloc handed out, where it can be measured.
TEST(SparseStoreTest, MemoryAccountingForAHundredThousandRows) {
  constexpr size_t kRows = 100000, kDim = 16;
  Grads g;
  for (uint64_t id = 0; id < kRows; ++id) g.ids.push_back(id * 7919);
  g.g.assign(kRows * kDim, 0.5f);
  // Chunks from the heap and from mmap (the index's arrays are large enough to be mmapped).
  const auto allocated = [] { return mallinfo2().uordblks + mallinfo2().hblkhd; };
  const size_t heap_before = allocated();
  ShardTables s = shard(table("adagrad", kDim));
  apply_ok(s, 0, {g});
  const size_t heap = allocated() - heap_before;
  const double expected = kRows * ((kDim + kDim) * 4.0 + 24) + (1 << 18) * 16.0;
  RecordProperty("accounted_bytes", std::to_string(s.bytes()));
  RecordProperty("malloc_bytes", std::to_string(heap));
  EXPECT_NEAR(static_cast<double>(s.bytes()), expected, 0.2 * expected);
  EXPECT_EQ(s.table(kTable)->stats().rows, kRows);
  if (heap < (size_t{1} << 20)) GTEST_SKIP() << "malloc's figures do not show this heap (a sanitizer's allocator)";
  EXPECT_NEAR(static_cast<double>(s.bytes()), static_cast<double>(heap), 0.2 * static_cast<double>(heap));
}

}  // namespace
}  // namespace pstrain
