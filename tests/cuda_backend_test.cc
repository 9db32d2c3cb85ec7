// The CUDA backend against the CPU reference (ggml's test-backend-ops pattern): every op on
// random inputs with a tolerance derived per op, the MLP's gradients against central finite
// differences and against the CPU MLP, 20 SGD steps on both, allocation accounting, the memory
// limit, and two backends sharing a device. Compiled in every build; every test skips when
// cuda_device_count() == 0 (no GPU, no driver, or a build without CUDA).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "shared/util/error.h"
#include "test_util/random.h"
#include "worker/backend/backend.h"
#include "worker/model/model.h"
#ifdef PSTRAIN_HAVE_CUDA
#include "worker/cuda/cuda_info.h"
#include "worker/cuda/pinned.h"
#endif

namespace pstrain {
namespace {

using test::random_floats;

constexpr int kDevice = 0;
constexpr size_t kMiB = size_t{1} << 20;

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (cuda_device_count() == 0)";
    gpu_ = make_cuda_backend(kDevice, 0);
    cpu_ = make_cpu_backend(1);
  }

  std::unique_ptr<Backend> gpu_, cpu_;
};
using CudaMlpTest = CudaBackendTest;

std::vector<int32_t> random_labels(size_t n, int classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, classes - 1);
  std::vector<int32_t> v(n);
  for (int32_t& y : v) y = dist(rng);
  return v;
}

// A buffer of `backend` holding `host`.
BufferPtr put(Backend& backend, const std::vector<float>& host) {
  BufferPtr buffer = backend.allocate(host.size());
  backend.upload(buffer.get(), host.data(), host.size());
  return buffer;
}

std::vector<float> get(Backend& backend, const float* buffer, size_t n) {
  std::vector<float> host(n);
  backend.download(host.data(), buffer, n);
  return host;
}

// |actual[i] - expected[i]| <= bound[i] everywhere (NaN fails); one failure names the worst index.
void expect_within(const std::vector<float>& actual, const std::vector<float>& expected,
                   const std::vector<double>& bound, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  ASSERT_EQ(bound.size(), expected.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    if (diff <= bound[i]) continue;
    ++bad;
    const double ratio = bound[i] > 0 ? diff / bound[i] : HUGE_VAL;
    if (bad == 1 || ratio > worst_ratio) {
      worst = i;
      worst_ratio = ratio;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << actual.size()
                     << " elements out of tolerance; worst [" << worst << "] " << actual[worst] << " vs "
                     << expected[worst] << " (bound " << bound[worst] << ")";
}

void expect_within(const std::vector<float>& actual, const std::vector<float>& expected, double bound,
                   const std::string& what) {
  expect_within(actual, expected, std::vector<double>(expected.size(), bound), what);
}

// max |actual - expected| <= rel * max |expected| over each tensor of the layout.
void expect_tensors_close(const std::vector<float>& actual, const std::vector<float>& expected,
                          const Layout& layout, double rel, const std::string& what) {
  double worst = 0;  // the largest |difference| / max |expected| of any tensor, printed for the record
  for (const TensorSpec& t : layout.tensors()) {
    double scale = 0, diff = 0;
    for (size_t i = t.offset; i < t.offset + t.size; ++i) {
      scale = std::max(scale, std::fabs(double{expected[i]}));
      diff = std::max(diff, std::fabs(double{actual[i]} - double{expected[i]}));
    }
    if (scale > 0) worst = std::max(worst, diff / scale);
    const std::vector<float> a(actual.begin() + t.offset, actual.begin() + t.offset + t.size);
    const std::vector<float> e(expected.begin() + t.offset, expected.begin() + t.offset + t.size);
    expect_within(a, e, rel * scale, what + " " + t.name);
  }
  std::printf("GPU vs CPU, %s: max |difference| / max |value| per tensor = %.3g (bound %.3g)\n", what.c_str(), worst,
              rel);
}

// ---- ops against the CPU backend ----

struct GemmShape {
  int m, n, k;
};

// Each backend's element of alpha op(A) op(B) + beta C is within (k + 2) u M of the exact value
// (u = FLT_EPSILON / 2; M = the same expression in absolute values), so the two are within
// (k + 2) FLT_EPSILON M of each other. TF32 would miss this by orders of magnitude.
TEST_F(CudaBackendTest, GemmMatchesCpuInAllTransposeCombinations) {
  // Odd, non-square; the last one has a long k (cuBLAS may split it and use its workspace).
  for (const GemmShape& s : {GemmShape{37, 23, 51}, GemmShape{300, 257, 129}, GemmShape{9, 5, 4099}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        for (const float beta : {0.0f, 0.5f}) {
          std::ostringstream what;
          what << "gemm m=" << s.m << " n=" << s.n << " k=" << s.k << " trans_a=" << ta << " trans_b=" << tb
               << " beta=" << beta;
          SCOPED_TRACE(what.str());
          const float alpha = 0.75f;
          const auto a = random_floats(static_cast<size_t>(s.m) * s.k, 1);
          const auto b = random_floats(static_cast<size_t>(s.k) * s.n, 2);
          const auto c0 = random_floats(static_cast<size_t>(s.m) * s.n, 3);
          const auto run = [&](Backend& backend) {
            BufferPtr da = put(backend, a), db = put(backend, b), dc = put(backend, c0);
            backend.gemm(ta, tb, s.m, s.n, s.k, alpha, da.get(), db.get(), beta, dc.get());
            return get(backend, dc.get(), c0.size());
          };
          const std::vector<float> gpu = run(*gpu_), cpu = run(*cpu_);

          std::vector<float> exact(c0.size());
          std::vector<double> bound(c0.size());
          for (int i = 0; i < s.m; ++i) {
            for (int j = 0; j < s.n; ++j) {
              double sum = 0, mag = 0;
              for (int p = 0; p < s.k; ++p) {
                const double x =
                    ta ? a[static_cast<size_t>(p) * s.m + i] : a[static_cast<size_t>(i) * s.k + p];
                const double y =
                    tb ? b[static_cast<size_t>(j) * s.k + p] : b[static_cast<size_t>(p) * s.n + j];
                sum += x * y;
                mag += std::fabs(x * y);
              }
              const size_t ij = static_cast<size_t>(i) * s.n + j;
              exact[ij] = static_cast<float>(alpha * sum + beta * double{c0[ij]});
              bound[ij] =
                  (s.k + 2) * double{FLT_EPSILON} * (alpha * mag + beta * std::fabs(double{c0[ij]})) + 1e-30;
            }
          }
          expect_within(gpu, cpu, bound, what.str() + " vs cpu");
          expect_within(gpu, exact, bound, what.str() + " vs exact");
        }
      }
    }
  }
}

// One float addition and a comparison: bit-identical.
TEST_F(CudaBackendTest, BiasAndReluMatchCpuExactly) {
  for (const auto& shape :
       {std::pair{33, 47}, std::pair{1, 5}, std::pair{1000, 300}, std::pair{7, 1}}) {
    const int rows = shape.first, cols = shape.second;  // lambdas cannot capture bindings in C++17
    for (const bool relu : {false, true}) {
      const std::string what = "add_bias + relu " + std::to_string(rows) + "x" + std::to_string(cols) +
                               (relu ? " relu" : " linear");
      const auto y = random_floats(static_cast<size_t>(rows) * cols, 4);
      const auto bias = random_floats(static_cast<size_t>(cols), 5, -0.5f, 0.5f);
      const auto run = [&](Backend& backend) {
        BufferPtr dy = put(backend, y), db = put(backend, bias);
        backend.add_bias(dy.get(), db.get(), rows, cols, 1);
        if (relu) backend.activation(Activation::kRelu, dy.get(), dy.get(), y.size());
        return get(backend, dy.get(), y.size());
      };
      const std::vector<float> gpu = run(*gpu_);
      expect_within(gpu, run(*cpu_), 0.0, what);
      if (relu) {
        EXPECT_EQ(*std::min_element(gpu.begin(), gpu.end()), 0.0f) << what;
      }
    }
  }
}

TEST_F(CudaBackendTest, ReluBackwardMatchesCpuExactly) {
  const size_t n = 10007;
  auto y = random_floats(n, 6);
  for (float& v : y) v = std::max(v, 0.0f);  // a ReLU output: about half exactly zero
  const auto dy = random_floats(n, 7);
  const auto run = [&](Backend& backend) {
    BufferPtr ddy = put(backend, dy), dyv = put(backend, y);
    backend.activation_backward(Activation::kRelu, nullptr, dyv.get(), ddy.get(), ddy.get(), n);
    return get(backend, ddy.get(), n);
  };
  expect_within(run(*gpu_), run(*cpu_), 0.0, "relu backward");
}

double run_sum(const std::vector<float>& dy, int rows, int cols, int c) {
  double sum = 0;
  for (int r = 0; r < rows; ++r) sum += dy[static_cast<size_t>(r) * cols + c];
  return sum;
}

// Two float sums of the same `rows` terms in different orders differ by at most
// (rows + 1) FLT_EPSILON sum|dy|.
TEST_F(CudaBackendTest, ColumnSumsMatchCpu) {
  for (const auto& shape :
       {std::pair{1000, 70}, std::pair{5, 3}, std::pair{20000, 10}, std::pair{33, 1025}, std::pair{1, 1}}) {
    const int rows = shape.first, cols = shape.second;  // lambdas cannot capture bindings in C++17
    const std::string what = "bias_grad " + std::to_string(rows) + "x" + std::to_string(cols);
    const auto dy = random_floats(static_cast<size_t>(rows) * cols, 8);
    const std::vector<float> stale(static_cast<size_t>(cols), 123.0f);  // overwritten, or added to
    for (const bool accumulate : {false, true}) {
      const auto run = [&](Backend& backend) {
        BufferPtr ddy = put(backend, dy), dbias = put(backend, stale);
        backend.bias_grad(ddy.get(), rows, cols, 1, dbias.get(), accumulate);
        return get(backend, dbias.get(), stale.size());
      };
      std::vector<double> bound(static_cast<size_t>(cols), accumulate ? 123.0 : 0.0);
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) bound[c] += std::fabs(double{dy[static_cast<size_t>(r) * cols + c]});
      }
      for (double& b : bound) b *= (rows + 2) * double{FLT_EPSILON};
      const auto cpu = run(*cpu_);
      if (accumulate) {
        EXPECT_NEAR(cpu[0], 123.0f + run_sum(dy, rows, cols, 0), 1e-3 * (1 + bound[0])) << what;
      }
      expect_within(run(*gpu_), cpu, bound, what + (accumulate ? " (accumulate)" : ""));
    }
  }
}

struct XentResult {
  BatchStats stats, stats_forward_only;
  std::vector<float> dlogits;
};

XentResult run_xent(Backend& backend, const std::vector<float>& logits, const std::vector<int32_t>& labels,
                    int cols, float smoothing = 0.0f) {
  const int rows = static_cast<int>(labels.size());
  BufferPtr dz = put(backend, logits), dd = backend.allocate(logits.size());
  XentResult result;
  result.stats = backend.softmax_xent(dz.get(), labels.data(), rows, cols, dd.get(), smoothing);
  result.stats_forward_only = backend.softmax_xent(dz.get(), labels.data(), rows, cols, nullptr, smoothing);
  result.dlogits = get(backend, dd.get(), logits.size());
  return result;
}

// Per-row losses are computed in double from the same float differences z - max on both sides,
// so the sums agree to ~1e-15 relative; 1e-9 leaves room for exp/log's last bits. The gradient
// is a double rounded to float, off by at most an ulp of values in [-1, 1].
void expect_xent_matches(const XentResult& gpu, const XentResult& cpu, const std::string& what) {
  EXPECT_NEAR(gpu.stats.loss_sum, cpu.stats.loss_sum, 1e-9 * (1 + std::fabs(cpu.stats.loss_sum))) << what;
  EXPECT_EQ(gpu.stats.correct, cpu.stats.correct) << what;
  EXPECT_EQ(gpu.stats_forward_only.loss_sum, gpu.stats.loss_sum) << what << " (without dlogits)";
  EXPECT_EQ(gpu.stats_forward_only.correct, gpu.stats.correct) << what << " (without dlogits)";
  expect_within(gpu.dlogits, cpu.dlogits, 2.5e-7, what + " dlogits");
}

TEST_F(CudaBackendTest, SoftmaxXentMatchesCpu) {
  struct Case {
    int rows, cols;
    float scale, offset;  // logits = offset * (row pattern) + U(-scale, scale)
  };
  // One lane, several lanes, partly filled lanes, a long row; the last two have logits around
  // +-1e4, where exp() of an unshifted logit overflows.
  for (const Case& c : {Case{67, 10, 5, 0}, Case{45, 300, 3, 0}, Case{3, 5000, 4, 0}, Case{20, 33, 10, 1e4f},
                        Case{64, 10, 30, -1e4f}}) {
    const std::string what = "softmax_xent " + std::to_string(c.rows) + "x" + std::to_string(c.cols) +
                             " offset " + std::to_string(c.offset);
    auto logits = random_floats(static_cast<size_t>(c.rows) * c.cols, 9, -c.scale, c.scale);
    for (int r = 0; r < c.rows; ++r) {
      for (int k = 0; k < c.cols; ++k) logits[static_cast<size_t>(r) * c.cols + k] += c.offset * (1 + r % 3);
    }
    const auto labels = random_labels(static_cast<size_t>(c.rows), c.cols, 10);
    for (const float smoothing : {0.0f, 0.1f}) {  // --label-smoothing
      const std::string how = what + " smoothing " + std::to_string(smoothing);
      const XentResult gpu = run_xent(*gpu_, logits, labels, c.cols, smoothing),
                       cpu = run_xent(*cpu_, logits, labels, c.cols, smoothing);
      expect_xent_matches(gpu, cpu, how);
      EXPECT_TRUE(std::isfinite(gpu.stats.loss_sum)) << how;
      for (int r = 0; r < c.rows; ++r) {  // softmax - q sums to zero (q sums to 1)
        double sum = 0;
        for (int k = 0; k < c.cols; ++k) sum += gpu.dlogits[static_cast<size_t>(r) * c.cols + k];
        EXPECT_NEAR(sum, 0.0, 1e-5) << how << " row " << r;
      }
    }
  }
}

// Equal maxima: the arg-max is the lowest index, as std::max_element gives on the CPU.
TEST_F(CudaBackendTest, SoftmaxXentTiesGoToTheLowestIndex) {
  const int cols = 40;  // the tied entries sit in different lanes of a warp and in one lane
  std::vector<float> logits(4 * cols, 0.0f);
  const auto set_row = [&](int r, std::vector<int> max_at) {
    for (int k = 0; k < cols; ++k) logits[r * cols + k] = -0.25f * static_cast<float>(k % 7);
    for (int k : max_at) logits[r * cols + k] = 3.0f;
  };
  set_row(0, {5, 37});
  set_row(1, {5, 37});
  set_row(2, {3, 35});                                       // same lane (35 = 3 + 32)
  std::fill(logits.begin() + 3 * cols, logits.end(), 1.5f);  // all equal: arg-max 0
  const std::vector<int32_t> labels = {5, 37, 35, 0};        // correct: yes, no, no, yes
  const XentResult gpu = run_xent(*gpu_, logits, labels, cols), cpu = run_xent(*cpu_, logits, labels, cols);
  EXPECT_EQ(gpu.stats.correct, 2);
  expect_xent_matches(gpu, cpu, "softmax_xent ties");
}

TEST_F(CudaBackendTest, SoftmaxXentRejectsALabelOutOfRange) {
  const int rows = 3, cols = 4;
  BufferPtr logits = put(*gpu_, random_floats(rows * cols, 11));
  for (const int32_t bad : {-1, cols}) {
    const std::vector<int32_t> labels = {0, bad, 1};
    try {
      gpu_->softmax_xent(logits.get(), labels.data(), rows, cols, nullptr, 0.0f);
      ADD_FAILURE() << "label " << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("label " + std::to_string(bad) + " of sample 1"),
                std::string::npos)
          << e.what();
    }
  }
  const std::vector<int32_t> good = {0, 3, 1};  // the backend is still usable
  EXPECT_TRUE(std::isfinite(gpu_->softmax_xent(logits.get(), good.data(), rows, cols, nullptr, 0.0f).loss_sum));
}

TEST_F(CudaBackendTest, UploadDownloadRoundTripAndZeroedAllocation) {
  const size_t n = 100003;
  BufferPtr buffer = gpu_->allocate(n);
  EXPECT_EQ(get(*gpu_, buffer.get(), n), std::vector<float>(n, 0.0f));
  const auto host = random_floats(n, 12);
  gpu_->upload(buffer.get(), host.data(), n);
  EXPECT_EQ(get(*gpu_, buffer.get(), n), host);
  gpu_->upload(buffer.get() + 17, host.data(), 5);  // a sub-range, as the PS client writes slices
  const std::vector<float> part = get(*gpu_, buffer.get() + 17, 5);
  EXPECT_EQ(part, std::vector<float>(host.begin(), host.begin() + 5));
#ifdef PSTRAIN_HAVE_CUDA
  PinnedBuffer pinned(n);
  EXPECT_EQ(pinned.size(), n);
  EXPECT_EQ(pinned[n - 1], 0.0f);
  gpu_->download(pinned.data(), buffer.get(), n);
  PinnedBuffer moved = std::move(pinned);
  EXPECT_EQ(pinned.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(moved[3], host[3]);
  BufferPtr copy = gpu_->allocate(n);
  gpu_->upload(copy.get(), moved.data(), n);
  EXPECT_EQ(get(*gpu_, copy.get(), n), get(*gpu_, buffer.get(), n));
#endif
}

TEST_F(CudaBackendTest, ReportsItsDevice) {
  EXPECT_FALSE(gpu_->host_accessible());
  const std::string name = gpu_->name();
  EXPECT_EQ(name.rfind("cuda:0 (", 0), 0u) << name;
  EXPECT_EQ(name.back(), ')') << name;
#ifdef PSTRAIN_HAVE_CUDA
  EXPECT_EQ(name, "cuda:0 (" + gpu_name(kDevice) + ")");
  const GpuMemory memory = gpu_memory(kDevice);
  EXPECT_GT(memory.total_bytes, 0u);
  EXPECT_LE(memory.free_bytes, memory.total_bytes);
#endif
  EXPECT_THROW(make_cuda_backend(cuda_device_count(), 0), Error);
  EXPECT_THROW(make_cuda_backend(-1, 0), Error);
}

// ---- the MLP on the GPU ----

// Central differences of the summed loss, the step taken as the float parameters actually moved.
// With h = 1e-3 the truncation error is ~h^2 and the float forward's rounding noise ~1e-7 / h, so
// 2e-3 relative (the CPU MLP's own test) holds with a wide margin; the data is the CPU test's,
// whose pre-activations are far from the ReLU kinks.
TEST_F(CudaMlpTest, GradientMatchesFiniteDifferences) {
  const int batch = 5, in = 6, classes = 4;
  Model model(in, {7, 5}, classes, batch, *gpu_);
  const size_t n = model.layout().total();
  std::vector<float> params(n), x(batch * in);
  model.init(3, params.data());
  for (size_t i = 0; i < n; ++i) params[i] += 0.05f * std::sin(static_cast<float>(i));  // non-zero biases
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.7f * static_cast<float>(i));
  const std::vector<int32_t> y = {0, 3, 1, 2, 3};
  BufferPtr dparams = put(*gpu_, params), dx = put(*gpu_, x), dgrad = gpu_->allocate(n);
  model.train_step(dparams.get(), dx.get(), y.data(), batch, dgrad.get());
  const std::vector<float> grad = get(*gpu_, dgrad.get(), n);

  const float h = 1e-3f;
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < n; ++i) {
    const float saved = params[i], up = saved + h, down = saved - h;
    gpu_->upload(dparams.get() + i, &up, 1);
    const double loss_up = model.evaluate(dparams.get(), dx.get(), y.data(), batch).loss_sum;
    gpu_->upload(dparams.get() + i, &down, 1);
    const double loss_down = model.evaluate(dparams.get(), dx.get(), y.data(), batch).loss_sum;
    gpu_->upload(dparams.get() + i, &saved, 1);
    const double numeric = (loss_up - loss_down) / (double{up} - double{down});
    const double err = std::fabs(numeric - grad[i]) / std::max(1.0, std::fabs(numeric));
    if (err > worst) {
      worst = err;
      worst_i = i;
    }
  }
  EXPECT_LT(worst, 2e-3) << "parameter " << worst_i;
  std::printf("GPU gradient vs finite differences: worst relative error %.3g (bound 2e-3)\n", worst);
}

// The same forward and backward on both backends: float rounding apart, so each tensor's gradient
// within 1e-4 of its largest entry (sums of at most 64 products: ~64 u = 4e-6 expected).
TEST_F(CudaMlpTest, GradientsMatchTheCpuMlp) {
  const int in = 50, classes = 10, max_batch = 40;
  const std::vector<int> hidden = {64, 33};
  Model gpu_model(in, hidden, classes, max_batch, *gpu_), cpu_model(in, hidden, classes, max_batch, *cpu_);
  const Layout& layout = cpu_model.layout();
  const size_t n = layout.total();
  std::vector<float> params(n);
  cpu_model.init(7, params.data());
  for (size_t i = 0; i < n; ++i) params[i] += 0.02f * std::sin(0.37f * static_cast<float>(i));
  for (const int batch : {max_batch, 17}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const auto x = random_floats(static_cast<size_t>(batch) * in, 13);
    const auto y = random_labels(static_cast<size_t>(batch), classes, 14);
    const auto run = [&](Backend& backend, Model& model, std::vector<float>& grad) {
      BufferPtr dp = put(backend, params), dx = put(backend, x), dg = backend.allocate(n);
      const BatchStats stats = model.train_step(dp.get(), dx.get(), y.data(), batch, dg.get());
      grad = get(backend, dg.get(), n);
      return stats;
    };
    std::vector<float> gpu_grad, cpu_grad;
    const BatchStats g = run(*gpu_, gpu_model, gpu_grad), c = run(*cpu_, cpu_model, cpu_grad);
    EXPECT_NEAR(g.loss_sum, c.loss_sum, 1e-5 * c.loss_sum);
    EXPECT_EQ(g.correct, c.correct);
    expect_tensors_close(gpu_grad, cpu_grad, layout, 1e-4, "gradient");
  }
}

// --- The layer operations of convolutional models (worker/model/layers.h) ------------------------

// Copies and comparisons: bit-identical; sums in the CPU's order, FMA contraction apart.
TEST_F(CudaBackendTest, ConvolutionAndPoolingOpsMatchCpu) {
  for (const auto& [stride, pad] : {std::pair{1, 1}, std::pair{2, 0}, std::pair{2, 2}}) {
    const ConvGeometry g{3, 11, 9, 3, stride, pad, (11 + 2 * pad - 3) / stride + 1, (9 + 2 * pad - 3) / stride + 1};
    const int batch = 5;
    const auto x = random_floats(batch * g.input_size(), 21);
    const auto c = random_floats(batch * g.patch() * g.positions(), 22);
    const std::string what = "stride " + std::to_string(stride) + " pad " + std::to_string(pad);
    const auto unfold = [&](Backend& backend) {
      BufferPtr dx = put(backend, x), dcol = backend.allocate(c.size());
      backend.im2col(dx.get(), batch, g, dcol.get());
      return get(backend, dcol.get(), c.size());
    };
    expect_within(unfold(*gpu_), unfold(*cpu_), 0.0, "im2col " + what);
    const auto fold = [&](Backend& backend) {
      BufferPtr dcol = put(backend, c), dx = backend.allocate(x.size());
      backend.col2im(dcol.get(), batch, g, dx.get());
      return get(backend, dx.get(), x.size());
    };
    expect_within(fold(*gpu_), fold(*cpu_), 1e-5, "col2im " + what);
  }
  for (const auto& [kernel, stride] : {std::pair{2, 2}, std::pair{3, 1}, std::pair{3, 2}}) {
    const PoolGeometry g{13, 10, kernel, stride, (13 - kernel) / stride + 1, (10 - kernel) / stride + 1};
    const int planes = 7;
    const auto x = random_floats(static_cast<size_t>(planes) * 130, 23);
    const auto dy = random_floats(static_cast<size_t>(planes) * g.out_height * g.out_width, 24);
    for (const PoolKind kind : {PoolKind::kMax, PoolKind::kAverage}) {
      const auto run = [&](Backend& backend) {
        BufferPtr dx = put(backend, x), ddy = put(backend, dy), dy_out = backend.allocate(dy.size()),
                  dgrad = backend.allocate(x.size()),
                  scratch = backend.allocate(std::max<size_t>(backend.pool_scratch_floats(kind, planes, g), 1));
        backend.pool(kind, dx.get(), planes, g, dy_out.get(), scratch.get());
        backend.pool_backward(kind, dx.get(), dy_out.get(), ddy.get(), planes, g, dgrad.get(), scratch.get());
        std::vector<float> both = get(backend, dy_out.get(), dy.size());
        const std::vector<float> grad = get(backend, dgrad.get(), x.size());
        both.insert(both.end(), grad.begin(), grad.end());
        return both;
      };
      // Max: the same choice; where windows overlap (stride below the window) a pixel's terms are added in
      // oneDNN's order on the CPU (worker/cpu/cpu_pool.h), which can differ in the last bit.
      expect_within(run(*gpu_), run(*cpu_), kind == PoolKind::kMax && stride >= kernel ? 0.0 : 1e-6,
                    std::string(kind == PoolKind::kMax ? "max" : "avg") + " pool " + std::to_string(kernel));
    }
  }
}

TEST_F(CudaBackendTest, BiasActivationAndDropoutOpsMatchCpu) {
  const int outer = 9, channels = 13, inner = 37;
  const size_t n = static_cast<size_t>(outer) * channels * inner;
  const auto y = random_floats(n, 25, -3.0f, 3.0f);
  const auto bias = random_floats(channels, 26);
  const auto dy = random_floats(n, 27);
  const std::vector<uint64_t> keys = {3, 1, 4, 1, 5, 9, 2, 6, 5};
  for (const bool accumulate : {false, true}) {
    const auto run = [&](Backend& backend) {
      BufferPtr dyv = put(backend, y), db = put(backend, bias), ddy = put(backend, dy), dsum = put(backend, bias);
      backend.add_bias(dyv.get(), db.get(), outer, channels, inner);
      backend.bias_grad(ddy.get(), outer, channels, inner, dsum.get(), accumulate);
      std::vector<float> out = get(backend, dyv.get(), n);
      const std::vector<float> sums = get(backend, dsum.get(), channels);
      out.insert(out.end(), sums.begin(), sums.end());
      return out;
    };
    expect_within(run(*gpu_), run(*cpu_), 1e-4, "add_bias, bias_grad over channels");
  }
  const auto act = [&](Backend& backend) {
    BufferPtr dx = put(backend, y), dout = backend.allocate(n), ddy = put(backend, dy);
    backend.activation(Activation::kTanh, dx.get(), dout.get(), n);
    backend.activation_backward(Activation::kTanh, nullptr, dout.get(), ddy.get(), ddy.get(), n);
    std::vector<float> out = get(backend, dout.get(), n);
    const std::vector<float> grad = get(backend, ddy.get(), n);
    out.insert(out.end(), grad.begin(), grad.end());
    return out;
  };
  // CUDA's tanhf and glibc's are each within 2 ulp of t = tanh(input) (the CUDA Programming
  // Guide's and glibc's tables), so the forwards differ by at most 4 ulp(t). Each backward is
  // dy (1 - o^2) of its own forward o: the two o^2 differ by at most 4 ulp(t) (|o_gpu| + |o_cpu|)
  // <= 8 |t| ulp(t) + 16 ulp(t)^2, and each side's three roundings (two where the compiler
  // contracts 1 - o * o into an FMA, as nvcc does) cost at most u (2 - o^2) |dy| <= FLT_EPSILON |dy|
  // (u = FLT_EPSILON / 2); 3 FLT_EPSILON |dy| covers both sides and the second-order terms. Near
  // |t| = 1 that is 8.3e-7 |dy| (a flat 4e-7 was not enough); a wrong formula is off by far more.
  std::vector<double> tanh_bound(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const double t = std::tanh(double{y[i]});
    int exponent = 0;
    std::frexp(t, &exponent);
    const double ulp = std::ldexp(1.0, exponent - FLT_MANT_DIG);  // of a float of t's magnitude
    tanh_bound[i] = 4 * ulp;
    tanh_bound[n + i] = std::fabs(double{dy[i]}) * (8 * std::fabs(t) * ulp + 16 * ulp * ulp + 3 * double{FLT_EPSILON});
  }
  expect_within(act(*gpu_), act(*cpu_), tanh_bound, "tanh forward, then backward");
  const auto drop = [&](Backend& backend) {
    BufferPtr dx = put(backend, y);
    backend.dropout(dx.get(), dx.get(), outer, channels * inner, 0.4f, keys.data(), 77);
    return get(backend, dx.get(), n);
  };
  expect_within(drop(*gpu_), drop(*cpu_), 0.0, "dropout");  // the same mask, the same product
}

// sigmoid and gelu (erf-based) on both backends: expf/erff and glibc's are within a few ulp, so
// forward and backward agree within a few 1e-7 at inputs in [-4, 4].
TEST_F(CudaBackendTest, SigmoidAndGeluMatchCpu) {
  const size_t n = 4099;
  const auto x = random_floats(n, 51, -4.0f, 4.0f), dy = random_floats(n, 52);
  for (const Activation f : {Activation::kSigmoid, Activation::kGelu}) {
    const auto run = [&](Backend& backend) {
      BufferPtr dx = put(backend, x), dout = backend.allocate(n), ddy = put(backend, dy);
      backend.activation(f, dx.get(), dout.get(), n);
      backend.activation_backward(f, dx.get(), dout.get(), ddy.get(), ddy.get(), n);
      std::vector<float> out = get(backend, dout.get(), n);
      const std::vector<float> grad = get(backend, ddy.get(), n);
      out.insert(out.end(), grad.begin(), grad.end());
      return out;
    };
    expect_within(run(*gpu_), run(*cpu_), 2e-6, f == Activation::kSigmoid ? "sigmoid" : "gelu");
  }
}

// Layer normalisation and its backward on both backends (the GPU's row sums by a tree in float,
// the CPU's in order in double): within a few 1e-6.
TEST_F(CudaBackendTest, LayerNormMatchesCpu) {
  for (const int cols : {7, 300, 3000}) {
    const int rows = 9;
    const size_t n = static_cast<size_t>(rows) * cols;
    const auto x = random_floats(n, 61, -2.0f, 3.0f), dy = random_floats(n, 62);
    const auto gamma = random_floats(static_cast<size_t>(cols), 63), beta = random_floats(static_cast<size_t>(cols), 64);
    const auto run = [&](Backend& backend) {
      BufferPtr dx = put(backend, x), ddy = put(backend, dy), dg = put(backend, gamma), db = put(backend, beta);
      BufferPtr y = backend.allocate(n), grad = backend.allocate(n), dyx = backend.allocate(n);
      backend.layer_norm(dx.get(), rows, cols, dg.get(), db.get(), 1e-5f, y.get());
      backend.layer_norm_backward(dx.get(), ddy.get(), rows, cols, dg.get(), 1e-5f, grad.get(), dyx.get());
      std::vector<float> out = get(backend, y.get(), n);
      for (const BufferPtr* b : {&grad, &dyx}) {
        const std::vector<float> part = get(backend, b->get(), n);
        out.insert(out.end(), part.begin(), part.end());
      }
      return out;
    };
    expect_within(run(*gpu_), run(*cpu_), 1e-5, "layer_norm, " + std::to_string(cols) + " columns");
  }
}

// The dot interaction and its backward: the same sums in the same order, products unfused on
// both, so they should agree bit for bit; the bound allows the CPU compiler a fused multiply-add.
TEST_F(CudaBackendTest, DotInteractionMatchesCpu) {
  // {fields, dim, dense values first}: a CTR record (13 + 26 x 16), the vectors alone, 300
  // fields (44850 pairs: more than a block's threads).
  for (const auto& [f, d, dense] : {std::tuple{26, 16, 13}, std::tuple{3, 5, 0}, std::tuple{300, 2, 1}}) {
    const int fields = f, dim = d;  // variables, not bindings: the lambda below captures them (C++17)
    const int rows = 37, cols = dense + fields * dim;
    const size_t width = static_cast<size_t>(cols) + static_cast<size_t>(fields) * (fields - 1) / 2;
    const auto x = random_floats(static_cast<size_t>(rows) * cols, 65), dy = random_floats(rows * width, 66);
    const auto run = [&](Backend& backend) {
      BufferPtr dx = put(backend, x), ddy = put(backend, dy);
      BufferPtr y = backend.allocate(rows * width), grad = backend.allocate(x.size());
      backend.dot_interaction(dx.get(), rows, cols, fields, dim, y.get());
      backend.dot_interaction_backward(dx.get(), ddy.get(), rows, cols, fields, dim, grad.get());
      std::vector<float> out = get(backend, y.get(), rows * width);
      const std::vector<float> g = get(backend, grad.get(), x.size());
      out.insert(out.end(), g.begin(), g.end());
      return out;
    };
    expect_within(run(*gpu_), run(*cpu_), 1e-5,
                  "dot_interaction " + std::to_string(fields) + " x " + std::to_string(dim));
  }
}

// The losses of float targets (--loss bce | mse | huber): the same element formulas
// (worker/backend/loss_math.h) on both, per-row losses in double summed in row order, so the sums agree to
// exp/log1p's last bits; gradients within an ulp or two (expf). Rows past a block, K = 1 and K =
// 7, logits large enough that bce's exp would overflow unshifted, Huber errors on both sides of
// delta.
TEST_F(CudaBackendTest, TargetLossesMatchCpu) {
  for (const Loss loss : {Loss::kMse, Loss::kHuber, Loss::kBce}) {
    for (const int cols : {1, 7}) {
      const int rows = 300;
      auto z = random_floats(static_cast<size_t>(rows) * cols, 71, -4, 4);
      auto t = random_floats(z.size(), 72, -2, 2);
      for (size_t i = 0; i < z.size(); i += 5) z[i] *= 200.0f;
      if (loss == Loss::kBce) {
        for (float& v : t) v = v > 0 ? 1.0f : 0.0f;
      }
      const auto run = [&](Backend& backend, double* loss_sum, double* forward_only) {
        BufferPtr dz = put(backend, z), dt = put(backend, t), grad = backend.allocate(z.size());
        *loss_sum = backend.target_loss(loss, dz.get(), dt.get(), rows, cols, 0.7f, grad.get()).loss_sum;
        *forward_only = backend.target_loss(loss, dz.get(), dt.get(), rows, cols, 0.7f, nullptr).loss_sum;
        return get(backend, grad.get(), z.size());
      };
      double gpu_sum = 0, gpu_forward = 0, cpu_sum = 0, cpu_forward = 0;
      const std::vector<float> gpu_grad = run(*gpu_, &gpu_sum, &gpu_forward), cpu_grad = run(*cpu_, &cpu_sum, &cpu_forward);
      const std::string what = std::string("target_loss ") + loss_name(loss) + " K=" + std::to_string(cols);
      EXPECT_TRUE(std::isfinite(gpu_sum)) << what;
      EXPECT_NEAR(gpu_sum, cpu_sum, 1e-9 * (1 + std::fabs(cpu_sum))) << what;
      EXPECT_EQ(gpu_forward, gpu_sum) << what << " (without the gradient)";
      expect_within(gpu_grad, cpu_grad, 2.5e-7, what + " gradient");
    }
  }
}

// A model of each loss of float targets: the same summed loss and parameter gradients on both
// backends (the targets uploaded as the trainer does).
TEST_F(CudaMlpTest, TargetLossModelGradientsMatchTheCpu) {
  const int in = 20, outputs = 4, batch = 33;
  for (const Loss loss : {Loss::kMse, Loss::kHuber, Loss::kBce}) {
    const std::string what = std::string("--loss ") + loss_name(loss);
    const auto network = [&] {
      return Network("dense 32, tanh, dense 4", {static_cast<size_t>(in)}, outputs, "the test's targets");
    };
    Model gpu_model(network(), batch, false, *gpu_), cpu_model(network(), batch, false, *cpu_);
    gpu_model.set_loss(loss, 0.5f);
    cpu_model.set_loss(loss, 0.5f);
    const Layout& layout = cpu_model.layout();
    const size_t n = layout.total();
    std::vector<float> params(n);
    cpu_model.init(7, params.data());
    const auto x = random_floats(static_cast<size_t>(batch) * in, 81);
    auto t = random_floats(static_cast<size_t>(batch) * outputs, 82, -2, 2);
    if (loss == Loss::kBce) {
      for (float& v : t) v = v > 0 ? 1.0f : 0.0f;
    }
    const auto run = [&](Backend& backend, Model& model, std::vector<float>& grad) {
      BufferPtr dp = put(backend, params), dx = put(backend, x), dt = put(backend, t), dg = backend.allocate(n);
      const BatchStats stats = model.train_step_targets(dp.get(), dx.get(), dt.get(), batch, dg.get());
      grad = get(backend, dg.get(), n);
      return stats;
    };
    std::vector<float> gpu_grad, cpu_grad;
    const BatchStats g = run(*gpu_, gpu_model, gpu_grad), c = run(*cpu_, cpu_model, cpu_grad);
    EXPECT_NEAR(g.loss_sum, c.loss_sum, 1e-5 * c.loss_sum) << what;
    expect_tensors_close(gpu_grad, cpu_grad, layout, 1e-4, what + " gradient");
  }
}

// A CTR-shaped model of `spec` over records of `cols` floats: the same loss, parameter gradients
// and input gradient (what goes back to the embedding tables) on both backends.
void expect_ctr_model_matches(Backend& gpu, Backend& cpu, const char* spec, size_t cols, uint64_t seed) {
  const int batch = 40;
  Model gpu_model(spec, {cols}, 2, batch, false, gpu), cpu_model(spec, {cols}, 2, batch, false, cpu);
  const size_t n = cpu_model.layout().total();
  std::vector<float> params(n);
  cpu_model.init(9, params.data());
  const auto x = random_floats(batch * cols, seed, -0.5f, 0.5f);
  const auto y = random_labels(static_cast<size_t>(batch), 2, seed + 1);
  const auto run = [&](Backend& backend, Model& model, std::vector<float>& grad,
                       std::vector<float>& input_grad) {
    BufferPtr dp = put(backend, params), dx = put(backend, x), dg = backend.allocate(n),
              di = backend.allocate(x.size());
    const BatchStats stats =
        model.train_step(dp.get(), dx.get(), y.data(), batch, dg.get(), nullptr, false, {}, di.get());
    grad = get(backend, dg.get(), n);
    input_grad = get(backend, di.get(), x.size());
    return stats;
  };
  std::vector<float> gpu_grad, cpu_grad, gpu_input, cpu_input;
  const BatchStats g = run(gpu, gpu_model, gpu_grad, gpu_input), c = run(cpu, cpu_model, cpu_grad, cpu_input);
  EXPECT_NEAR(g.loss_sum, c.loss_sum, 1e-5 * c.loss_sum) << spec;
  EXPECT_EQ(g.correct, c.correct) << spec;
  expect_tensors_close(gpu_grad, cpu_grad, cpu_model.layout(), 1e-4, std::string(spec) + " gradient");
  double scale = 0;
  for (const float v : cpu_input) scale = std::max(scale, std::fabs(double{v}));
  expect_within(gpu_input, cpu_input, 1e-4 * scale, std::string(spec) + " input gradient");
}

// A CTR-shaped model starting with the dot layer.
TEST_F(CudaMlpTest, DotInteractionModelGradientsMatchTheCpu) {
  expect_ctr_model_matches(*gpu_, *cpu_, "dot 26 16, dense 32, relu, dense 2", 13 + 26 * 16, 67);
}

// copy_columns (a bottom block's split and join): exact copies on both backends, into the middle
// of a wider matrix (the columns around left as they were), from the middle of one, and none.
TEST_F(CudaBackendTest, CopyColumnsMatchesCpuExactly) {
  const int rows = 300, src_cols = 37, dst_cols = 50;
  const auto src = random_floats(static_cast<size_t>(rows) * src_cols, 71, -3.0f, 3.0f);
  const auto dst = random_floats(static_cast<size_t>(rows) * dst_cols, 72, -3.0f, 3.0f);
  const auto run = [&](Backend& backend) {
    BufferPtr ds = put(backend, src), dd = put(backend, dst);
    backend.copy_columns(ds.get(), rows, src_cols, 5, 13, dd.get(), dst_cols, 30);
    backend.copy_columns(ds.get(), rows, src_cols, 0, 0, dd.get(), dst_cols, 0);
    backend.copy_columns(ds.get(), 0, src_cols, 0, 4, dd.get(), dst_cols, 0);
    return get(backend, dd.get(), dst.size());
  };
  const std::vector<float> g = run(*gpu_), c = run(*cpu_);
  EXPECT_EQ(g, c);
  EXPECT_EQ(c[7 * dst_cols + 30 + 2], src[7 * src_cols + 5 + 2]);
  EXPECT_EQ(c[7 * dst_cols + 29], dst[7 * dst_cols + 29]);
}

// A DLRM-shaped model (a bottom MLP over the 13 dense features, the dot interaction over its
// output and the 26 rows): gradients and the input's gradient on the GPU against the CPU's.
TEST_F(CudaMlpTest, BottomBlockModelGradientsMatchTheCpu) {
  expect_ctr_model_matches(*gpu_, *cpu_, "bottom 13(dense 16, relu, dense 8), dot 27 8, dense 32, relu, dense 2",
                           13 + 26 * 8, 73);
}

// Batch normalisation's four ops on both backends, after a conv (inner H x W) and after a dense
// layer (inner 1), 700 values per channel (more than a block's threads): the sums in double (the
// GPU's by a tree) agree to 1e-12 relative; the element-wise passes are rounded alike (no fused
// multiply-add on the GPU), within a few float ulps.
TEST_F(CudaBackendTest, BatchNormMatchesCpu) {
  for (const auto& shape : {std::tuple{28, 5, 25}, std::tuple{700, 9, 1}}) {
    const int outer = std::get<0>(shape), channels = std::get<1>(shape), inner = std::get<2>(shape);
    const size_t n = static_cast<size_t>(outer) * channels * inner, c = static_cast<size_t>(channels);
    const auto x = random_floats(n, 71, -1.0f, 3.0f), dy = random_floats(n, 72);
    const auto gamma = random_floats(c, 73), beta = random_floats(c, 74);
    std::vector<float> stats(4 * c);
    for (size_t i = 0; i < c; ++i) {
      stats[i] = 1.0f + 0.01f * static_cast<float>(i);                 // mean
      stats[c + i] = 0.8f + 0.02f * static_cast<float>(i);             // invstd
      stats[2 * c + i] = 0.03f * static_cast<float>(i);                // dy's mean
      stats[3 * c + i] = -0.05f + 0.01f * static_cast<float>(i);       // (dy xhat)'s mean
    }
    std::vector<double> sums[2][2];
    std::vector<float> out[2];
    int b = 0;
    for (Backend* backend : {gpu_.get(), cpu_.get()}) {
      BufferPtr dx = put(*backend, x), ddy = put(*backend, dy), dg = put(*backend, gamma), db = put(*backend, beta),
                ds = put(*backend, stats), y = backend->allocate(n), grad = backend->allocate(n);
      sums[b][0].assign(2 * c, 0.0);
      sums[b][1].assign(2 * c, 0.0);
      backend->batch_norm_sums(dx.get(), outer, channels, inner, sums[b][0].data());
      backend->batch_norm_backward_sums(dx.get(), ddy.get(), outer, channels, inner, ds.get(), sums[b][1].data());
      backend->batch_norm_apply(dx.get(), outer, channels, inner, ds.get(), dg.get(), db.get(), y.get());
      backend->batch_norm_backward_apply(dx.get(), ddy.get(), outer, channels, inner, ds.get(), dg.get(), grad.get());
      out[b] = get(*backend, y.get(), n);
      const std::vector<float> g = get(*backend, grad.get(), n);
      out[b].insert(out[b].end(), g.begin(), g.end());
      ++b;
    }
    const std::string what = std::to_string(channels) + " channels of " + std::to_string(outer) + " x " +
                             std::to_string(inner);
    for (int k = 0; k < 2; ++k) {
      for (size_t i = 0; i < 2 * c; ++i) {
        EXPECT_NEAR(sums[0][k][i], sums[1][k][i], 1e-12 * (1 + std::fabs(sums[1][k][i]))) << what << " sums " << k;
      }
    }
    expect_within(out[0], out[1], 1e-6, "batch norm, " + what);
  }
}

// A CNN with batch norm after a conv and after a dense layer: the gradients, the running
// statistics after two steps, and evaluation's logits (from them) on the GPU against the CPU.
TEST_F(CudaMlpTest, BatchNormModelMatchesTheCpu) {
  const char* const spec = "conv 6 3 pad=1, batchnorm, relu, maxpool 2, flatten, dense 16, bn, relu, dense 5";
  const std::vector<size_t> shape = {3, 12, 12};
  const int batch = 10, classes = 5;
  Model gpu_model(spec, shape, classes, batch, false, *gpu_), cpu_model(spec, shape, classes, batch, false, *cpu_);
  const Layout& layout = cpu_model.layout();
  const size_t n = layout.total();
  std::vector<float> params(n);
  cpu_model.init(8, params.data());
  const auto x = random_floats(static_cast<size_t>(batch) * 3 * 12 * 12, 75, -1.0f, 2.0f);
  const auto y = random_labels(static_cast<size_t>(batch), classes, 76);
  const auto run = [&](Backend& backend, Model& model, std::vector<float>& grad, std::vector<float>& logits) {
    BufferPtr dp = put(backend, params), dx = put(backend, x), dg = backend.allocate(n);
    model.train_step(dp.get(), dx.get(), y.data(), batch, dg.get());
    const BatchStats stats = model.train_step(dp.get(), dx.get(), y.data(), batch, dg.get());
    grad = get(backend, dg.get(), n);
    logits = get(backend, model.logits(dp.get(), dx.get(), batch), static_cast<size_t>(batch) * classes);
    return stats;
  };
  std::vector<float> gpu_grad, cpu_grad, gpu_logits, cpu_logits;
  const BatchStats g = run(*gpu_, gpu_model, gpu_grad, gpu_logits), c = run(*cpu_, cpu_model, cpu_grad, cpu_logits);
  EXPECT_NEAR(g.loss_sum, c.loss_sum, 1e-5 * c.loss_sum);
  // The biases of the conv and dense layers that feed a batchnorm shift what the batch's mean
  // removes again: their gradient is 0, and each backend's is rounding of about 1e-7 of the
  // others' (6 of 6 "out of tolerance" against their own scale on an H200). They are checked to
  // be ~0 on both; every other tensor against the CPU.
  double largest = 0;
  for (float v : cpu_grad) largest = std::max(largest, std::fabs(double{v}));
  Layout compared;
  for (const TensorSpec& t : layout.tensors()) {
    if (t.name != "layer0.bias" && t.name != "layer2.bias") {
      compared.add(t.name, t.shape);
      continue;
    }
    for (size_t i = t.offset; i < t.offset + t.size; ++i) {
      EXPECT_LE(std::fabs(gpu_grad[i]), 1e-5 * largest) << t.name << "[" << i - t.offset << "] on the GPU";
      EXPECT_LE(std::fabs(cpu_grad[i]), 1e-5 * largest) << t.name << "[" << i - t.offset << "] on the CPU";
    }
  }
  std::vector<float> gpu_compared, cpu_compared;
  for (const TensorSpec& t : layout.tensors()) {
    if (t.name == "layer0.bias" || t.name == "layer2.bias") continue;
    gpu_compared.insert(gpu_compared.end(), gpu_grad.begin() + t.offset, gpu_grad.begin() + t.offset + t.size);
    cpu_compared.insert(cpu_compared.end(), cpu_grad.begin() + t.offset, cpu_grad.begin() + t.offset + t.size);
  }
  expect_tensors_close(gpu_compared, cpu_compared, compared, 1e-4, "batch-norm CNN gradient (less the zero biases)");
  expect_tensors_close(gpu_model.state(), cpu_model.state(), cpu_model.network().state_layout(), 1e-5,
                       "running statistics");
  expect_within(gpu_logits, cpu_logits, 1e-4, "evaluation logits (running statistics)");
}

TEST_F(CudaBackendTest, BatchedGemmMatchesCpu) {
  const int m = 17, n = 33, k = 29, count = 6;
  const auto a = random_floats(static_cast<size_t>(m) * k, 28);  // shared by all (stride 0)
  const auto b = random_floats(static_cast<size_t>(k) * n * count, 29);
  for (const bool trans_a : {false, true}) {
    const auto run = [&](Backend& backend) {
      BufferPtr da = put(backend, a), dbm = put(backend, b), dc = backend.allocate(static_cast<size_t>(m) * n * count);
      backend.gemm_batched(trans_a, false, m, n, k, 1.0f, da.get(), 0, dbm.get(), static_cast<size_t>(k) * n, 0.0f,
                           dc.get(), static_cast<size_t>(m) * n, count);
      return get(backend, dc.get(), static_cast<size_t>(m) * n * count);
    };
    expect_within(run(*gpu_), run(*cpu_), 1e-4, std::string("gemm_batched") + (trans_a ? " A^T" : ""));
  }
}

// gemm_sum (a convolution's weight gradient): on the GPU the products go through batches of a
// strided-batched GEMM and one ordered sum each; the same sums as the CPU's loop of GEMMs. Three
// batches of terms; the GEMM-per-term fallback for a product too large for two; beta 0 ignores C
// (NaN there), beta 1 adds to it.
TEST_F(CudaBackendTest, GemmSumMatchesCpu) {
  struct Shape {
    int m, n, k, count;
    bool trans_a, trans_b;
  };
  for (const Shape& s : {Shape{32, 200, 50, 400, false, true}, Shape{32, 200, 50, 400, true, false},
                         Shape{1024, 600, 4, 3, false, true}, Shape{5, 7, 3, 1, false, true}}) {
    const size_t product = static_cast<size_t>(s.m) * s.n;
    const auto a = random_floats(static_cast<size_t>(s.m) * s.k * s.count, 40);
    const auto b = random_floats(static_cast<size_t>(s.k) * s.n * s.count, 41);
    for (const float beta : {0.0f, 1.0f}) {
      std::vector<float> c0 = random_floats(product, 42);
      if (beta == 0.0f) std::fill(c0.begin(), c0.end(), std::numeric_limits<float>::quiet_NaN());
      const auto run = [&](Backend& backend) {
        BufferPtr da = put(backend, a), db = put(backend, b), dc = put(backend, c0);
        backend.gemm_sum(s.trans_a, s.trans_b, s.m, s.n, s.k, 0.5f, da.get(), static_cast<size_t>(s.m) * s.k, db.get(),
                         static_cast<size_t>(s.k) * s.n, beta, dc.get(), s.count);
        return get(backend, dc.get(), product);
      };
      const auto expected = run(*cpu_);
      double scale = 0;
      for (const float v : expected) scale = std::max(scale, std::fabs(double{v}));
      ASSERT_TRUE(std::isfinite(scale)) << "the CPU's sum is not finite";
      std::ostringstream what;
      what << "gemm_sum " << s.m << "x" << s.n << "x" << s.k << " x" << s.count << (s.trans_a ? " A^T" : "")
           << (s.trans_b ? " B^T" : "") << " beta " << beta;
      expect_within(run(*gpu_), expected, 1e-5 * scale, what.str());
    }
  }
}

// A model of `spec` over 3x16x16 images: the same loss, accuracy and gradients (dropout's masks
// included) on the GPU without --recompute and on the CPU with it.
void expect_image_model_matches(Backend& gpu, Backend& cpu, const char* spec, uint32_t seed, uint64_t first_record,
                                const std::string& what) {
  const std::vector<size_t> shape = {3, 16, 16};
  const int batch = 12, classes = 5;
  Model gpu_model(spec, shape, classes, batch, false, gpu), cpu_model(spec, shape, classes, batch, true, cpu);
  const Layout& layout = cpu_model.layout();
  const size_t n = layout.total();
  std::vector<float> params(n);
  cpu_model.init(8, params.data());
  const auto x = random_floats(static_cast<size_t>(batch) * 3 * 16 * 16, seed);
  const auto y = random_labels(static_cast<size_t>(batch), classes, seed + 1);
  std::vector<uint64_t> records(batch);
  for (int i = 0; i < batch; ++i) records[i] = first_record + static_cast<uint64_t>(i);
  const auto run = [&](Backend& backend, Model& model, std::vector<float>& grad) {
    BufferPtr dp = put(backend, params), dx = put(backend, x), dg = backend.allocate(n);
    const BatchStats stats = model.train_step(dp.get(), dx.get(), y.data(), batch, dg.get(), nullptr, false,
                                              DropoutKeys{5, 6, records.data()});
    grad = get(backend, dg.get(), n);
    return stats;
  };
  std::vector<float> gpu_grad, cpu_grad;
  const BatchStats g = run(gpu, gpu_model, gpu_grad), c = run(cpu, cpu_model, cpu_grad);
  EXPECT_NEAR(g.loss_sum, c.loss_sum, 1e-5 * c.loss_sum) << what;
  EXPECT_EQ(g.correct, c.correct) << what;
  expect_tensors_close(gpu_grad, cpu_grad, layout, 1e-4, what + " (the CPU with --recompute)");
}

// A model of every layer kind: the same gradients on both backends (dropout's masks included).
TEST_F(CudaMlpTest, ConvolutionalModelGradientsMatchTheCpu) {
  expect_image_model_matches(*gpu_, *cpu_,
                             "conv 6 3 pad=1, relu, maxpool 2, conv 8 3 stride=2, tanh, avgpool 2 stride=1, "
                             "flatten, dense 16, relu, dropout 0.3, dense 5",
                             30, 1000, "gradient");
}

// Backend::add (a residual block's sum) is one rounding on either side: equal bit for bit, also
// in place over either operand.
TEST_F(CudaBackendTest, AddMatchesCpuExactly) {
  const size_t n = 70001;
  const auto a = random_floats(n, 61, -3.0f, 3.0f), b = random_floats(n, 62, -3.0f, 3.0f);
  const auto run = [&](Backend& backend) {
    BufferPtr da = put(backend, a), db = put(backend, b), dy = backend.allocate(n);
    backend.add(da.get(), db.get(), dy.get(), n);
    backend.add(da.get(), db.get(), da.get(), n);  // y = a
    backend.add(dy.get(), db.get(), db.get(), n);  // y = b
    std::vector<float> out = get(backend, dy.get(), n), in_a = get(backend, da.get(), n),
                       in_b = get(backend, db.get(), n);
    out.insert(out.end(), in_a.begin(), in_a.end());
    out.insert(out.end(), in_b.begin(), in_b.end());
    return out;
  };
  EXPECT_EQ(run(*gpu_), run(*cpu_));
}

// A ResNet's gradients on the GPU against the CPU's: an identity block, a projected one (1x1
// convolution of stride 2, more channels) with dropout inside, and a flat block with a dense
// projection.
TEST_F(CudaMlpTest, ResidualModelGradientsMatchTheCpu) {
  expect_image_model_matches(*gpu_, *cpu_,
                             "conv 6 3 pad=1, relu, residual(conv 6 3 pad=1, relu, conv 6 3 pad=1), relu, "
                             "residual(conv 8 3 stride=2 pad=1, relu, dropout 0.3, conv 8 3 pad=1), relu, "
                             "globalavgpool, residual(dense 12, tanh), dense 5",
                             40, 2000, "ResNet gradient");
}

// A learnable task: labels are the arg-max of a fixed random linear map of the input.
struct SgdData {
  std::vector<std::vector<float>> x;
  std::vector<std::vector<int32_t>> y;
};

SgdData make_sgd_data(int steps, int batch, int in, int classes) {
  const auto teacher = random_floats(static_cast<size_t>(in) * classes, 15);
  SgdData data;
  for (int s = 0; s < steps; ++s) {
    data.x.push_back(random_floats(static_cast<size_t>(batch) * in, 100 + s));
    std::vector<int32_t> y(static_cast<size_t>(batch));
    for (int b = 0; b < batch; ++b) {
      std::vector<double> score(static_cast<size_t>(classes), 0.0);
      for (int i = 0; i < in; ++i) {
        for (int c = 0; c < classes; ++c) score[c] += data.x[s][b * in + i] * teacher[i * classes + c];
      }
      y[b] = static_cast<int32_t>(std::max_element(score.begin(), score.end()) - score.begin());
    }
    data.y.push_back(y);
  }
  return data;
}

struct SgdRun {
  std::vector<float> params;
  std::vector<double> losses;
};

// SGD on the mean gradient, applied on the host: download the gradient (into `staging`), update,
// upload the parameters, as a worker does around the parameter server.
SgdRun train_sgd(Backend& backend, const SgdData& data, const std::vector<float>& init, float* staging,
                 int in, const std::vector<int>& hidden, int classes, float lr) {
  const int batch = static_cast<int>(data.y[0].size());
  Model model(in, hidden, classes, batch, backend);
  const size_t n = model.layout().total();
  SgdRun run{init, {}};
  BufferPtr params = put(backend, init), grad = backend.allocate(n), x = backend.allocate(data.x[0].size());
  for (size_t s = 0; s < data.x.size(); ++s) {
    backend.upload(x.get(), data.x[s].data(), data.x[s].size());
    run.losses.push_back(
        model.train_step(params.get(), x.get(), data.y[s].data(), batch, grad.get()).loss_sum / batch);
    backend.download(staging, grad.get(), n);
    for (size_t i = 0; i < n; ++i) run.params[i] -= lr / static_cast<float>(batch) * staging[i];
    backend.upload(params.get(), run.params.data(), n);
  }
  return run;
}

TEST_F(CudaMlpTest, TwentySgdStepsMatchTheCpu) {
  const int steps = 20, batch = 64, in = 32, classes = 10;
  const std::vector<int> hidden = {64, 48};
  const float lr = 0.5f;
  const SgdData data = make_sgd_data(steps, batch, in, classes);
  Model shape(in, hidden, classes, 1, *cpu_);
  const size_t n = shape.layout().total();
  std::vector<float> init(n);
  shape.init(21, init.data());

  std::vector<float> cpu_staging(n);
#ifdef PSTRAIN_HAVE_CUDA
  PinnedBuffer gpu_staging(n);
  float* staging = gpu_staging.data();
#else
  std::vector<float> gpu_staging(n);
  float* staging = gpu_staging.data();
#endif
  const SgdRun gpu = train_sgd(*gpu_, data, init, staging, in, hidden, classes, lr);
  const SgdRun cpu = train_sgd(*cpu_, data, init, cpu_staging.data(), in, hidden, classes, lr);

  expect_tensors_close(gpu.params, cpu.params, shape.layout(), 1e-4, "parameters after 20 steps");
  for (int s = 0; s < steps; ++s)
    EXPECT_NEAR(gpu.losses[s], cpu.losses[s], 1e-4 * cpu.losses[s]) << "step " << s;
  // Not vacuous: the model learned, and the parameters moved well beyond the tolerance.
  EXPECT_LT(cpu.losses.back(), 0.8 * cpu.losses.front());
  double moved = 0;
  for (size_t i = 0; i < n; ++i) moved = std::max(moved, std::fabs(double{cpu.params[i]} - init[i]));
  EXPECT_GT(moved, 1e-2);
}

// 20 SGD steps of a CNN (every layer kind but dropout; batches large enough that a convolution's
// weight gradient runs gemm_sum's batched products on the GPU) on the GPU and on the CPU, the
// update on the host as around the PS: the parameters agree within 1e-4 per tensor, and the
// model learned (its loss fell, the parameters moved well past the tolerance).
TEST_F(CudaMlpTest, TwentySgdStepsOfACnnMatchTheCpu) {
  const char* const spec =
      "conv 6 3 pad=1, relu, maxpool 2, conv 8 3 stride=2, tanh, avgpool 2 stride=1, flatten, dense 16, relu, dense 5";
  const std::vector<size_t> shape = {3, 16, 16};
  const int steps = 20, batch = 48, classes = 5, in = 3 * 16 * 16;
  const float lr = 0.05f;
  const SgdData data = make_sgd_data(steps, batch, in, classes);
  const auto train = [&](Backend& backend, const std::vector<float>& init, std::vector<double>* losses) {
    Model model(spec, shape, classes, batch, false, backend);
    const size_t n = model.layout().total();
    std::vector<float> params = init, staging(n);
    BufferPtr dp = put(backend, params), dg = backend.allocate(n), dx = backend.allocate(data.x[0].size());
    for (int s = 0; s < steps; ++s) {
      backend.upload(dx.get(), data.x[s].data(), data.x[s].size());
      const BatchStats stats = model.train_step(dp.get(), dx.get(), data.y[s].data(), batch, dg.get());
      losses->push_back(stats.loss_sum / batch);
      backend.download(staging.data(), dg.get(), n);
      for (size_t i = 0; i < n; ++i) params[i] -= lr / static_cast<float>(batch) * staging[i];
      backend.upload(dp.get(), params.data(), n);
    }
    return params;
  };
  Model reference(spec, shape, classes, 1, false, *cpu_);
  std::vector<float> init(reference.layout().total());
  reference.init(22, init.data());
  std::vector<double> gpu_losses, cpu_losses;
  const std::vector<float> gpu = train(*gpu_, init, &gpu_losses), cpu = train(*cpu_, init, &cpu_losses);
  expect_tensors_close(gpu, cpu, reference.layout(), 1e-4, "CNN parameters after 20 steps");
  for (int s = 0; s < steps; ++s) EXPECT_NEAR(gpu_losses[s], cpu_losses[s], 1e-4 * cpu_losses[s]) << "step " << s;
  EXPECT_LT(cpu_losses.back(), cpu_losses.front());
  double moved = 0;
  for (size_t i = 0; i < init.size(); ++i) moved = std::max(moved, std::fabs(double{cpu[i]} - init[i]));
  EXPECT_GT(moved, 1e-2);
}

// ---- memory ----

TEST_F(CudaBackendTest, BytesAllocatedIsTheSumOfRequestsPlusScratch) {
  const size_t base = gpu_->bytes_allocated();  // the cuBLAS workspace and gemm_sum's 4 MiB, nothing else
  EXPECT_LE(base, 36 * kMiB);
  size_t requested = 0;
  std::vector<BufferPtr> buffers;
  for (const size_t n : {size_t{1}, size_t{3}, size_t{1000}, size_t{12345}, size_t{1} << 20, size_t{7}}) {
    buffers.push_back(gpu_->allocate(n));
    requested += n * sizeof(float);
    EXPECT_EQ(gpu_->bytes_allocated(), base + requested) << "after allocating " << n << " floats";
  }
  BufferPtr empty = gpu_->allocate(0);
  EXPECT_EQ(gpu_->bytes_allocated(), base + requested);
  buffers[2].reset();
  requested -= 1000 * sizeof(float);
  EXPECT_EQ(gpu_->bytes_allocated(), base + requested);

  // softmax_xent's scratch: allocated once for the largest batch, a few bytes per row.
  const int rows = 100, cols = 10;
  BufferPtr logits = put(*gpu_, random_floats(rows * cols, 16));
  requested += rows * cols * sizeof(float);
  const auto labels = random_labels(rows, cols, 17);
  gpu_->softmax_xent(logits.get(), labels.data(), rows, cols, nullptr, 0.0f);
  const size_t scratch = gpu_->bytes_allocated() - base - requested;
  EXPECT_GT(scratch, 0u);
  EXPECT_LE(scratch, size_t{64} * rows + 256);
  gpu_->softmax_xent(logits.get(), labels.data(), rows, cols, nullptr, 0.0f);
  gpu_->softmax_xent(logits.get(), labels.data(), rows / 2, cols, nullptr, 0.0f);
  EXPECT_EQ(gpu_->bytes_allocated(), base + requested + scratch);

  buffers.clear();
  logits.reset();
  EXPECT_EQ(gpu_->bytes_allocated(), base + scratch);

  // A buffer may outlive its backend.
  auto other = make_cuda_backend(kDevice, 0);
  BufferPtr orphan = other->allocate(1000);
  other.reset();
  orphan.reset();
}

// reserve_batch() takes the scratch up front (the trainer counts it in the plan): batches up to
// that size then allocate nothing more.
TEST_F(CudaBackendTest, ReservedBatchScratchCoversLaterBatches) {
  const int rows = 300, cols = 10;
  const auto labels = random_labels(rows, cols, 19);
  auto fresh = make_cuda_backend(kDevice, 0);
  BufferPtr logits_there = put(*fresh, random_floats(rows * cols, 18));
  const size_t before = fresh->bytes_allocated();
  fresh->reserve_batch(rows);
  const size_t reserved = fresh->bytes_allocated();
  EXPECT_GT(reserved, before);
  fresh->softmax_xent(logits_there.get(), labels.data(), rows, cols, nullptr, 0.0f);
  fresh->softmax_xent(logits_there.get(), labels.data(), rows / 3, cols, nullptr, 0.0f);
  EXPECT_EQ(fresh->bytes_allocated(), reserved);
}

// What the device reports as used grows by what the backend counts (cudaMalloc rounds each
// allocation up to its page size: the 16 MiB slack).
TEST_F(CudaBackendTest, DeviceMemoryUseMatchesBytesAllocated) {
#ifndef PSTRAIN_HAVE_CUDA
  GTEST_SKIP() << "gpu_memory() needs the CUDA build";
#else
  const int batch = 2048, in = 784, classes = 10;
  const GpuMemory before = gpu_memory(kDevice);
  const size_t counted_before = gpu_->bytes_allocated();
  Model model(in, {2048, 2048}, classes, batch, *gpu_);
  const size_t n = model.layout().total();
  BufferPtr params = gpu_->allocate(n), grad = gpu_->allocate(n),
            x = gpu_->allocate(static_cast<size_t>(batch) * in);
  const GpuMemory after = gpu_memory(kDevice);
  const size_t counted = gpu_->bytes_allocated() - counted_before;
  EXPECT_EQ(counted, (model.network().activation_floats(batch, false, *gpu_) + 2 * n +
                      static_cast<size_t>(batch) * in) *
                         sizeof(float));
  const double used = static_cast<double>(before.free_bytes) - static_cast<double>(after.free_bytes);
  EXPECT_LE(std::fabs(used - static_cast<double>(counted)), 0.1 * static_cast<double>(counted) + 16.0 * kMiB)
      << "device used " << used << " bytes for " << counted << " counted";
  std::printf("device memory: %.2f MiB counted by the backend, %.2f MiB measured by cudaMemGetInfo\n",
              static_cast<double>(counted) / kMiB, used / kMiB);
#endif
}

TEST_F(CudaBackendTest, MemoryLimitRefusesAndNamesTheLimit) {
  const size_t limit = 64 * kMiB;
  auto limited = make_cuda_backend(kDevice, limit);
  const size_t base = limited->bytes_allocated();
  ASSERT_LT(base, limit);
  const int rows = 8, cols = 4;
  BufferPtr logits = put(*limited, random_floats(rows * cols, 18));
  const size_t room = (limit - limited->bytes_allocated()) / sizeof(float);
  BufferPtr fill = limited->allocate(room);  // exactly up to the limit is allowed
  const size_t held = limited->bytes_allocated();
  EXPECT_LE(held, limit);
  EXPECT_LT(limit - held, sizeof(float));

  try {
    limited->allocate(1);
    ADD_FAILURE() << "an allocation past the limit was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--gpu-memory-limit " + std::to_string(limit) + " bytes"), std::string::npos) << message;
    EXPECT_NE(message.find("4 bytes"), std::string::npos) << message;
  }
  EXPECT_EQ(limited->bytes_allocated(), held);
  // The backend's own scratch is under the same limit.
  const auto labels = random_labels(rows, cols, 19);
  EXPECT_THROW(limited->softmax_xent(logits.get(), labels.data(), rows, cols, nullptr, 0.0f), Error);
  EXPECT_EQ(limited->bytes_allocated(), held);

  fill.reset();
  EXPECT_TRUE(
      std::isfinite(limited->softmax_xent(logits.get(), labels.data(), rows, cols, nullptr, 0.0f).loss_sum));
  BufferPtr again = limited->allocate(1000);
  EXPECT_NE(again.get(), nullptr);
  // A limit below the backend's fixed needs (the cuBLAS workspace) is refused up front.
  EXPECT_THROW(make_cuda_backend(kDevice, 4096), Error);
}

// More than the device has: a pstrain::Error, and the backend goes on working (the failed
// cudaMalloc must not resurface as the next launch's error).
TEST_F(CudaBackendTest, OutOfMemoryIsAnErrorAndRecoverable) {
  EXPECT_THROW(gpu_->allocate(size_t{1} << 42), Error);  // 16 TiB
  const auto logits = random_floats(6 * 3, 20);
  const std::vector<int32_t> labels = {0, 1, 2, 0, 1, 2};
  expect_xent_matches(run_xent(*gpu_, logits, labels, 3), run_xent(*cpu_, logits, labels, 3), "after OOM");
}

TEST_F(CudaBackendTest, TwoBackendsOnOneDeviceCoexist) {
  auto second = make_cuda_backend(kDevice, 0);
  EXPECT_EQ(second->name(), gpu_->name());
  const size_t base_a = gpu_->bytes_allocated(), base_b = second->bytes_allocated();
  const int m = 65, n = 33, k = 97;
  const auto a = random_floats(static_cast<size_t>(m) * k, 21),
             b = random_floats(static_cast<size_t>(k) * n, 22);
  // Interleaved: both backends' buffers and work in flight at once.
  BufferPtr a1 = put(*gpu_, a), a2 = put(*second, a), b1 = put(*gpu_, b), b2 = put(*second, b);
  BufferPtr c1 = gpu_->allocate(static_cast<size_t>(m) * n),
            c2 = second->allocate(static_cast<size_t>(m) * n);
  const size_t each = (a.size() + b.size() + static_cast<size_t>(m) * n) * sizeof(float);
  EXPECT_EQ(gpu_->bytes_allocated() - base_a, each);
  EXPECT_EQ(second->bytes_allocated() - base_b, each);
  gpu_->gemm(false, false, m, n, k, 1.0f, a1.get(), b1.get(), 0.0f, c1.get());
  second->gemm(false, false, m, n, k, 1.0f, a2.get(), b2.get(), 0.0f, c2.get());
  BufferPtr ca = put(*cpu_, a), cb = put(*cpu_, b), cc = cpu_->allocate(static_cast<size_t>(m) * n);
  cpu_->gemm(false, false, m, n, k, 1.0f, ca.get(), cb.get(), 0.0f, cc.get());
  const std::vector<float> reference = get(*cpu_, cc.get(), static_cast<size_t>(m) * n);
  const double bound = (k + 2) * double{FLT_EPSILON} * k;  // |a|, |b| <= 1
  expect_within(get(*gpu_, c1.get(), reference.size()), reference, bound, "first backend");
  expect_within(get(*second, c2.get(), reference.size()), reference, bound, "second backend");

  // Each keeps its own count; one going away leaves the other working.
  a2.reset();
  b2.reset();
  c2.reset();
  EXPECT_EQ(second->bytes_allocated(), base_b);
  second.reset();
  gpu_->gemm(false, false, m, n, k, 1.0f, a1.get(), b1.get(), 0.0f, c1.get());
  expect_within(get(*gpu_, c1.get(), reference.size()), reference, bound,
                "first backend after the second closed");
}

}  // namespace
}  // namespace pstrain
