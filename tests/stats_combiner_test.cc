// ps0's side of batch norm's global statistics (ps/stats_combiner.h): the workers' sums of a call
// added in worker order whatever order they arrive in, each worker answered, and every refusal
// with its message. The whole path in real jobs: BatchNormMirroredTest.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "ps/stats_combiner.h"

namespace pstrain {
namespace {

TEST(StatsCombinerTest, AddsTheWorkersSumsInWorkerOrderWhateverTheArrival) {
  // Values whose sum depends on the order in double: 1e16 + 1 - 1e16 is 0, 1e16 - 1e16 + 1 is 1.
  const std::vector<std::vector<double>> sums = {{3, 1e16}, {1, 1}, {2, -1e16}};
  std::vector<double> expected(2, 0.0);
  for (const auto& s : sums) expected[0] += s[0], expected[1] += s[1];
  for (const std::vector<int>& order : {std::vector<int>{0, 1, 2}, {2, 1, 0}, {1, 2, 0}}) {
    StatsCombiner combiner(3);
    std::optional<StatsCombiner::Complete> complete;
    for (size_t i = 0; i < order.size(); ++i) {
      const int w = order[i];
      ASSERT_EQ(combiner.add(w, "route" + std::to_string(w), 100 + w, 7, 2, sums[w], &complete), "");
      EXPECT_EQ(complete.has_value(), i + 1 == order.size());
    }
    ASSERT_TRUE(complete);
    EXPECT_EQ(complete->sums, expected);  // {6, 0}: 1e16 + 1 - 1e16 in worker order
    ASSERT_EQ(complete->askers.size(), 3u);
    for (int w = 0; w < 3; ++w) {
      EXPECT_EQ(complete->askers[w].first, "route" + std::to_string(w));
      EXPECT_EQ(complete->askers[w].second, 100u + w);
    }
    EXPECT_FALSE(combiner.open());
  }
}

TEST(StatsCombinerTest, RefusalsNameWhatIsWrong) {
  StatsCombiner combiner(2);
  std::optional<StatsCombiner::Complete> complete;
  EXPECT_EQ(combiner.add(2, "r", 1, 0, 0, {1.0}, &complete), "STATS from worker 2 of 2");
  EXPECT_EQ(combiner.add(0, "r", 1, 0, 0, {}, &complete), "STATS of 0 values (1 to 4194304)");
  ASSERT_EQ(combiner.add(0, "r0", 1, 5, 3, {1.0, 2.0}, &complete), "");
  EXPECT_EQ(combiner.add(1, "r1", 2, 5, 4, {1.0, 2.0}, &complete), "STATS for step 5 call 4 while step 5 call 3 is open");
  EXPECT_EQ(combiner.add(1, "r1", 2, 6, 3, {1.0, 2.0}, &complete), "STATS for step 6 call 3 while step 5 call 3 is open");
  EXPECT_EQ(combiner.add(0, "r0", 3, 5, 3, {1.0, 2.0}, &complete), "STATS: worker 0 sent this call's sums twice");
  EXPECT_EQ(combiner.add(1, "r1", 2, 5, 3, {1.0}, &complete), "STATS of 1 values, other workers sent 2");
  EXPECT_FALSE(complete);
  ASSERT_EQ(combiner.add(1, "r1", 2, 5, 3, {0.5, 0.25}, &complete), "");
  ASSERT_TRUE(complete);
  EXPECT_EQ(complete->sums, (std::vector<double>{1.5, 2.25}));
  // The next call opens afresh.
  EXPECT_EQ(combiner.add(1, "r1", 4, 5, 4, {1.0}, &complete), "");
  EXPECT_TRUE(combiner.open());
}

}  // namespace
}  // namespace pstrain
