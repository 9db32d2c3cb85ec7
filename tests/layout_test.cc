#include "shared/train/layout.h"

#include <gtest/gtest.h>

#include "shared/util/error.h"

namespace pstrain {
namespace {

TEST(LayoutTest, AssignsConsecutiveOffsets) {
  Layout layout;
  layout.add("w", {3, 4});
  layout.add("b", {4});
  EXPECT_EQ(layout.at("w").offset, 0u);
  EXPECT_EQ(layout.at("w").size, 12u);
  EXPECT_EQ(layout.at("b").offset, 12u);
  EXPECT_EQ(layout.total(), 16u);
  EXPECT_THROW(layout.add("w", {1}), Error);
  EXPECT_THROW(layout.at("missing"), Error);
}

TEST(BalanceSlicesTest, ContiguousCoveringAndBalanced) {
  for (size_t total : {0ul, 1ul, 7ul, 235146ul}) {
    for (int shards : {1, 2, 3, 4, 7}) {
      const auto slices = balance_slices(total, shards);
      ASSERT_EQ(slices.size(), static_cast<size_t>(shards));
      size_t next = 0, lo = total, hi = 0;
      for (const Slice& s : slices) {
        EXPECT_EQ(s.offset, next);
        next = s.end();
        lo = std::min(lo, s.length);
        hi = std::max(hi, s.length);
      }
      EXPECT_EQ(next, total);
      EXPECT_LE(hi - lo, 1u) << "total " << total << " shards " << shards;
    }
  }
}

}  // namespace
}  // namespace pstrain
