// The layer list (worker/model/layers.h, worker/model/model.h) on the CPU backend: the parser's errors, each
// layer operation against a plain reference implementation, a model of every layer kind against
// central finite differences, and --recompute (same parameters, less memory). The CUDA backend is
// checked against these CPU operations in cuda_backend_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
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

std::string usage_error(const std::string& spec, const std::vector<size_t>& shape = {1, 8, 8}, int classes = 10) {
  return test::network_error(spec, shape, classes);
}

// --- The layer list ------------------------------------------------------------------------

TEST(LayerListTest, ParsesEveryLayerKindAndItsOptions) {
  const auto layers = parse_model(
      " conv 32 3 pad=1 stride=2, relu, maxpool 2, avgpool 3 stride=1, flatten, dense 128, tanh, dropout 0.25, "
      "Dense 10, softmax");
  ASSERT_EQ(layers.size(), 9u);  // the trailing softmax names the loss
  EXPECT_EQ(layers[0].kind, LayerKind::kConv);
  EXPECT_EQ(layers[0].args, (std::vector<double>{32, 3}));
  EXPECT_EQ(layers[0].options, (std::vector<std::pair<std::string, int>>{{"pad", 1}, {"stride", 2}}));
  EXPECT_EQ(layers[0].text, "conv 32 3 pad=1 stride=2");
  EXPECT_EQ(layers[3].kind, LayerKind::kAvgPool);
  EXPECT_EQ(layers[7].args, (std::vector<double>{0.25}));
  EXPECT_EQ(layers[8].kind, LayerKind::kDense);
  EXPECT_EQ(mlp_model({256, 128}, 10), "dense 256, relu, dense 128, relu, dense 10");
}

TEST(LayerListTest, ErrorsNameAndPointAtTheOffendingToken) {
  const std::string spec = "conv 32 3 pad=1, relu, conv 32 x, dense 10";
  const std::string e = usage_error(spec);
  EXPECT_NE(e.find("--model: 'x' is not the kernel size"), std::string::npos) << e;
  EXPECT_NE(e.find("\n  " + spec + "\n  " + std::string(spec.find(" x,") + 1, ' ') + "^"), std::string::npos) << e;
  EXPECT_NE(usage_error("dense 10, swish").find("'swish' is not a layer"), std::string::npos);
  EXPECT_NE(usage_error("dense 10, rleu").find("'rleu' is not a layer (did you mean 'relu'?) (embedding D (first only), "),
            std::string::npos)
      << usage_error("dense 10, rleu");
  EXPECT_NE(usage_error("embeding 8, dense 1").find("(did you mean 'embedding'?)"), std::string::npos)
      << usage_error("embeding 8, dense 1");
  EXPECT_NE(usage_error("dense").find("dense needs the number of outputs (e.g. dense 10)"), std::string::npos);
  EXPECT_NE(usage_error("dense 10 20").find("'20': dense takes 1 number(s)"), std::string::npos);
  EXPECT_NE(usage_error("conv 8 3 padding=1, flatten, dense 10").find("'padding' is not an option of conv"),
            std::string::npos);
  EXPECT_NE(usage_error("dense 0").find("'0' is not the number of outputs"), std::string::npos);
  EXPECT_NE(usage_error("dropout 1.5, dense 10").find("'1.5' is not a dropout rate in [0, 1)"), std::string::npos);
  EXPECT_NE(usage_error("softmax, dense 10").find("softmax (the loss) can only be the last layer"), std::string::npos);
  EXPECT_NE(usage_error(" , ").find("the layer list is empty"), std::string::npos);
  EXPECT_NE(usage_error("dense 10,, relu").find("layer 2 is empty"), std::string::npos);
}

TEST(LayerListTest, ShapesAreCheckedAgainstTheDataAndTheClasses) {
  EXPECT_NE(usage_error("dense 16, conv 4 3, flatten, dense 10")
                .find("--model: layer 2 'conv 4 3' needs an image input (channels x height x width), but gets a flat "
                      "vector of 16 values"),
            std::string::npos);
  EXPECT_NE(usage_error("conv 4 3, dense 10", {64}).find("needs an image input"), std::string::npos);
  EXPECT_NE(usage_error("maxpool 9, flatten, dense 10").find("has a window of 9 but its input is only 1x8x8"),
            std::string::npos);
  EXPECT_NE(usage_error("dense 12").find("the last layer gives 12 outputs per sample, but the data has 10 classes "
                                          "(end the list with dense 10)"),
            std::string::npos);
  EXPECT_NE(usage_error("flatten, relu").find("gives 64 outputs"), std::string::npos);
  const Network net("conv 4 3 pad=1, relu, maxpool 2, conv 6 3 stride=2, flatten, dense 10", {1, 8, 8}, 10);
  EXPECT_EQ(net.layers()[2]->out().text(), "4x4x4");
  EXPECT_EQ(net.layers()[3]->out().text(), "6x1x1");  // (4 - 3) / 2 + 1
  EXPECT_EQ(net.layout().at("layer0.weight").shape, (std::vector<size_t>{4, 1, 3, 3}));
  EXPECT_EQ(net.layout().at("layer1.weight").shape, (std::vector<size_t>{6, 4, 3, 3}));
  EXPECT_EQ(net.layout().at("layer2.weight").shape, (std::vector<size_t>{6, 10}));
  EXPECT_EQ(net.layout().at("layer2.bias").shape, (std::vector<size_t>{10}));
}

// --- Operations against plain references -----------------------------------------------------

// The direct definition of a convolution layer's output (NCHW, weight [O, C, K, K]).
std::vector<float> reference_conv(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                                  int batch, const ConvGeometry& g, int outputs) {
  std::vector<float> y(static_cast<size_t>(batch) * outputs * g.positions());
  for (int n = 0; n < batch; ++n)
    for (int o = 0; o < outputs; ++o)
      for (int oy = 0; oy < g.out_height; ++oy)
        for (int ox = 0; ox < g.out_width; ++ox) {
          double sum = b[o];
          for (int c = 0; c < g.channels; ++c)
            for (int ki = 0; ki < g.kernel; ++ki)
              for (int kj = 0; kj < g.kernel; ++kj) {
                const int iy = oy * g.stride - g.pad + ki, ix = ox * g.stride - g.pad + kj;
                if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) continue;
                sum += double{x[((static_cast<size_t>(n) * g.channels + c) * g.height + iy) * g.width + ix]} *
                       w[((static_cast<size_t>(o) * g.channels + c) * g.kernel + ki) * g.kernel + kj];
              }
          y[((static_cast<size_t>(n) * outputs + o) * g.out_height + oy) * g.out_width + ox] = static_cast<float>(sum);
        }
  return y;
}

TEST(LayerOpsTest, ConvolutionEqualsItsDefinition) {
  auto backend = make_cpu_backend(1);
  for (const auto& [stride, pad] : {std::pair{1, 1}, std::pair{2, 0}, std::pair{2, 2}, std::pair{1, 0}}) {
    const int batch = 3, channels = 2, outputs = 4, kernel = 3;
    const std::string spec = "conv " + std::to_string(outputs) + " 3 stride=" + std::to_string(stride) +
                             " pad=" + std::to_string(pad) + ", flatten";
    // A network ending in the conv's flattened output; classes = its size.
    const ConvGeometry g{channels, 7, 6, kernel, stride, pad, (7 + 2 * pad - kernel) / stride + 1,
                         (6 + 2 * pad - kernel) / stride + 1};
    const int classes = outputs * g.out_height * g.out_width;
    Model model(spec, {2, 7, 6}, classes, batch, false, *backend);
    std::vector<float> params = random_floats(model.layout().total(), 1);
    const std::vector<float> x = random_floats(static_cast<size_t>(batch) * g.input_size(), 2);
    const TensorSpec& w = model.layout().at("layer0.weight");
    const TensorSpec& b = model.layout().at("layer0.bias");
    const std::vector<float> want = reference_conv(x, std::vector<float>(params.begin() + w.offset, params.begin() + w.offset + w.size),
                                                   std::vector<float>(params.begin() + b.offset, params.begin() + b.offset + b.size),
                                                   batch, g, outputs);
    std::vector<float> y(want.size());
    LayerContext ctx{*backend};
    std::vector<float> col(model.network().layers()[0]->col_floats(batch, *backend));
    ctx.col = col.data();
    model.network().layers()[0]->forward(ctx, params.data(), x.data(), y.data(), batch);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-5) << "stride " << stride << " pad " << pad << " at " << i;
  }
}

// col2im is im2col's adjoint: <im2col(x), c> == <x, col2im(c)> for every x and c.
TEST(LayerOpsTest, Col2imIsTheAdjointOfIm2col) {
  auto backend = make_cpu_backend(1);
  for (const auto& [stride, pad] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{3, 0}}) {
    const ConvGeometry g{3, 9, 8, 3, stride, pad, (9 + 2 * pad - 3) / stride + 1, (8 + 2 * pad - 3) / stride + 1};
    const int batch = 2;
    const auto x = random_floats(batch * g.input_size(), 3);
    const auto c = random_floats(batch * g.patch() * g.positions(), 4);
    std::vector<float> col(c.size()), dx(x.size());
    backend->im2col(x.data(), batch, g, col.data());
    backend->col2im(c.data(), batch, g, dx.data());
    double left = 0, right = 0;
    for (size_t i = 0; i < c.size(); ++i) left += double{col[i]} * c[i];
    for (size_t i = 0; i < x.size(); ++i) right += double{x[i]} * dx[i];
    EXPECT_NEAR(left, right, 1e-4 * (1 + std::fabs(left))) << "stride " << stride << " pad " << pad;
  }
}

TEST(LayerOpsTest, PoolingAndItsGradientEqualTheirDefinitions) {
  auto backend = make_cpu_backend(1);
  // {h, kernel, stride, ties}: 8x6 with 2x2 windows of stride 2 tiles the plane (the backend's
  // straight-line path); values rounded to halves make ties, where the first maximum takes dy.
  for (const auto& [h, kernel, stride, ties] : {std::tuple{7, 2, 2, false}, std::tuple{8, 2, 2, false},
                                                std::tuple{8, 2, 2, true}, std::tuple{7, 3, 1, true},
                                                std::tuple{7, 3, 2, false}}) {
    const int w = 6, planes = 3;
    const PoolGeometry g{h, w, kernel, stride, (h - kernel) / stride + 1, (w - kernel) / stride + 1};
    auto x = random_floats(static_cast<size_t>(planes) * h * w, 5);
    if (ties) {
      for (float& v : x) v = std::round(v * 2) / 2;
    }
    const auto dy = random_floats(static_cast<size_t>(planes) * g.out_height * g.out_width, 6);
    for (const PoolKind kind : {PoolKind::kMax, PoolKind::kAverage}) {
      std::vector<float> y(dy.size()), dx(x.size());
      std::vector<float> scratch(backend->pool_scratch_floats(kind, planes, g));
      backend->pool(kind, x.data(), planes, g, y.data(), scratch.data());
      backend->pool_backward(kind, x.data(), y.data(), dy.data(), planes, g, dx.data(), scratch.data());
      std::vector<double> want_dx(x.size(), 0.0);
      for (int p = 0; p < planes; ++p)
        for (int oy = 0; oy < g.out_height; ++oy)
          for (int ox = 0; ox < g.out_width; ++ox) {
            double best = -INFINITY, sum = 0;
            size_t at = 0;
            for (int ki = 0; ki < kernel; ++ki)
              for (int kj = 0; kj < kernel; ++kj) {
                const size_t i = (static_cast<size_t>(p) * h + oy * stride + ki) * w + ox * stride + kj;
                sum += x[i];
                if (x[i] > best) best = x[i], at = i;
              }
            const size_t o = (static_cast<size_t>(p) * g.out_height + oy) * g.out_width + ox;
            if (kind == PoolKind::kMax) {
              ASSERT_EQ(y[o], static_cast<float>(best));
              want_dx[at] += dy[o];
            } else {
              ASSERT_NEAR(y[o], sum / (kernel * kernel), 1e-6);
              for (int ki = 0; ki < kernel; ++ki)
                for (int kj = 0; kj < kernel; ++kj)
                  want_dx[(static_cast<size_t>(p) * h + oy * stride + ki) * w + ox * stride + kj] += dy[o] / (kernel * kernel);
            }
          }
      for (size_t i = 0; i < dx.size(); ++i) {
        ASSERT_NEAR(dx[i], want_dx[i], 1e-5) << "h " << h << " kernel " << kernel << " stride " << stride << " ties " << ties;
      }
    }
  }
}

TEST(LayerOpsTest, ActivationsAndTheirGradients) {
  auto backend = make_cpu_backend(1);
  const auto x = random_floats(1000, 7, -3.0f, 3.0f);
  const auto dy = random_floats(1000, 8);
  std::vector<float> y(x.size()), dx(x.size());
  backend->activation(Activation::kTanh, x.data(), y.data(), x.size());
  backend->activation_backward(Activation::kTanh, nullptr, y.data(), dy.data(), dx.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(y[i], std::tanh(double{x[i]}), 1e-6);
    ASSERT_NEAR(dx[i], dy[i] / std::pow(std::cosh(double{x[i]}), 2), 1e-5);
  }
  backend->activation(Activation::kRelu, x.data(), y.data(), x.size());
  backend->activation_backward(Activation::kRelu, nullptr, y.data(), dy.data(), dx.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i], std::max(x[i], 0.0f));
    ASSERT_EQ(dx[i], x[i] > 0 ? dy[i] : 0.0f);
  }
  backend->activation(Activation::kSigmoid, x.data(), y.data(), x.size());
  backend->activation_backward(Activation::kSigmoid, nullptr, y.data(), dy.data(), dx.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = 1 / (1 + std::exp(-double{x[i]}));
    ASSERT_NEAR(y[i], s, 1e-6);
    ASSERT_NEAR(dx[i], dy[i] * s * (1 - s), 1e-6);
  }
  // gelu: x Phi(x), and its derivative Phi(x) + x phi(x), in double; its backward reads x.
  backend->activation(Activation::kGelu, x.data(), y.data(), x.size());
  std::vector<float> junk(x.size(), 7.0f);  // not y: gelu's backward must not need its output
  backend->activation_backward(Activation::kGelu, x.data(), junk.data(), dy.data(), dx.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], cdf = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
    ASSERT_NEAR(y[i], v * cdf, 1e-6);
    ASSERT_NEAR(dx[i], dy[i] * (cdf + v * std::exp(-v * v / 2) / std::sqrt(2 * M_PI)), 1e-5);
  }
}

// Dropout keeps about 1 - rate of the elements, scaled by 1 / (1 - rate); the mask is a function
// of the sample's key and the salt, not of where the row sits in a batch.
TEST(LayerOpsTest, DropoutMaskDependsOnTheSampleAndTheSaltOnly) {
  auto backend = make_cpu_backend(1);
  const int cols = 4000;
  const std::vector<float> ones(2 * cols, 1.0f);
  std::vector<float> y(ones.size()), swapped(ones.size()), other(ones.size());
  const std::vector<uint64_t> keys = {17, 99}, reversed = {99, 17};
  backend->dropout(ones.data(), y.data(), 2, cols, 0.25f, keys.data(), 5);
  backend->dropout(ones.data(), swapped.data(), 2, cols, 0.25f, reversed.data(), 5);
  backend->dropout(ones.data(), other.data(), 2, cols, 0.25f, keys.data(), 6);
  int kept = 0;
  for (int c = 0; c < cols; ++c) {
    ASSERT_TRUE(y[c] == 0.0f || y[c] == 1.0f / 0.75f);
    kept += y[c] != 0.0f;
    ASSERT_EQ(y[c], swapped[cols + c]);  // sample 17's row, wherever it is
  }
  EXPECT_NEAR(kept / static_cast<double>(cols), 0.75, 0.03);
  EXPECT_NE(std::vector<float>(y.begin(), y.begin() + cols), std::vector<float>(y.begin() + cols, y.end()));
  EXPECT_NE(y, other);
  backend->dropout(ones.data(), y.data(), 2, cols, 0.0f, keys.data(), 5);
  EXPECT_EQ(y, ones);  // rate 0: the identity (evaluation)
}

// --- Whole models ----------------------------------------------------------------------------

const char* const kEveryLayer =
    "conv 3 3 pad=1, tanh, maxpool 2, residual(conv 3 3 pad=1, relu, dropout 0.3, conv 3 3 pad=1), conv 4 2 stride=1, "
    "gelu, avgpool 2 stride=1, flatten, dense 6, layernorm, sigmoid, dense 5, relu, dropout 0.3, dense 3";

// The backward pass of a model with every kind of layer against central finite differences of
// the summed loss (dropout's mask fixed by the keys, so the loss is a function of the parameters).
// The backward pass of `spec` on [2, 8, 8] inputs against central finite differences; returns the
// number of parameters.
size_t check_finite_differences(const char* spec) {
  auto backend = make_cpu_backend(1);
  const int batch = 4, classes = 3;
  Model model(spec, {2, 8, 8}, classes, batch, false, *backend);
  const size_t n = model.layout().total();
  std::vector<float> params(n), grad(n), scratch(n);
  model.init(3, params.data());
  for (size_t i = 0; i < n; ++i) params[i] += 0.05f * std::sin(static_cast<float>(i));  // non-zero biases
  const auto x = random_floats(static_cast<size_t>(batch) * 2 * 8 * 8, 9);
  const std::vector<int32_t> y = {0, 2, 1, 2};
  const std::vector<uint64_t> records = {11, 12, 13, 14};
  const DropoutKeys keys{7, 3, records.data()};
  const auto loss = [&] {
    return model.train_step(params.data(), x.data(), y.data(), batch, scratch.data(), nullptr, false, keys).loss_sum;
  };
  model.train_step(params.data(), x.data(), y.data(), batch, grad.data(), nullptr, false, keys);
  const double h = 1e-3;
  double worst = 0;
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float saved = params[i];
    params[i] = saved + static_cast<float>(h);
    const double up = loss();
    params[i] = saved - static_cast<float>(h);
    const double down = loss();
    params[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double err = std::fabs(numeric - grad[i]) / std::max(1.0, std::fabs(numeric));
    worst = std::max(worst, err);
    bad += err > 5e-3;  // a max-pool or ReLU kink crossed by the step
  }
  EXPECT_LE(bad, 2) << spec << ": worst " << worst;
  return n;
}

TEST(ModelGradientTest, EveryLayerKindMatchesFiniteDifferences) { EXPECT_GT(check_finite_differences(kEveryLayer), 150u); }

// Global average pooling (a GEMM against a column of 1/(H*W)) and its backward, in a ResNet-style
// head: convolutions, then each channel's mean, then a dense layer.
TEST(ModelGradientTest, GlobalAveragePoolingMatchesFiniteDifferences) {
  EXPECT_GT(check_finite_differences("conv 4 3 pad=1, gelu, conv 6 3 stride=2 pad=1, tanh, globalavgpool, dense 3"),
            100u);
}

// Layer normalisation in a conv stage (over C x H x W), after a dense layer, and as the first
// layer (its input needs no gradient; its scale and shift do).
TEST(ModelGradientTest, LayerNormMatchesFiniteDifferences) {
  EXPECT_GT(check_finite_differences("conv 3 3 pad=1, layernorm, tanh, maxpool 2, flatten, dense 6, layernorm, gelu, "
                                     "dense 3"),
            100u);
  EXPECT_GT(check_finite_differences("layernorm, dense 5, tanh, dense 3"), 100u);
}

// Batch normalisation's training-mode backward (the batch's statistics depend on every sample):
// per channel after a conv, per feature after a dense layer, and as the first layer.
TEST(ModelGradientTest, BatchNormMatchesFiniteDifferences) {
  EXPECT_GT(check_finite_differences("conv 3 3 pad=1, batchnorm, tanh, maxpool 2, flatten, dense 6, bn, gelu, dense 3"),
            100u);
  EXPECT_GT(check_finite_differences("batchnorm, flatten, dense 5, tanh, dense 3"), 100u);
  // Inside a residual block (its statistics are the block's inner layer's).
  EXPECT_GT(check_finite_differences("conv 3 3 pad=1, residual(conv 3 3 pad=1, batchnorm, tanh, conv 3 3 pad=1, bn), "
                                     "tanh, flatten, dense 3"),
            100u);
}

// The dot interaction (no parameters) between dense layers: its input gradient carries the
// gradients of the layers before it (tests/dot_layer_test.cc checks it alone).
TEST(ModelGradientTest, DotInteractionMatchesFiniteDifferences) {
  EXPECT_GT(check_finite_differences("dense 12, tanh, dot 3 4, dense 6, sigmoid, dense 3"), 100u);
}

// Residual blocks (y = block(x) + shortcut(x)): an identity shortcut, a projected one (a 1x1
// convolution of stride 2 that also changes the channels), a block as the first layer (its
// projection's input needs no gradient), and flat blocks (identity, and a dense projection).
TEST(ModelGradientTest, ResidualBlocksMatchFiniteDifferences) {
  EXPECT_GT(check_finite_differences("conv 4 3 pad=1, relu, residual(conv 4 3 pad=1, tanh, conv 4 3 pad=1), relu, "
                                     "residual(conv 6 3 stride=2 pad=1, tanh, conv 6 3 pad=1), relu, globalavgpool, "
                                     "dense 3"),
            500u);
  EXPECT_GT(check_finite_differences("residual(conv 4 3 pad=1, tanh), maxpool 2, flatten, dense 3"), 100u);
  EXPECT_GT(check_finite_differences("flatten, dense 8, residual(dense 8, tanh, dense 8), "
                                     "residual(dense 5, sigmoid, dropout 0.3), dense 3"),
            1000u);
}

// Bottom blocks (DLRM's bottom MLP over the first K values, the rest passed on): feeding a dot
// layer over the block's output and the rest, and with batchnorm and dropout inside after a
// dense layer.
TEST(ModelGradientTest, BottomBlocksMatchFiniteDifferences) {
  EXPECT_GT(check_finite_differences("flatten, bottom 8(dense 6, tanh, dense 4), dot 31 4, dense 3"), 1500u);
  EXPECT_GT(check_finite_differences("flatten, dense 12, tanh, bottom 5(dense 6, bn, sigmoid, dropout 0.3, dense 4), "
                                     "tanh, dense 3"),
            1500u);
}

// DCN-v2's cross layers (x0 * (x_l W_l + b_l) + x_l, stacked): first (no dx wanted) and after a
// dense layer (its gradients need the cross layers' dx).
TEST(ModelGradientTest, CrossLayersMatchFiniteDifferences) {
  EXPECT_GT(check_finite_differences("flatten, cross 2, dense 3"), 32000u);
  EXPECT_GT(check_finite_differences("flatten, dense 10, tanh, cross 3, relu, dense 3"), 1300u);
}

// Parallel blocks (the sum of their branches on the same input): wide & deep, and DeepFM's
// linear part, pairs and MLP side by side.
TEST(ModelGradientTest, ParallelBlocksMatchFiniteDifferences) {
  EXPECT_GT(check_finite_differences("flatten, dense 12, tanh, parallel(dense 3 | dense 8, relu, dense 3)"), 1500u);
  EXPECT_GT(check_finite_differences("flatten, dense 12, tanh, parallel(dense 3 | dot 3 4, dense 3 | dense 6, gelu, "
                                     "dense 3)"),
            1500u);
}

TEST(LayerOpsTest, LayerNormIsItsDefinition) {
  auto backend = make_cpu_backend(2);
  const int rows = 5, cols = 37;
  const auto x = random_floats(rows * cols, 31, -2.0f, 3.0f), gamma = random_floats(cols, 32),
             beta = random_floats(cols, 33);
  std::vector<float> y(x.size());
  backend->layer_norm(x.data(), rows, cols, gamma.data(), beta.data(), 1e-5f, y.data());
  for (int r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int j = 0; j < cols; ++j) mean += x[r * cols + j] / double{cols};
    for (int j = 0; j < cols; ++j) var += (x[r * cols + j] - mean) * (x[r * cols + j] - mean) / cols;
    for (int j = 0; j < cols; ++j) {
      const double want = (x[r * cols + j] - mean) / std::sqrt(var + 1e-5) * gamma[j] + beta[j];
      ASSERT_NEAR(y[r * cols + j], want, 2e-6) << r << " " << j;
    }
  }
  // A fresh model's layer norm starts as the plain normalisation: scale 1, shift 0.
  Model model("dense 4, layernorm, dense 3", {6}, 3, 1, false, *backend);
  std::vector<float> params(model.layout().total());
  model.init(1, params.data());
  const TensorSpec& scale = model.layout().at("layer1.weight");
  const TensorSpec& shift = model.layout().at("layer1.bias");
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(params[scale.offset + i], 1.0f);
    EXPECT_EQ(params[shift.offset + i], 0.0f);
  }
}

TEST(LayerOpsTest, GlobalAveragePoolingIsEachChannelsMean) {
  auto backend = make_cpu_backend(1);
  const auto layer = make_layer(parse_model("globalavgpool")[0], Shape::image(3, 4, 5), 0);
  EXPECT_EQ(layer->out().text(), "3");
  std::vector<float> col(layer->col_floats(2, *backend));
  LayerContext ctx{*backend, col.data()};
  const auto x = random_floats(2 * 3 * 4 * 5, 21), dy = random_floats(2 * 3, 22);
  std::vector<float> y(2 * 3), dx(x.size());
  layer->forward(ctx, nullptr, x.data(), y.data(), 2);
  layer->backward(ctx, nullptr, x.data(), y.data(), dy.data(), dx.data(), nullptr, 2, false);
  for (size_t p = 0; p < 6; ++p) {
    double sum = 0;
    for (size_t i = 0; i < 20; ++i) sum += x[p * 20 + i];
    EXPECT_NEAR(y[p], sum / 20, 1e-6) << p;
    for (size_t i = 0; i < 20; ++i) EXPECT_FLOAT_EQ(dx[p * 20 + i], dy[p] / 20) << p;
  }
  try {
    Model flat("dense 8, globalavgpool", {3, 4, 5}, 3, 2, false, *backend);
    ADD_FAILURE() << "globalavgpool on a vector was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'globalavgpool' needs an image input (channels x height x width), not 8"),
              std::string::npos) << e.what();
  }
}

// Gradients accumulate over micro-batches: two halves with accumulate equal the whole batch.
TEST(ModelGradientTest, AccumulatedHalvesEqualTheWholeBatch) {
  auto backend = make_cpu_backend(1);
  const int batch = 6;
  Model model(kEveryLayer, {2, 8, 8}, 3, batch, false, *backend);
  const size_t n = model.layout().total();
  std::vector<float> params(n), whole(n), halves(n);
  model.init(4, params.data());
  const auto x = random_floats(static_cast<size_t>(batch) * 128, 10);
  const std::vector<int32_t> y = {0, 1, 2, 0, 1, 2};
  const std::vector<uint64_t> records = {5, 6, 7, 8, 9, 10};
  model.train_step(params.data(), x.data(), y.data(), batch, whole.data(), nullptr, false, {1, 2, records.data()});
  model.train_step(params.data(), x.data(), y.data(), 3, halves.data(), nullptr, false, {1, 2, records.data()});
  model.train_step(params.data(), x.data() + 3 * 128, y.data() + 3, 3, halves.data(), nullptr, true,
                   {1, 2, records.data() + 3});
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(halves[i], whole[i], 1e-5 * (1 + std::fabs(whole[i]))) << i;
}

// --recompute keeps only the blocks' outputs: the same gradients bit for bit, so the same
// parameters after any number of steps, with less activation memory.
TEST(ModelGradientTest, RecomputeGivesTheSameParametersWithLessMemory) {
  auto backend = make_cpu_backend(1);
  const int batch = 8, steps = 20;
  const std::vector<size_t> shape = {2, 8, 8};
  std::vector<std::vector<float>> results;
  for (const bool recompute : {false, true}) {
    Model model(kEveryLayer, shape, 3, batch, recompute, *backend);
    const size_t n = model.layout().total();
    std::vector<float> params(n), grad(n);
    model.init(5, params.data());
    for (int s = 0; s < steps; ++s) {
      const auto x = random_floats(static_cast<size_t>(batch) * 128, 100 + s);
      std::vector<int32_t> y(batch);
      std::vector<uint64_t> records(batch);
      for (int i = 0; i < batch; ++i) y[i] = (s + i) % 3, records[i] = static_cast<uint64_t>(s * batch + i);
      model.train_step(params.data(), x.data(), y.data(), batch, grad.data(), nullptr, false,
                       {9, static_cast<uint64_t>(s), records.data()});
      for (size_t i = 0; i < n; ++i) params[i] -= 0.05f * grad[i] / batch;
    }
    results.push_back(params);
  }
  EXPECT_EQ(results[0], results[1]);
  // configs/fashion_cnn.cfg's model at batch 256: per sample, the plain plan keeps every output
  // (47306 floats) and the gradients' two buffers (6272 + 25088); with --recompute only the
  // blocks' outputs (9546) and the largest block's insides (25088).
  const char* const cnn =
      "conv 32 3 pad=1, relu, maxpool 2, conv 64 3 pad=1, relu, maxpool 2, flatten, dense 128, relu, dropout 0.25, "
      "dense 10";
  const Network net(cnn, {1, 28, 28}, 10);
  size_t col = 0;
  for (const auto& layer : net.layers()) col = std::max(col, layer->col_floats(256, *backend));
  EXPECT_EQ(net.activation_floats(256, false, *backend), (47306 + 6272 + 25088) * 256 + col);
  EXPECT_EQ(net.activation_floats(256, true, *backend), (9546 + 25088 + 6272 + 25088) * 256 + col);
}

// "relu, maxpool" runs as "maxpool, relu" (less work; relu in place over the pooled values): the
// same gradients bit for bit as the written order, which "relu, dropout 0, maxpool" (dropout at
// rate 0 is the identity) keeps from being reordered. avgpool is not reordered.
TEST(ModelGradientTest, ReluBeforeMaxPoolRunsAfterItWithTheSameResult) {
  auto backend = make_cpu_backend(1);
  const Network net("conv 3 3 pad=1, relu, maxpool 2, relu, avgpool 2, flatten, dense 3", {2, 8, 8}, 3);
  EXPECT_EQ(net.layers()[1]->kind(), LayerKind::kMaxPool);
  EXPECT_EQ(net.layers()[2]->kind(), LayerKind::kRelu);
  EXPECT_EQ(net.layers()[3]->kind(), LayerKind::kRelu);
  EXPECT_EQ(net.layers()[4]->kind(), LayerKind::kAvgPool);
  const int batch = 5;
  const auto x = random_floats(static_cast<size_t>(batch) * 128, 40);
  const std::vector<int32_t> y = {0, 1, 2, 1, 0};
  std::vector<std::vector<float>> grads;
  for (const char* spec :
       {"conv 4 3 pad=1, relu, dropout 0, maxpool 2, flatten, dense 3", "conv 4 3 pad=1, relu, maxpool 2, flatten, dense 3"}) {
    Model model(spec, {2, 8, 8}, 3, batch, false, *backend);
    std::vector<float> params(model.layout().total()), grad(params.size());
    model.init(6, params.data());
    for (size_t i = 0; i < params.size(); ++i) params[i] -= 0.1f;  // negative biases: windows with maxima <= 0
    model.train_step(params.data(), x.data(), y.data(), batch, grad.data());
    grads.push_back(grad);
  }
  EXPECT_EQ(grads[0], grads[1]);
}

TEST(ModelGradientTest, TheMlpOfHiddenIsItsLayerList) {
  auto backend = make_cpu_backend(1);
  Model a(12, {7, 5}, 4, 3, *backend), b("dense 7, relu, dense 5, relu, dense 4", {12}, 4, 3, false, *backend);
  EXPECT_EQ(a.layout().tensors().size(), 6u);
  EXPECT_EQ(a.layout().at("layer1.weight").shape, (std::vector<size_t>{7, 5}));
  // outputs 7 + 5 + 4; backward's gradients: the logits' (4) and dense 7's dx (7) in one buffer,
  // dense 5's dx (5) in the other; the first layer computes no dx.
  EXPECT_EQ(a.network().activation_floats(3, false, *backend), (7 + 5 + 4 + 7 + 5) * 3u);
  std::vector<float> pa(a.layout().total()), pb(b.layout().total());
  a.init(1, pa.data());
  b.init(1, pb.data());
  EXPECT_EQ(pa, pb);
}

}  // namespace
}  // namespace pstrain
