// The sparse optimizers (ps/sparse/sparse_optimizer.h) against plain per-element definitions.
#include "ps/sparse/sparse_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
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
  if (!table_optimizer_of(kind, &o.kind)) ADD_FAILURE() << "no table optimizer " << kind;
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
  dense.kind = OptimizerKind::kSgd;
  dense.weight_decay = 0;
  auto ref = make_optimizer(dense, kDim);
  std::vector<float> w = kW0;
  for (size_t t = 0; t < kGrads.size(); ++t) ref->apply(0, kDim, w.data(), kGrads[t].data(), kScale, kLr, t);
  EXPECT_EQ(run(opts("sgd"), kW0), w);
}

TEST(SparseOptimizerTest, LazyAdamOnARowTouchedEveryStepIsTheDenseAdamBitForBit) {
  OptimizerOptions dense;
  dense.kind = OptimizerKind::kAdam;
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

// The optimizer's loop is written branch-free so that it vectorises: the same bits as the
// per-element float expression with its branches, for every width (vector body and remainder),
// with and without l1, over zero, tiny and large gradients and weights driven to exactly 0.
TEST(SparseOptimizerTest, FtrlIsThePerElementFloatExpressionBitForBit) {
  for (const double l1 : {0.0, 0.01, 0.3}) {
    SparseOptimizerOptions o = opts("ftrl");
    o.l1 = l1;
    o.l2 = 0.1;
    const auto opt = make_sparse_optimizer(o);
    for (size_t dim = 1; dim <= 19; ++dim) {
      std::vector<float> w(dim), slots(2 * dim), w_ref(dim), z_ref(dim, 0.0f), n_ref(dim);
      opt->init_slots(dim, slots.data());
      for (size_t i = 0; i < dim; ++i) n_ref[i] = slots[dim + i];
      uint32_t state = static_cast<uint32_t>(dim * 7919 + static_cast<size_t>(l1 * 1000));
      for (int t = 0; t < 12; ++t) {
        std::vector<float> g(dim);
        for (float& x : g) {
          state = state * 1664525u + 1013904223u;
          const int kind = static_cast<int>(state >> 29);
          x = kind == 0 ? 0.0f : kind == 1 ? 1e-30f : (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 4.0f;
        }
        opt->apply(dim, w.data(), slots.data(), g.data(), kScale, kLr, static_cast<uint64_t>(t));
        const float inv_alpha = static_cast<float>(1.0 / kLr), beta = static_cast<float>(o.ftrl_beta);
        const float fl1 = static_cast<float>(o.l1), fl2 = static_cast<float>(o.l2);
        for (size_t i = 0; i < dim; ++i) {
          const float gi = kScale * g[i];
          const float n_new = n_ref[i] + gi * gi;
          const float root = std::sqrt(n_new);
          z_ref[i] += gi - (root - std::sqrt(n_ref[i])) * inv_alpha * w_ref[i];
          n_ref[i] = n_new;
          const float shrunk = z_ref[i] > 0 ? z_ref[i] - fl1 : z_ref[i] + fl1;
          w_ref[i] = std::fabs(z_ref[i]) <= fl1 ? 0.0f : -shrunk / ((beta + root) * inv_alpha + fl2);
        }
        for (size_t i = 0; i < dim; ++i) {
          ASSERT_EQ(std::memcmp(&w[i], &w_ref[i], 4), 0) << "l1 " << l1 << " dim " << dim << " step " << t << " i " << i
                                                         << ": " << w[i] << " vs " << w_ref[i];
          ASSERT_EQ(std::memcmp(&slots[i], &z_ref[i], 4), 0) << "z, dim " << dim << " i " << i;
          ASSERT_EQ(std::memcmp(&slots[dim + i], &n_ref[i], 4), 0) << "n, dim " << dim << " i " << i;
        }
      }
    }
  }
}

TEST(SparseOptimizerTest, BadOptionsAreErrors) {
  TableOptimizer unknown;
  EXPECT_FALSE(table_optimizer_of("adadelta", &unknown));
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
