// The batchnorm layer (worker/model/layers.cc) on the CPU backend: training's forward and backward
// against the plain definition after a conv (per channel over N x H x W) and after a dense layer
// (per feature over N), PyTorch's running statistics, evaluation with them, the same bits for any
// --threads and with --recompute, and the parser's errors. Finite differences of a whole model:
// ModelGradientTest.BatchNormMatchesFiniteDifferences (layers_test.cc); the CUDA ops against these:
// CudaBackendTest.BatchNormMatchesCpu.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "shared/util/error.h"
#include "test_util/network.h"
#include "test_util/random.h"
#include "worker/backend/backend.h"
#include "worker/model/layers.h"
#include "worker/model/model.h"

namespace pstrain {
namespace {

using test::random_floats;

// The definition in double, two passes: channel c's values x[o, c, i].
struct Moments {
  std::vector<double> mean, var;  // biased variance
};

Moments moments(const std::vector<float>& x, int outer, int channels, int inner) {
  Moments m{std::vector<double>(channels), std::vector<double>(channels)};
  const double n = static_cast<double>(outer) * inner;
  for (int c = 0; c < channels; ++c) {
    for (int o = 0; o < outer; ++o) {
      for (int i = 0; i < inner; ++i) m.mean[c] += x[(static_cast<size_t>(o) * channels + c) * inner + i] / n;
    }
    for (int o = 0; o < outer; ++o) {
      for (int i = 0; i < inner; ++i) {
        const double d = x[(static_cast<size_t>(o) * channels + c) * inner + i] - m.mean[c];
        m.var[c] += d * d / n;
      }
    }
  }
  return m;
}

struct Case {
  const char* name;
  Shape in;
  int channels, inner;
};

const Case kCases[] = {{"after a conv", Shape::image(3, 4, 5), 3, 20}, {"after a dense layer", Shape::vector(7), 7, 1}};

// The layer alone: its parameters gamma, beta and its state in host vectors.
struct Harness {
  explicit Harness(const Shape& in, const char* spec = "batchnorm", int threads = 1)
      : backend(make_cpu_backend(threads)), layer(make_layer(parse_model(spec)[0], in, 0)) {
    layer->declare(layout, 0);
    layer->declare_state(state_layout, 0);
    params.assign(layout.total(), 0.0f);
    state.assign(state_layout.total(), 0.0f);
    for (const TensorSpec& t : state_layout.tensors()) std::fill(state.begin() + t.offset, state.begin() + t.offset + t.size, t.fill);
    col.assign(layer->col_floats(1, *backend), 0.0f);
  }
  LayerContext context(bool training) {
    LayerContext ctx{*backend, col.data()};
    ctx.training = training;
    ctx.state = state.data();
    return ctx;
  }
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Layer> layer;
  Layout layout, state_layout;
  std::vector<float> params, state, col;
};

TEST(BatchNormTest, TrainingForwardAndRunningStatisticsAreThoseOfPyTorch) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.name);
    Harness h(k.in);
    ASSERT_EQ(h.layout.tensors().size(), 2u);
    EXPECT_EQ(h.layout.tensors()[0].name, "layer0.weight");
    EXPECT_EQ(h.state_layout.at("layer0.running_var").shape, std::vector<size_t>{static_cast<size_t>(k.channels)});
    const int batch = 6;
    const auto x = random_floats(static_cast<size_t>(batch) * k.channels * k.inner, 41, -1.0f, 3.0f);
    const auto gamma = random_floats(k.channels, 42), beta = random_floats(k.channels, 43);
    std::copy(gamma.begin(), gamma.end(), h.params.begin());
    std::copy(beta.begin(), beta.end(), h.params.begin() + k.channels);
    std::vector<float> y(x.size());
    LayerContext ctx = h.context(true);
    h.layer->forward(ctx, h.params.data(), x.data(), y.data(), batch);
    const Moments m = moments(x, batch, k.channels, k.inner);
    const double n = static_cast<double>(batch) * k.inner;
    for (int c = 0; c < k.channels; ++c) {
      for (int o = 0; o < batch; ++o) {
        for (int i = 0; i < k.inner; ++i) {
          const size_t at = (static_cast<size_t>(o) * k.channels + c) * k.inner + i;
          const double want = (x[at] - m.mean[c]) / std::sqrt(m.var[c] + 1e-5) * gamma[c] + beta[c];
          ASSERT_NEAR(y[at], want, 3e-6) << c << " " << o << " " << i;
        }
      }
      // PyTorch's momentum 0.1 from mean 0 and variance 1, the variance unbiased.
      EXPECT_NEAR(h.state[c], 0.1 * m.mean[c], 1e-7) << c;
      EXPECT_NEAR(h.state[k.channels + c], 0.9 + 0.1 * m.var[c] * n / (n - 1), 1e-6) << c;
    }
  }
}

TEST(BatchNormTest, EvaluationNormalisesWithTheRunningStatisticsAndLeavesThemAlone) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.name);
    Harness h(k.in, "bn momentum=0.5");
    const auto gamma = random_floats(k.channels, 52), beta = random_floats(k.channels, 53);
    std::copy(gamma.begin(), gamma.end(), h.params.begin());
    std::copy(beta.begin(), beta.end(), h.params.begin() + k.channels);
    const int batch = 4;
    const auto x = random_floats(static_cast<size_t>(batch) * k.channels * k.inner, 54, 0.0f, 2.0f);
    std::vector<float> y(x.size());
    LayerContext train = h.context(true);
    h.layer->forward(train, h.params.data(), x.data(), y.data(), batch);
    const Moments m = moments(x, batch, k.channels, k.inner);
    for (int c = 0; c < k.channels; ++c) EXPECT_NEAR(h.state[c], 0.5 * m.mean[c], 1e-7) << c;  // momentum=0.5
    const std::vector<float> running = h.state;
    LayerContext eval = h.context(false);
    h.layer->forward(eval, h.params.data(), x.data(), y.data(), batch);
    EXPECT_EQ(h.state, running);
    for (int c = 0; c < k.channels; ++c) {
      const double mean = running[c], var = running[k.channels + c];
      for (int o = 0; o < batch; ++o) {
        for (int i = 0; i < k.inner; ++i) {
          const size_t at = (static_cast<size_t>(o) * k.channels + c) * k.inner + i;
          ASSERT_NEAR(y[at], (x[at] - mean) / std::sqrt(var + 1e-5) * gamma[c] + beta[c], 3e-6) << c;
        }
      }
    }
    // A sample alone gives what it gives in the batch: nothing depends on the other samples.
    std::vector<float> alone(static_cast<size_t>(k.channels) * k.inner);
    h.layer->forward(eval, h.params.data(), x.data() + alone.size(), alone.data(), 1);
    for (size_t i = 0; i < alone.size(); ++i) EXPECT_EQ(alone[i], y[alone.size() + i]) << i;
  }
}

// The training-mode backward against its closed form in double: with xhat = (x - mean) / std,
// dx = gamma / std (dy - mean(dy) - xhat mean(dy xhat)), gamma's gradient sum(dy xhat), beta's
// sum(dy); accumulate adds to what the gradient holds.
TEST(BatchNormTest, BackwardIsItsDefinition) {
  for (const Case& k : kCases) {
    SCOPED_TRACE(k.name);
    Harness h(k.in);
    const auto gamma = random_floats(k.channels, 62, 0.5f, 1.5f);
    std::copy(gamma.begin(), gamma.end(), h.params.begin());
    const int batch = 5;
    const size_t size = static_cast<size_t>(batch) * k.channels * k.inner;
    const auto x = random_floats(size, 63, -2.0f, 2.0f), dy = random_floats(size, 64);
    std::vector<float> y(size), dx(size), grad(h.layout.total(), 0.5f);
    LayerContext ctx = h.context(true);
    h.layer->forward(ctx, h.params.data(), x.data(), y.data(), batch);
    h.layer->backward(ctx, h.params.data(), x.data(), y.data(), dy.data(), dx.data(), grad.data(), batch, true);
    const Moments m = moments(x, batch, k.channels, k.inner);
    const double n = static_cast<double>(batch) * k.inner;
    for (int c = 0; c < k.channels; ++c) {
      const double std_ = std::sqrt(m.var[c] + 1e-5);
      double dy_sum = 0, dy_xhat_sum = 0;
      for (int o = 0; o < batch; ++o) {
        for (int i = 0; i < k.inner; ++i) {
          const size_t at = (static_cast<size_t>(o) * k.channels + c) * k.inner + i;
          dy_sum += dy[at];
          dy_xhat_sum += dy[at] * (x[at] - m.mean[c]) / std_;
        }
      }
      EXPECT_NEAR(grad[c], 0.5 + dy_xhat_sum, 1e-5) << c;
      EXPECT_NEAR(grad[k.channels + c], 0.5 + dy_sum, 1e-5) << c;
      for (int o = 0; o < batch; ++o) {
        for (int i = 0; i < k.inner; ++i) {
          const size_t at = (static_cast<size_t>(o) * k.channels + c) * k.inner + i;
          const double xhat = (x[at] - m.mean[c]) / std_;
          const double want = gamma[c] / std_ * (dy[at] - dy_sum / n - xhat * dy_xhat_sum / n);
          ASSERT_NEAR(dx[at], want, 2e-5 * (1 + std::fabs(want))) << c << " " << o << " " << i;
        }
      }
    }
  }
}

// Parameters, gradients and running statistics of a few steps of a CNN with batch norm: the same
// bits on 1 and 3 threads (each channel's sums in one order) and with --recompute (the block is
// computed again in backward, the running statistics moved once).
std::vector<float> train(int threads, bool recompute, std::vector<float>* state) {
  auto backend = make_cpu_backend(threads);
  const int batch = 6;
  Model model("conv 4 3 pad=1, batchnorm, relu, maxpool 2, flatten, dense 8, bn, relu, dense 3", {2, 8, 8}, 3, batch,
              recompute, *backend);
  std::vector<float> params(model.layout().total()), grad(params.size());
  model.init(5, params.data());
  const std::vector<int32_t> y = {0, 1, 2, 2, 1, 0};
  for (int step = 0; step < 4; ++step) {
    const auto x = random_floats(static_cast<size_t>(batch) * 128, 70 + step);
    model.train_step(params.data(), x.data(), y.data(), batch, grad.data());
    for (size_t i = 0; i < params.size(); ++i) params[i] -= 0.05f * grad[i];
  }
  *state = model.state();
  return params;
}

TEST(BatchNormTest, SameBitsOnAnyThreadCountAndWithRecompute) {
  std::vector<float> state1, state3, state_recompute;
  const std::vector<float> one = train(1, false, &state1);
  EXPECT_EQ(train(3, false, &state3), one);
  EXPECT_EQ(state3, state1);
  EXPECT_EQ(train(1, true, &state_recompute), one);
  EXPECT_EQ(state_recompute, state1);
  // The running statistics moved: 4 channels and 8 features, means then variances.
  ASSERT_EQ(state1.size(), 2u * 4 + 2u * 8);
  EXPECT_NE(state1[0], 0.0f);
  EXPECT_NE(state1[4], 1.0f);
}

std::string usage_error(const std::string& spec, const std::vector<size_t>& shape = {1, 8, 8}) {
  return test::network_error(spec, shape, 10);
}

TEST(BatchNormTest, SpecsAndTheirErrors) {
  // Names, state layout and where the variables are (the p of batchnorm's own parameters).
  Network net("conv 2 3, BN, relu, flatten, dense 10, batchnorm momentum=0.01", {1, 8, 8}, 10);
  EXPECT_EQ(net.layers()[1]->kind(), LayerKind::kBatchNorm);
  std::vector<std::string> names;
  for (const TensorSpec& t : net.state_layout().tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"layer1.running_mean", "layer1.running_var", "layer3.running_mean",
                                             "layer3.running_var"}));
  EXPECT_EQ(net.layout().at("layer3.weight").size, 10u);
  const std::vector<float> initial = net.initial_state();
  EXPECT_EQ(initial[0], 0.0f);
  EXPECT_EQ(initial[2], 1.0f);
  // Inside a residual block: numbered as the block's variables (its inner layers', then the projection's).
  Network resnet("conv 2 3 pad=1, residual(conv 2 3 pad=1, bn, relu, conv 4 3 pad=1, bn), flatten, dense 10",
                 {1, 8, 8}, 10);
  names.clear();
  for (const TensorSpec& t : resnet.state_layout().tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"layer2.running_mean", "layer2.running_var", "layer4.running_mean",
                                             "layer4.running_var"}));
  EXPECT_EQ(resnet.layout().at("layer4.weight").size, 4u);  // the second bn's gamma
  // First in the list: it normalises the input itself.
  EXPECT_EQ(usage_error("batchnorm, dense 10"), "no error");
  const std::string bad_momentum = usage_error("dense 8, batchnorm momentum=2, dense 10");
  EXPECT_NE(bad_momentum.find("'2' is not a momentum in [0, 1] (PyTorch's default: 0.1)"), std::string::npos)
      << bad_momentum;
  EXPECT_NE(usage_error("dense 8, bn momentum=0.1 momentum=0.2, dense 10").find("momentum is given twice"),
            std::string::npos);
  EXPECT_NE(usage_error("dense 8, batchnorm eps=1e-3, dense 10").find("'eps' is not an option of batchnorm"),
            std::string::npos);
  EXPECT_NE(usage_error("dense 8, batchnorm 4, dense 10").find("'4': batchnorm takes 0 number(s)"), std::string::npos);
}

}  // namespace
}  // namespace pstrain
