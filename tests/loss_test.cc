// The losses of float targets (--loss bce | mse | huber: worker/backend/loss_math.h, Backend::target_loss)
// on the CPU backend: each against its plain definition (value and gradient), PyTorch's reduction
// ('mean' over the K outputs of a sample, summed over the batch), Huber on both sides of delta,
// bce finite for large |logits|, and a small model's backward pass against finite differences.
// The CUDA backend is checked against these in cuda_backend_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "shared/checkpoint/job_fingerprint.h"
#include "shared/config/options.h"
#include "shared/config/part_options.h"
#include "shared/util/error.h"
#include "test_util/errors.h"
#include "test_util/idx_writer.h"
#include "test_util/random.h"
#include "worker/backend/backend.h"
#include "worker/data/npy_dataset.h"
#include "worker/data/npy_format.h"
#include "worker/data/records.h"
#include "worker/model/model.h"
#include "worker/report/target_metrics.h"

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
  try {
    Network net("dense 8, relu, dense 2, Softmax ", {5}, 2, "y.npy (shape (100, 2))");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--model: the list ends in softmax, the loss of class labels, but the model is trained "
                           "against the float targets of y.npy (shape (100, 2)) (--loss bce, mse or huber): drop the "
                           "softmax");
  }
}

// The test figures against their definitions on a small case worked by hand.
TEST(TargetMetricsTest, RegressionFiguresAreTheirDefinitions) {
  // 3 records x 2 outputs; errors d = (1, -1), (0, 2), (-2, 0).
  const std::vector<float> z = {2, 0, 3, 5, 1, 6}, t = {1, 1, 3, 3, 3, 6};
  TargetMetrics m(Loss::kMse, 1, 2);
  m.add(z.data(), t.data(), 1);
  m.add(z.data() + 2, t.data() + 2, 2);  // in two calls: sums, not per-call figures
  EXPECT_EQ(m.samples(), 3u);
  EXPECT_DOUBLE_EQ(m.loss_sum(), (1 + 1) / 2.0 + (0 + 4) / 2.0 + (4 + 0) / 2.0);
  EXPECT_DOUBLE_EQ(m.rmse(), std::sqrt(10.0 / 6));
  EXPECT_DOUBLE_EQ(m.mae(), 6.0 / 6);
  // SST about each column's own mean (7/3 and 10/3), pooled.
  double sst = 0;
  for (int k = 0; k < 2; ++k) {
    const double mean = (t[k] + t[2 + k] + t[4 + k]) / 3.0;
    for (int r = 0; r < 3; ++r) sst += (t[r * 2 + k] - mean) * (t[r * 2 + k] - mean);
  }
  EXPECT_NEAR(m.r2(), 1 - 10.0 / sst, 1e-12);
  TargetMetrics huber(Loss::kHuber, 1, 2);
  huber.add(z.data(), t.data(), 3);
  EXPECT_DOUBLE_EQ(huber.loss_sum(), (0.5 + 0.5) / 2 + (0 + 1.5) / 2 + (1.5 + 0) / 2);
  TargetMetrics constant(Loss::kMse, 1, 1);
  constant.add(z.data(), t.data(), 2);  // targets 1, 1: no variance, no R^2
  EXPECT_TRUE(std::isnan(constant.r2()));
}

TEST(TargetMetricsTest, MultiLabelFiguresCountLabelsAndWholeRecords) {
  // Outputs >= 0 predict 1. Record 0 all right; record 1 one of three wrong; record 2 all wrong.
  const std::vector<float> z = {3, -1, 0, 2, 2, -5, -1, -2, 4}, t = {1, 0, 1, 1, 0, 0, 1, 1, 0};
  TargetMetrics m(Loss::kBce, 1, 3);
  m.add(z.data(), t.data(), 3);
  EXPECT_DOUBLE_EQ(m.label_accuracy(), 5.0 / 9);
  EXPECT_DOUBLE_EQ(m.exact_match(), 1.0 / 3);
  double sum = 0;
  for (size_t i = 0; i < z.size(); ++i) sum += plain_loss(Loss::kBce, z[i], t[i], 1);
  EXPECT_NEAR(m.loss_sum(), sum / 3, 1e-12);
}

// A checkpoint of another loss is another job's (--resume passes over it); a softmax job's
// fingerprint has no "loss", so checkpoints written before there were other losses still match.
TEST(TargetLossTest, TheLossIsPartOfTheJobFingerprint) {
  JobOptions o;
  const Fingerprint softmax = job_fingerprint(job_identity(o));
  for (const auto& [key, value] : softmax) EXPECT_NE(key, "loss");
  o.loss = Loss::kHuber;
  o.huber_delta = 0.5;
  const Fingerprint huber = job_fingerprint(job_identity(o));
  std::string accepted;
  EXPECT_EQ(fingerprint_differences(huber, softmax, {}, &accepted), "loss huber delta 0.5 (this job: none)");
}

// A version 1.0 .npy file of `descr` ('<f8', '<i2', ...) holding `bytes`.
void write_raw_npy(const std::string& path, const std::string& descr, const std::string& shape, const void* bytes,
                   size_t size) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  header += std::string(63 - (10 + header.size()) % 64, ' ') + "\n";  // 10 + header a multiple of 64
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&len), 2);
  out << header;
  out.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
}

TEST(TargetDataTest, NpyTargetsOfFloat64AndIntegersAreReadAsFloats) {
  const TempDir dir("target-data");
  const std::vector<float> x = {0, 1, 2, 3, 4, 5};  // 3 records of 2
  write_npy(dir.path + "/x.npy", {3, 2}, x.data());
  const double f64[3] = {0.25, -1.5, 1e10};
  write_raw_npy(dir.path + "/y64.npy", "<f8", "(3,)", f64, sizeof f64);
  const int16_t i16[6] = {1, 0, 0, 1, 1, 1};
  write_raw_npy(dir.path + "/y16.npy", "<i2", "(3, 2)", i16, sizeof i16);

  const auto regression = open_npy_target_dataset(dir.path + "/x.npy", dir.path + "/y64.npy", dir.path, 0,
                                                  TargetRule{false, "--loss mse"});
  EXPECT_EQ(regression->target_width(), 1u);
  EXPECT_EQ(regression->num_classes(), 1);
  const size_t records[2] = {2, 0};
  float t[4] = {};
  regression->read_targets(records, 2, t);
  EXPECT_EQ(t[0], 1e10f);
  EXPECT_EQ(t[1], 0.25f);

  const auto labels = open_npy_target_dataset(dir.path + "/x.npy", dir.path + "/y16.npy", dir.path, 0,
                                              TargetRule{true, "--loss bce"});
  EXPECT_EQ(labels->target_width(), 2u);
  EXPECT_EQ(labels->target_source(), dir.path + "/y16.npy (shape (3, 2))");
  labels->read_targets(records, 2, t);
  EXPECT_EQ((std::vector<float>(t, t + 4)), (std::vector<float>{1, 1, 1, 0}));

  bool usage = false;  // a value other than 0/1 under bce, naming the file, record and value
  EXPECT_EQ(test::error_of([&] {
              open_npy_target_dataset(dir.path + "/x.npy", dir.path + "/y64.npy", dir.path, 0,
                                      TargetRule{true, "--loss bce"});
            }, &usage),
            dir.path + "/y64.npy: target 0.25 of record 0 is not 0 or 1 (--loss bce takes multi-label 0/1 targets)");
  EXPECT_TRUE(usage);
}

// A float64 target beyond float32's range would train as infinity: refused when the file is opened.
TEST(TargetDataTest, ATargetBeyondFloat32IsRefusedWhenRead) {
  const TargetRule rule{false, "--loss mse"};
  EXPECT_NO_THROW(check_target(3.4e38, rule, "y.npy", 7, 0, 1));
  try {
    check_target(1e300, rule, "y.npy", 7, 0, 1);
    ADD_FAILURE() << "1e300 was taken";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("y.npy: target 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("of record 7 is not a finite float32 (--loss mse)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pstrain
