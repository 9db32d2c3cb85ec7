// The sparse optimizers (ps/sparse/sparse_optimizer.h) against plain per-element definitions.
#include "ps/sparse/sparse_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "shared/train/optimizer.h"
#include "shared/util/error.h"

namespace pstrain {
namespace {

constexpr size_t kDim = 3;
const std::vector<std::vector<float>> kGrads = {{0.5f, -1.0f, 2.0f}, {0.25f, 0.0f, -3.0f}, {-1.5f, 0.75f, 0.1f},
                                                {2.0f, 2.0f, -0.5f}, {0.3f, -0.2f, 1.0f}};
constexpr float kScale = 0.5f;
constexpr double kLr = 0.05;

SparseOptimizerOptions opts(const std::string& kind) {
  SparseOptimizerOptions o;
  o.kind = kind;
  return o;
}

// Runs the sparse optimizer over kGrads from w0; returns the weights.
std::vector<float> run(const SparseOptimizerOptions& o, std::vector<float> w) {
  auto opt = make_sparse_optimizer(o);
  std::vector<float> slots(opt->slots() * kDim);
  opt->init_slots(kDim, slots.data());
  for (size_t t = 0; t < kGrads.size(); ++t) opt->apply(kDim, w.data(), slots.data(), kGrads[t].data(), kScale, kLr, t);
  return w;
}

const std::vector<float> kW0 = {0.1f, -0.2f, 0.3f};

TEST(SparseOptimizerTest, SgdIsTheDenseSgdBitForBit) {
  OptimizerOptions dense;
  dense.kind = "sgd";
  dense.weight_decay = 0;
  auto ref = make_optimizer(dense, kDim);
  std::vector<float> w = kW0;
  for (size_t t = 0; t < kGrads.size(); ++t) ref->apply(0, kDim, w.data(), kGrads[t].data(), kScale, kLr, t);
  EXPECT_EQ(run(opts("sgd"), kW0), w);
}

TEST(SparseOptimizerTest, LazyAdamOnARowTouchedEveryStepIsTheDenseAdamBitForBit) {
  OptimizerOptions dense;
  dense.kind = "adam";
  dense.weight_decay = 0;
  auto ref = make_optimizer(dense, kDim);
  std::vector<float> w = kW0;
  for (size_t t = 0; t < kGrads.size(); ++t) ref->apply(0, kDim, w.data(), kGrads[t].data(), kScale, kLr, t);
  EXPECT_EQ(run(opts("adam"), kW0), w);
}

TEST(SparseOptimizerTest, AdagradMatchesItsDefinition) {
  SparseOptimizerOptions o = opts("adagrad");
  o.initial_accumulator = 0.1;
  o.epsilon = 1e-7;
  std::vector<double> w(kW0.begin(), kW0.end()), a(kDim, 0.1);
  for (const auto& grad : kGrads) {
    for (size_t i = 0; i < kDim; ++i) {
      const double g = kScale * static_cast<double>(grad[i]);
      a[i] += g * g;
      w[i] -= kLr * g / (std::sqrt(a[i]) + 1e-7);
    }
  }
  const std::vector<float> got = run(o, kW0);
  for (size_t i = 0; i < kDim; ++i) EXPECT_NEAR(got[i], w[i], 1e-6) << i;
}

// McMahan et al. 2013, Algorithm 1, per coordinate, in double.
std::vector<double> ftrl_reference(const SparseOptimizerOptions& o) {
  std::vector<double> w(kW0.begin(), kW0.end()), z(kDim, 0.0), n(kDim, o.initial_accumulator);
  for (const auto& grad : kGrads) {
    for (size_t i = 0; i < kDim; ++i) {
      const double g = kScale * static_cast<double>(grad[i]);
      const double sigma = (std::sqrt(n[i] + g * g) - std::sqrt(n[i])) / kLr;
      z[i] += g - sigma * w[i];
      n[i] += g * g;
      const double sign = z[i] < 0 ? -1.0 : 1.0;
      w[i] = std::fabs(z[i]) <= o.l1 ? 0.0 : -(z[i] - sign * o.l1) / ((o.ftrl_beta + std::sqrt(n[i])) / kLr + o.l2);
    }
  }
  return w;
}

TEST(SparseOptimizerTest, FtrlMatchesMcMahansAlgorithm) {
  SparseOptimizerOptions o = opts("ftrl");
  o.ftrl_beta = 1.0;
  o.l1 = 0.01;
  o.l2 = 0.5;
  const std::vector<double> want = ftrl_reference(o);
  const std::vector<float> got = run(o, kW0);
  for (size_t i = 0; i < kDim; ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

TEST(SparseOptimizerTest, FtrlL1GivesExactZeros) {
  SparseOptimizerOptions o = opts("ftrl");
  o.l1 = 100.0;  // above every |z| these gradients reach
  for (float w : run(o, kW0)) EXPECT_EQ(w, 0.0f);
  EXPECT_EQ(std::signbit(run(o, kW0)[0]), false);
}

TEST(SparseOptimizerTest, BadOptionsAreErrors) {
  EXPECT_THROW(make_sparse_optimizer(opts("adadelta")), Error);
  SparseOptimizerOptions o = opts("adagrad");
  o.epsilon = 0;
  o.initial_accumulator = 0;
  EXPECT_THROW(make_sparse_optimizer(o), Error);
  o = opts("ftrl");
  o.l1 = -1;
  EXPECT_THROW(make_sparse_optimizer(o), Error);
  o = opts("adam");
  o.beta2 = 1.0;
  EXPECT_THROW(make_sparse_optimizer(o), Error);
}

TEST(SparseOptimizerTest, SlotsPerKind) {
  EXPECT_EQ(make_sparse_optimizer(opts("sgd"))->slots(), 0u);
  EXPECT_EQ(make_sparse_optimizer(opts("adagrad"))->slots(), 1u);
  EXPECT_EQ(make_sparse_optimizer(opts("adam"))->slots(), 2u);
  EXPECT_EQ(make_sparse_optimizer(opts("ftrl"))->slots(), 2u);
}

}  // namespace
}  // namespace pstrain
