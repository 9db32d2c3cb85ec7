// shared/util/id_map.h's IdMap with table-and-ID keys (the worker's batch of keys, EmbeddingInput):
// keys that share a slot, the same ID in different tables, growth, and clear(n)'s reuse of a
// larger batch's slots without its keys. IdIndex (64-bit IDs) has its own suite, id_index_test.
#include "shared/util/id_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace pstrain {
namespace {

constexpr uint32_t kAbsent = IdMap<TableId>::kAbsent;

TEST(IdMapTest, TheSameIdInTwoTablesIsTwoKeys) {
  IdMap<TableId> map;
  EXPECT_EQ(map.find_or_insert(TableId{42, 0}, 1), kAbsent);
  EXPECT_EQ(map.find_or_insert(TableId{42, 1}, 2), kAbsent);
  EXPECT_EQ(map.find_or_insert(TableId{42, 0}, 3), 1u);  // found: the first value stays
  EXPECT_EQ(map.find(TableId{42, 1}), 2u);
  EXPECT_EQ(map.find(TableId{42, 2}), kAbsent);
  EXPECT_EQ(map.size(), 2u);
}

TEST(IdMapTest, KeysSharingASlotAreAllFoundAndErased) {
  IdMap<TableId> map(/*salt=*/7);
  map.reserve(8);  // 16 slots: room for the 8 keys below without growing
  const size_t bytes = map.bytes();
  const size_t home = map.home_slot(TableId{0, 3});
  std::vector<TableId> same;  // 8 keys whose search starts at one slot: one run of 8
  for (uint64_t id = 0; same.size() < 8; ++id) {
    if (map.home_slot(TableId{id, 3}) == home) same.push_back(TableId{id, 3});
  }
  for (uint32_t k = 0; k < same.size(); ++k) ASSERT_EQ(map.find_or_insert(same[k], k), kAbsent);
  ASSERT_EQ(map.bytes(), bytes);  // no growth: the keys did share the slots
  for (uint32_t k = 0; k < same.size(); ++k) EXPECT_EQ(map.find(same[k]), k);
  map.erase(same[3]);  // a hole in the middle of the run: the later keys stay reachable
  map.erase(same[0]);
  EXPECT_EQ(map.size(), 6u);
  for (uint32_t k = 0; k < same.size(); ++k) EXPECT_EQ(map.find(same[k]), k == 0 || k == 3 ? kAbsent : k) << k;
  EXPECT_EQ(map.find_or_insert(same[3], 30), kAbsent);
  EXPECT_EQ(map.find(same[3]), 30u);
}

TEST(IdMapTest, GrowsKeepingEveryKeyAtMostHalfFull) {
  IdMap<TableId> map;
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> reference;
  uint64_t x = 1;
  for (uint32_t v = 0; v < 20000; ++v) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const TableId key{x >> 20, static_cast<uint32_t>(x % 5)};
    const auto [it, added] = reference.emplace(std::make_pair(key.id, key.table), v);
    ASSERT_EQ(map.find_or_insert(key, v), added ? kAbsent : it->second);
  }
  EXPECT_EQ(map.size(), reference.size());
  EXPECT_EQ(map.bytes(), 65536u * 24);  // 24-byte slots, the power of two at most half full
  for (const auto& [key, value] : reference) ASSERT_EQ(map.find(TableId{key.first, key.second}), value);
  size_t visited = 0;
  map.for_each([&](const TableId& key, uint32_t value) {
    ++visited;
    EXPECT_EQ(reference.at({key.id, key.table}), value);
  });
  EXPECT_EQ(visited, reference.size());
}

TEST(IdMapTest, ClearForABatchForgetsTheLastOneAndKeepsItsMemory) {
  IdMap<TableId> map;
  for (uint32_t v = 0; v < 1000; ++v) map.find_or_insert(TableId{v, 0}, v);
  const size_t bytes = map.bytes();
  map.clear(10);  // a small batch next: 32 slots in use, the memory of 2048 kept
  EXPECT_EQ(map.size(), 0u);
  EXPECT_EQ(map.bytes(), bytes);
  for (uint32_t v = 0; v < 1000; ++v) ASSERT_EQ(map.find(TableId{v, 0}), kAbsent) << v;
  map.for_each([](const TableId&, uint32_t) { ADD_FAILURE() << "a cleared key is live"; });
  // This batch outgrows its 32 slots; the last batch's keys never come back.
  for (uint32_t v = 0; v < 100; ++v) ASSERT_EQ(map.find_or_insert(TableId{v, 1}, v + 5), kAbsent);
  for (uint32_t v = 0; v < 100; ++v) {
    ASSERT_EQ(map.find(TableId{v, 1}), v + 5);
    ASSERT_EQ(map.find(TableId{v, 0}), kAbsent);
  }
  map.clear(5000);  // a larger batch than any: more slots
  EXPECT_GT(map.bytes(), bytes);
  EXPECT_EQ(map.find(TableId{1, 1}), kAbsent);
  EXPECT_EQ(map.find_or_insert(TableId{1, 1}, 9), kAbsent);
  EXPECT_EQ(map.find(TableId{1, 1}), 9u);
}

}  // namespace
}  // namespace pstrain
