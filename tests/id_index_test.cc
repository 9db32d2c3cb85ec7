// shared/util/id_map.h's IdIndex, the embedding tables' ID -> row map: against std::unordered_map over long
// random runs of inserts, finds and erases (runs that wrap around the slots' end, erases in the
// middle of a run), clear and reserve, and its byte counts.
#include "shared/util/id_map.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

namespace pstrain {
namespace {

void expect_same(const IdIndex& index, const std::unordered_map<uint64_t, uint32_t>& reference) {
  ASSERT_EQ(index.size(), reference.size());
  for (const auto& [id, value] : reference) ASSERT_EQ(index.find(id), value) << id;
  size_t visited = 0;
  index.for_each([&](uint64_t id, uint32_t value) {
    ++visited;
    const auto it = reference.find(id);
    ASSERT_NE(it, reference.end()) << id;
    EXPECT_EQ(it->second, value);
  });
  EXPECT_EQ(visited, reference.size());
}

TEST(IdIndexTest, AnEmptyIndexHoldsNothing) {
  IdIndex index;
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.find(0), IdIndex::kAbsent);
  EXPECT_EQ(index.find(UINT64_MAX), IdIndex::kAbsent);
  index.erase(5);  // nothing to erase
  index.clear();
  EXPECT_EQ(index.bytes(), 0u);
}

TEST(IdIndexTest, FindOrInsertKeepsTheFirstValue) {
  IdIndex index;
  EXPECT_EQ(index.find_or_insert(0, 7), IdIndex::kAbsent);
  EXPECT_EQ(index.find_or_insert(UINT64_MAX, 8), IdIndex::kAbsent);
  EXPECT_EQ(index.find_or_insert(0, 9), 7u);
  EXPECT_EQ(index.find(0), 7u);
  EXPECT_EQ(index.find(UINT64_MAX), 8u);
  EXPECT_EQ(index.size(), 2u);
}

// Random operations on a small key space (many collisions, long runs, erases that shift) and on
// the full 64-bit range, checked against std::unordered_map after every 1000.
TEST(IdIndexTest, MatchesAnUnorderedMapOverRandomInsertsAndErases) {
  for (const uint64_t space : {uint64_t{64}, uint64_t{5000}, UINT64_MAX}) {
    std::mt19937_64 random(space);
    IdIndex index;
    std::unordered_map<uint64_t, uint32_t> reference;
    for (int op = 1; op <= 200000; ++op) {
      const uint64_t id = space == UINT64_MAX ? random() : random() % space;
      const uint32_t value = static_cast<uint32_t>(random() % 1000000);
      if (random() % 3 == 0) {
        index.erase(id);
        reference.erase(id);
      } else {
        const auto [it, added] = reference.emplace(id, value);
        EXPECT_EQ(index.find_or_insert(id, value), added ? IdIndex::kAbsent : it->second);
      }
      if (op % 1000 == 0) {
        ASSERT_NO_FATAL_FAILURE(expect_same(index, reference)) << "space " << space << " op " << op;
      }
    }
    EXPECT_GT(reference.size(), 0u);
  }
}

TEST(IdIndexTest, ErasingEveryIdOneByOneLeavesItEmpty) {
  IdIndex index;
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 3000; ++i) ids.push_back(i * 0x9E3779B97F4A7C15ULL);
  for (size_t i = 0; i < ids.size(); ++i) index.find_or_insert(ids[i], static_cast<uint32_t>(i));
  std::mt19937 random(3);
  std::shuffle(ids.begin(), ids.end(), random);
  for (size_t i = 0; i < ids.size(); ++i) {
    index.erase(ids[i]);
    ASSERT_EQ(index.find(ids[i]), IdIndex::kAbsent);
    if (i + 1 < ids.size()) {
      ASSERT_NE(index.find(ids[i + 1]), IdIndex::kAbsent) << i;
    }
  }
  EXPECT_EQ(index.size(), 0u);
}

TEST(IdIndexTest, ClearKeepsTheSlotsAndForgetsTheIds) {
  IdIndex index;
  index.reserve(1000);
  const size_t bytes = index.bytes();
  EXPECT_EQ(bytes, 2048u * 16);  // the power of two at most half full
  for (uint64_t id = 0; id < 1000; ++id) index.find_or_insert(id, 1);
  EXPECT_EQ(index.bytes(), bytes);  // reserved: no growth
  index.clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.find(5), IdIndex::kAbsent);
  EXPECT_EQ(index.bytes(), bytes);
}

TEST(IdIndexTest, BytesWithForeseesTheGrowth) {
  IdIndex index;
  for (uint64_t id = 0; id < 100; ++id) {
    const size_t foreseen = index.bytes_with(1);
    index.find_or_insert(id, 0);
    ASSERT_EQ(index.bytes(), foreseen) << id;
  }
  EXPECT_EQ(index.bytes(), 256u * 16);
  EXPECT_EQ(index.bytes_with(28), 256u * 16);
  EXPECT_EQ(index.bytes_with(29), 512u * 16);
}

}  // namespace
}  // namespace pstrain
