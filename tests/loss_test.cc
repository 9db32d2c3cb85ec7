// The losses of float targets (--loss bce | mse | huber: worker/loss_math.h, Backend::target_loss)
// on the CPU backend: each against its plain definition (value and gradient), PyTorch's reduction
// ('mean' over the K outputs of a sample, summed over the batch), Huber on both sides of delta,
// bce finite for large |logits|, and a small model's backward pass against finite differences.
// The CUDA backend is checked against these in cuda_backend_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "shared/util/error.h"
#include "test_util/random.h"
#include "worker/backend.h"
#include "worker/model.h"

namespace pstrain {
namespace {

using test::random_floats;

// The plain definitions, in double (PyTorch: MSELoss, HuberLoss(delta), BCEWithLogitsLoss).
double plain_loss(Loss loss, double z, double t, double delta) {
  const double d = z - t;
  if (loss == Loss::kMse) return d * d;
  if (loss == Loss::kHuber) return std::fabs(d) < delta ? 0.5 * d * d : delta * (std::fabs(d) - 0.5 * delta);
  return -(t * std::log(1 / (1 + std::exp(-z))) + (1 - t) * std::log(1 - 1 / (1 + std::exp(-z))));
}
double plain_grad(Loss loss, double z, double t, double delta) {
  const double d = z - t;
  if (loss == Loss::kMse) return 2 * d;
  if (loss == Loss::kHuber) return std::max(-delta, std::min(delta, d));
  return 1 / (1 + std::exp(-z)) - t;
}

struct Result {
  double loss_sum;
  std::vector<float> grad;
};

Result run(Loss loss, const std::vector<float>& z, const std::vector<float>& t, int rows, int cols, float delta = 1) {
  auto backend = make_cpu_backend(1);
  Result r{0, std::vector<float>(z.size(), -7.0f)};
  r.loss_sum = backend->target_loss(loss, z.data(), t.data(), rows, cols, delta, r.grad.data()).loss_sum;
  EXPECT_EQ(backend->target_loss(loss, z.data(), t.data(), rows, cols, delta, nullptr).loss_sum, r.loss_sum);
  return r;
}

void expect_plain(Loss loss, float delta, const std::vector<float>& z, const std::vector<float>& t, int rows, int cols) {
  const Result r = run(loss, z, t, rows, cols, delta);
  double sum = 0;  // PyTorch's reduction='mean' over all rows x cols, times rows
  for (size_t i = 0; i < z.size(); ++i) {
    sum += plain_loss(loss, z[i], t[i], delta);
    EXPECT_NEAR(r.grad[i], plain_grad(loss, z[i], t[i], delta) / cols, 1e-6) << loss_name(loss) << " element " << i;
  }
  EXPECT_NEAR(r.loss_sum, sum / (static_cast<double>(rows) * cols) * rows, 1e-9 * std::max(1.0, sum))
      << loss_name(loss);
}

TEST(TargetLossTest, EachLossIsItsPlainDefinitionMeanOverOutputsSummedOverSamples) {
  const int rows = 5, cols = 3;
  const auto z = random_floats(rows * cols, 1, -3, 3);
  const auto t = random_floats(rows * cols, 2, -2, 2);
  expect_plain(Loss::kMse, 1, z, t, rows, cols);
  expect_plain(Loss::kHuber, 1, z, t, rows, cols);
  expect_plain(Loss::kHuber, 0.25f, z, t, rows, cols);
  std::vector<float> labels(t.size());
  for (size_t i = 0; i < t.size(); ++i) labels[i] = t[i] > 0 ? 1.0f : 0.0f;
  expect_plain(Loss::kBce, 1, z, labels, rows, cols);
}

TEST(TargetLossTest, HuberIsQuadraticInsideDeltaAndLinearOutside) {
  // One sample, K = 4: d = 0.5, -0.5 (inside delta 1), 3, -2 (outside).
  const std::vector<float> z = {1.5f, 0.5f, 4.0f, -1.0f}, t = {1, 1, 1, 1};
  const Result r = run(Loss::kHuber, z, t, 1, 4, 1.0f);
  EXPECT_DOUBLE_EQ(r.loss_sum, (0.125 + 0.125 + 2.5 + 1.5) / 4);
  EXPECT_EQ(r.grad, (std::vector<float>{0.125f, -0.125f, 0.25f, -0.25f}));
  // delta 2: d = 3 is outside (2 (3 - 1) = 4), d = -2 on the edge (0.5 * 4 = 2, either formula).
  const Result wide = run(Loss::kHuber, z, t, 1, 4, 2.0f);
  EXPECT_DOUBLE_EQ(wide.loss_sum, (0.125 + 0.125 + 4 + 2) / 4);
  EXPECT_EQ(wide.grad, (std::vector<float>{0.125f, -0.125f, 0.5f, -0.5f}));
}

TEST(TargetLossTest, BceStaysFiniteAndExactForLargeLogits) {
  const std::vector<float> z = {1000, 1000, -1000, -1000, 88, -88, 0, 0}, t = {1, 0, 1, 0, 0, 1, 1, 0};
  const Result r = run(Loss::kBce, z, t, 4, 2);
  // Per element: 0, 1000, 1000, 0, 88, 88, log 2, log 2 (to double rounding of exp(-88)).
  EXPECT_NEAR(r.loss_sum, (1000 + 1000 + 88 + 88 + 2 * std::log(2.0)) / 2, 1e-9);
  const std::vector<float> expected = {0, 0.5f, -0.5f, 0, 0.5f, -0.5f, -0.25f, 0.25f};
  for (size_t i = 0; i < z.size(); ++i) {
    EXPECT_TRUE(std::isfinite(r.grad[i]));
    EXPECT_NEAR(r.grad[i], expected[i], 1e-7) << i;
  }
}

TEST(TargetLossTest, GradientMayOverwriteTheOutputs) {
  auto backend = make_cpu_backend(1);
  std::vector<float> z = {0.5f, -1.0f, 2.0f}, t = {0, 1, 1};
  const Result r = run(Loss::kBce, z, t, 1, 3);
  backend->target_loss(Loss::kBce, z.data(), t.data(), 1, 3, 1, z.data());
  EXPECT_EQ(z, r.grad);
}

// A small model's backward pass for each loss against central finite differences of its summed loss.
void check_model_gradients(Loss loss, int outputs) {
  auto backend = make_cpu_backend(1);
  const int batch = 4;
  Model model(Network("dense 6, tanh, dense " + std::to_string(outputs), {5}, outputs, "the test's targets"), batch,
              false, *backend);
  model.set_loss(loss, 0.3f);  // Huber: errors on both sides of delta
  const size_t n = model.layout().total();
  std::vector<float> params(n), grad(n), scratch(n);
  model.init(3, params.data());
  for (size_t i = 0; i < n; ++i) params[i] += 0.05f * std::sin(static_cast<float>(i));
  const auto x = random_floats(static_cast<size_t>(batch) * 5, 9);
  std::vector<float> t = random_floats(static_cast<size_t>(batch * outputs), 4, -1, 1);
  if (loss == Loss::kBce) {
    for (float& v : t) v = v > 0 ? 1.0f : 0.0f;
  }
  const auto loss_at = [&] {
    return model.train_step_targets(params.data(), x.data(), t.data(), batch, scratch.data()).loss_sum;
  };
  model.train_step_targets(params.data(), x.data(), t.data(), batch, grad.data());
  const double h = 1e-3;
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const float saved = params[i];
    params[i] = saved + static_cast<float>(h);
    const double up = loss_at();
    params[i] = saved - static_cast<float>(h);
    const double down = loss_at();
    params[i] = saved;
    const double numeric = (up - down) / (2 * h);
    worst = std::max(worst, std::fabs(numeric - grad[i]) / std::max(1.0, std::fabs(numeric)));
  }
  EXPECT_LT(worst, 5e-3) << loss_name(loss);
}

TEST(TargetLossTest, ModelGradientsMatchFiniteDifferences) {
  check_model_gradients(Loss::kMse, 1);
  check_model_gradients(Loss::kMse, 3);
  check_model_gradients(Loss::kHuber, 3);
  check_model_gradients(Loss::kBce, 4);
}

TEST(TargetLossTest, TargetsOfTheWrongWidthNameTheLastLayerAndTheFile) {
  try {
    Network net("dense 8, relu, dense 3", {5}, 2, "y.npy (shape (100, 2))");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "--model: the last layer 'dense 3' gives 3 outputs per sample, but the targets of y.npy (shape "
                 "(100, 2)) are 2 wide (end the list with dense 2)");
  }
  EXPECT_NO_THROW(Network("dense 8, relu, dense 1", {5}, 1, "y.npy (shape (100,))"));  // one output: regression
}

}  // namespace
}  // namespace pstrain
