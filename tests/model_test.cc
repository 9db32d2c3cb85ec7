#include "worker/model/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
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

// The worst error of train_step's input gradient (dL/dx of the summed loss) against central
// finite differences of the summed loss in each input, relative to max(1, |numeric|).
double input_gradient_error(const std::string& spec, const std::vector<size_t>& sample, bool recompute) {
  auto backend = make_cpu_backend(1);
  const int batch = 4, classes = 3;
  Model model(spec, sample, classes, batch, recompute, *backend);
  const size_t n = model.layout().total(), in = model.network().input().size();
  std::vector<float> params(n), grad(n), x(batch * in), dx(batch * in, std::nanf(""));
  model.init(5, params.data());
  for (size_t i = 0; i < n; ++i) params[i] += 0.05f * std::sin(static_cast<float>(i));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.9f * static_cast<float>(i) + 0.3f);
  const std::vector<int32_t> y = {2, 0, 1, 2};
  model.train_step(params.data(), x.data(), y.data(), batch, grad.data(), nullptr, false, {}, dx.data());

  const double h = 1e-3;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + static_cast<float>(h);
    const double up = model.evaluate(params.data(), x.data(), y.data(), batch).loss_sum;
    x[i] = saved - static_cast<float>(h);
    const double down = model.evaluate(params.data(), x.data(), y.data(), batch).loss_sum;
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double error = std::fabs(numeric - dx[i]) / std::max(1.0, std::fabs(numeric));
    if (!(error <= worst)) worst = error;  // a NaN (dx not written) too
  }
  return worst;
}

TEST(ModelInputGradientTest, MatchesFiniteDifferences) {
  EXPECT_LT(input_gradient_error("dense 7, relu, dense 3", {6}, false), 2e-3);
  EXPECT_LT(input_gradient_error("dense 6, tanh, dense 5, relu, dense 3", {6}, false), 2e-3);
}

// The first layer that computes writes dx: an element-wise one, one after a flatten, a
// convolution (col2im), and with --recompute.
TEST(ModelInputGradientTest, MatchesFiniteDifferencesWhateverTheFirstLayer) {
  EXPECT_LT(input_gradient_error("tanh, dense 5, dense 3", {6}, false), 2e-3);
  EXPECT_LT(input_gradient_error("flatten, dense 5, tanh, dense 3", {6}, false), 2e-3);
  EXPECT_LT(input_gradient_error("conv 2 3 pad=1, tanh, flatten, dense 3", {1, 4, 4}, false), 2e-3);
  EXPECT_LT(input_gradient_error("dense 6, tanh, dense 5, relu, dense 3", {6}, true), 2e-3);
}

// Asking for dL/dx changes no other result: the same parameter gradients and loss, bit for bit,
// with and without accumulation, and the same dL/dx with --recompute.
TEST(ModelInputGradientTest, ChangesNothingElse) {
  auto backend = make_cpu_backend(1);
  const int batch = 5, in = 6;
  const std::string spec = "dense 7, tanh, dense 5, relu, dense 4";
  Model plain(spec, {in}, 4, batch, false, *backend), recompute(spec, {in}, 4, batch, true, *backend);
  const size_t n = plain.layout().total();
  std::vector<float> params(n), x(batch * in);
  plain.init(8, params.data());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(1.3f * static_cast<float>(i));
  const std::vector<int32_t> y = {0, 3, 1, 2, 3};
  for (bool accumulate : {false, true}) {
    std::vector<float> without(n, 0.5f), with(n, 0.5f), again(n, 0.5f), dx(batch * in, 7.0f), dx2(batch * in, 7.0f);
    const BatchStats a = plain.train_step(params.data(), x.data(), y.data(), batch, without.data(), nullptr, accumulate);
    const BatchStats b =
        plain.train_step(params.data(), x.data(), y.data(), batch, with.data(), nullptr, accumulate, {}, dx.data());
    recompute.train_step(params.data(), x.data(), y.data(), batch, again.data(), nullptr, accumulate, {}, dx2.data());
    EXPECT_EQ(a.loss_sum, b.loss_sum);
    EXPECT_EQ(without, with);
    EXPECT_EQ(with, again);
    EXPECT_EQ(dx, dx2);
  }
}

}  // namespace
}  // namespace pstrain
