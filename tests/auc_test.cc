#include "worker/report/auc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "shared/util/error.h"

namespace pstrain {
namespace {

// Every (positive, negative) pair: 1 when ranked right, 1/2 for a tie.
double pair_count_auc(const std::vector<float>& s, const std::vector<int32_t>& y) {
  double right = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[i] != 1 || y[j] != 0) continue;
      pairs += 1;
      right += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
    }
  }
  return right / pairs;
}

TEST(AucTest, MatchesThePairCountOnRandomDataWithTies) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const size_t n = 1 + rng() % 300;
    const int levels = 1 + static_cast<int>(rng() % 20);  // few distinct scores: many ties
    std::vector<float> s(n);
    std::vector<int32_t> y(n);
    for (size_t i = 0; i < n; ++i) {
      y[i] = static_cast<int32_t>(rng() % 3 == 0);
      s[i] = static_cast<float>(static_cast<int>(rng() % levels) + y[i] * static_cast<int>(rng() % 3)) / 7.0f;
    }
    y[0] = 1;
    if (n > 1) y[1] = 0;
    const double got = exact_auc(s.data(), y.data(), n);
    if (n == 1) {
      EXPECT_TRUE(std::isnan(got));
    } else {
      EXPECT_NEAR(got, pair_count_auc(s, y), 1e-12) << "trial " << trial;
    }
  }
}

TEST(AucTest, PerfectInvertedAndAllTied) {
  const std::vector<float> s = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  const std::vector<int32_t> up = {0, 0, 0, 1, 1, 1}, down = {1, 1, 1, 0, 0, 0};
  EXPECT_EQ(exact_auc(s.data(), up.data(), s.size()), 1.0);
  EXPECT_EQ(exact_auc(s.data(), down.data(), s.size()), 0.0);
  const std::vector<float> same(6, 0.25f);
  EXPECT_EQ(exact_auc(same.data(), up.data(), same.size()), 0.5);
}

TEST(AucTest, UndefinedWhenAllLabelsAreEqualOrAScoreIsNaN) {
  const std::vector<float> s = {0.1f, 0.7f, 0.3f};
  const std::vector<int32_t> ones = {1, 1, 1}, zeros = {0, 0, 0}, mixed = {0, 1, 0};
  EXPECT_TRUE(std::isnan(exact_auc(s.data(), ones.data(), 3)));
  EXPECT_TRUE(std::isnan(exact_auc(s.data(), zeros.data(), 3)));
  EXPECT_TRUE(std::isnan(exact_auc(s.data(), mixed.data(), 0)));
  const std::vector<float> with_nan = {0.1f, std::nanf(""), 0.3f};
  EXPECT_TRUE(std::isnan(exact_auc(with_nan.data(), mixed.data(), 3)));
}

TEST(AucTest, RefusesLabelsOtherThanZeroAndOne) {
  const std::vector<float> s = {0.1f, 0.7f, 0.3f};
  const std::vector<int32_t> bad = {0, 2, 1};
  try {
    exact_auc(s.data(), bad.data(), 3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "AUC: record 1 has label 2, not 0 or 1");
  }
  EXPECT_THROW(binary_logloss(s.data(), bad.data(), 3), Error);
}

TEST(LogLossTest, IsTheMeanCrossEntropyWithClamping) {
  const std::vector<float> p = {0.9f, 0.2f, 0.0f, 1.0f, 0.5f};
  const std::vector<int32_t> y = {1, 0, 1, 0, 1};
  const double eps = 1e-7;
  const double want = -(std::log(static_cast<double>(0.9f)) + std::log(1.0 - static_cast<double>(0.2f)) +
                        std::log(eps) + std::log(eps) + std::log(0.5)) /
                      5.0;
  EXPECT_NEAR(binary_logloss(p.data(), y.data(), p.size()), want, 1e-9);
  const std::vector<float> right = {1.0f, 0.0f};
  const std::vector<int32_t> right_labels = {1, 0};
  EXPECT_NEAR(binary_logloss(right.data(), right_labels.data(), 2), -std::log1p(-eps), 1e-15);
  EXPECT_TRUE(std::isnan(binary_logloss(p.data(), y.data(), 0)));
}

}  // namespace
}  // namespace pstrain
