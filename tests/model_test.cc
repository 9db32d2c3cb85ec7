#include "worker/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace pstrain {
namespace {

// The backward pass against central finite differences of the summed loss.
TEST(MlpTest, GradientMatchesFiniteDifferences) {
  auto backend = make_cpu_backend(1);
  const int batch = 5, in = 6, classes = 4;
  Model model(in, {7, 5}, classes, batch, *backend);
  const size_t n = model.layout().total();
  std::vector<float> params(n), grad(n), x(batch * in);
  model.init(3, params.data());
  for (size_t i = 0; i < n; ++i) params[i] += 0.05f * std::sin(static_cast<float>(i));  // non-zero biases
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.7f * static_cast<float>(i));
  const std::vector<int32_t> y = {0, 3, 1, 2, 3};
  model.train_step(params.data(), x.data(), y.data(), batch, grad.data());

  const double h = 1e-3;
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const float saved = params[i];
    params[i] = saved + static_cast<float>(h);
    const double up = model.evaluate(params.data(), x.data(), y.data(), batch).loss_sum;
    params[i] = saved - static_cast<float>(h);
    const double down = model.evaluate(params.data(), x.data(), y.data(), batch).loss_sum;
    params[i] = saved;
    const double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::fabs(numeric - grad[i]) / std::max(1.0, std::fabs(numeric)));
  }
  EXPECT_LT(worst, 2e-3);
}

TEST(MlpTest, InitDependsOnlyOnSeed) {
  auto backend = make_cpu_backend(1);
  Model a(8, {4}, 3, 2, *backend), b(8, {4}, 3, 16, *backend);
  std::vector<float> pa(a.layout().total()), pb(b.layout().total()), pc(a.layout().total());
  a.init(9, pa.data());
  b.init(9, pb.data());
  a.init(10, pc.data());
  EXPECT_EQ(pa, pb);
  EXPECT_NE(pa, pc);
  EXPECT_EQ(a.layout().at("layer1.bias").shape, (std::vector<size_t>{3}));
}

TEST(MlpTest, SoftmaxLossAndAccuracy) {
  auto backend = make_cpu_backend(1);
  const std::vector<float> logits = {2.0f, 0.0f, 0.0f, 0.0f, 1.0f, 3.0f};
  const std::vector<int32_t> labels = {0, 1};
  std::vector<float> d(6);
  const BatchStats s = backend->softmax_xent(logits.data(), labels.data(), 2, 3, d.data(), 0.0f);
  const double l0 = std::log(std::exp(2.0) + 2.0) - 2.0;
  const double l1 = std::log(1.0 + std::exp(1.0) + std::exp(3.0)) - 1.0;
  EXPECT_NEAR(s.loss_sum, l0 + l1, 1e-6);
  EXPECT_EQ(s.correct, 1);
  EXPECT_NEAR(d[0], std::exp(2.0) / (std::exp(2.0) + 2.0) - 1.0, 1e-6);
  float row_sum = d[3] + d[4] + d[5];
  EXPECT_NEAR(row_sum, 0.0, 1e-6);
}

// Label smoothing e: the loss is -sum_c q_c log softmax_c with q = (1 - e) onehot + e / C, and the
// gradient softmax - q, checked against its definition and central differences of the loss.
TEST(MlpTest, SmoothedSoftmaxLossAndItsGradient) {
  auto backend = make_cpu_backend(1);
  std::vector<float> logits = {2.0f, -0.5f, 0.25f, 1.0f, 0.0f, 1.0f, 3.0f, -2.0f};
  const std::vector<int32_t> labels = {0, 3};
  const int rows = 2, cols = 4;
  const float e = 0.1f;
  std::vector<float> d(logits.size());
  const BatchStats s = backend->softmax_xent(logits.data(), labels.data(), rows, cols, d.data(), e);
  double want = 0;
  for (int r = 0; r < rows; ++r) {
    double denom = 0;
    for (int c = 0; c < cols; ++c) denom += std::exp(double{logits[r * cols + c]});
    for (int c = 0; c < cols; ++c) {
      const double p = std::exp(double{logits[r * cols + c]}) / denom;
      const double q = (c == labels[r] ? 1.0 - e : 0.0) + e / cols;
      want -= q * std::log(p);
      EXPECT_NEAR(d[r * cols + c], p - q, 1e-6) << r << " " << c;
    }
  }
  EXPECT_NEAR(s.loss_sum, want, 1e-6);
  EXPECT_EQ(s.correct, 1);  // row 1's arg-max is class 2, not its label 3
  const double h = 1e-3;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float saved = logits[i];
    logits[i] = saved + static_cast<float>(h);
    const double up = backend->softmax_xent(logits.data(), labels.data(), rows, cols, nullptr, e).loss_sum;
    logits[i] = saved - static_cast<float>(h);
    const double down = backend->softmax_xent(logits.data(), labels.data(), rows, cols, nullptr, e).loss_sum;
    logits[i] = saved;
    EXPECT_NEAR((up - down) / (2 * h), d[i], 2e-4) << i;
  }
  // e = 0 is the plain loss, exactly.
  std::vector<float> d0(logits.size()), d1(logits.size());
  EXPECT_EQ(backend->softmax_xent(logits.data(), labels.data(), rows, cols, d0.data(), 0.0f).loss_sum,
            backend->softmax_xent(logits.data(), labels.data(), rows, cols, d1.data(), 0.0f).loss_sum);
}

}  // namespace
}  // namespace pstrain
