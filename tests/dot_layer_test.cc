// The `dot F D` layer (FM / DLRM's pairwise interaction, docs/models.md) on the CPU backend: its
// output and gradient against their definitions and central finite differences, the same bits on
// every run and thread count, its parse and shape errors, and a CTR-shaped model that learns an
// interaction through it. The CUDA kernels are checked against these in cuda_backend_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
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

std::unique_ptr<Layer> dot_layer(int fields, int dim, size_t inputs) {
  return make_layer(parse_model("dot " + std::to_string(fields) + " " + std::to_string(dim))[0],
                    Shape::vector(inputs), 0);
}

// The definition, in double: the input, then <v_i, v_j> for i < j in row-major order of (i, j).
std::vector<double> reference_forward(const std::vector<float>& x, int rows, int cols, int fields, int dim) {
  std::vector<double> y;
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + static_cast<size_t>(r) * cols;
    y.insert(y.end(), xr, xr + cols);
    const float* v = xr + cols - fields * dim;
    for (int i = 0; i < fields; ++i) {
      for (int j = i + 1; j < fields; ++j) {
        double sum = 0;
        for (int k = 0; k < dim; ++k) sum += double{v[i * dim + k]} * v[j * dim + k];
        y.push_back(sum);
      }
    }
  }
  return y;
}

struct Passes {
  std::vector<float> y, dx;
};

Passes run_passes(Backend& backend, Layer& layer, const std::vector<float>& x, const std::vector<float>& dy,
                  int rows) {
  LayerContext ctx{backend};
  Passes p{std::vector<float>(static_cast<size_t>(rows) * layer.out().size()),
           std::vector<float>(static_cast<size_t>(rows) * layer.in().size())};
  layer.forward(ctx, nullptr, x.data(), p.y.data(), rows);
  layer.backward(ctx, nullptr, x.data(), p.y.data(), dy.data(), p.dx.data(), nullptr, rows, false);
  return p;
}

TEST(DotLayerTest, OutputIsTheInputThenEveryPairsDotProduct) {
  auto backend = make_cpu_backend(1);
  // {fields, dim, dense values before the vectors}: a CTR record (13 + 26 x 16), two vectors
  // alone, one-float vectors (FM on scalars), 9 vectors of 11 (the CPU's blocks of 8 and more).
  for (const auto& [fields, dim, dense] :
       {std::tuple{26, 16, 13}, std::tuple{2, 5, 0}, std::tuple{7, 1, 3}, std::tuple{9, 11, 2}}) {
    const int rows = 3, cols = dense + fields * dim;
    const auto layer = dot_layer(fields, dim, static_cast<size_t>(cols));
    const size_t width = static_cast<size_t>(cols) + static_cast<size_t>(fields) * (fields - 1) / 2;
    EXPECT_EQ(layer->out().text(), std::to_string(width));
    const auto x = random_floats(static_cast<size_t>(rows) * cols, 50, -2.0f, 2.0f);
    const Passes p = run_passes(*backend, *layer, x, std::vector<float>(rows * width), rows);
    const std::vector<double> want = reference_forward(x, rows, cols, fields, dim);
    ASSERT_EQ(p.y.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      if (i % width < static_cast<size_t>(cols)) {
        ASSERT_EQ(p.y[i], static_cast<float>(want[i])) << "the input is copied as it is, at " << i;
      } else {
        ASSERT_NEAR(p.y[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << fields << "x" << dim << " at " << i;
      }
    }
  }
  // The order of the pairs, on vectors whose products are exact: (0,1), (0,2), (1,2).
  const auto layer = dot_layer(3, 2, 7);
  const std::vector<float> x = {9, 1, 2, 3, 4, 5, 6};  // 9, then v0 = (1, 2), v1 = (3, 4), v2 = (5, 6)
  const Passes p = run_passes(*backend, *layer, x, std::vector<float>(10), 1);
  EXPECT_EQ(p.y, (std::vector<float>{9, 1, 2, 3, 4, 5, 6, 11, 17, 39}));
}

void check_gradient(int fields, int dim) {
  SCOPED_TRACE(std::to_string(fields) + " x " + std::to_string(dim));
  auto backend = make_cpu_backend(1);
  const int rows = 2, cols = 4 + fields * dim;
  const auto layer = dot_layer(fields, dim, cols);
  const size_t width = layer->out().size();
  auto x = random_floats(static_cast<size_t>(rows) * cols, 51);
  const auto w = random_floats(rows * width, 52);
  const Passes p = run_passes(*backend, *layer, x, w, rows);
  // The definition: dy's own value, plus dy(i,j) v_j on v_i and dy(i,j) v_i on v_j.
  std::vector<double> want(x.size());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) want[r * cols + c] = w[r * width + c];
    size_t pair = r * width + cols;
    const size_t v = static_cast<size_t>(r) * cols + cols - fields * dim;
    for (int i = 0; i < fields; ++i) {
      for (int j = i + 1; j < fields; ++j, ++pair) {
        for (int k = 0; k < dim; ++k) {
          want[v + i * dim + k] += double{w[pair]} * x[v + j * dim + k];
          want[v + j * dim + k] += double{w[pair]} * x[v + i * dim + k];
        }
      }
    }
  }
  const auto loss = [&] {
    LayerContext ctx{*backend};
    std::vector<float> y(rows * width);
    layer->forward(ctx, nullptr, x.data(), y.data(), rows);
    double sum = 0;
    for (size_t i = 0; i < y.size(); ++i) sum += double{w[i]} * y[i];
    return sum;
  };
  const float h = 1e-2f;  // L is quadratic in x: central differences are exact but for rounding
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(p.dx[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "definition, at " << i;
    const double numeric = test::central_difference(x, i, h, loss);
    ASSERT_NEAR(p.dx[i], numeric, 2e-3 * (1 + std::fabs(numeric))) << "finite differences, at " << i;
  }
}

// dx against the definition, and against central finite differences of the scalar loss
// L(x) = sum of w * y(x) (w fixed: the dy of backward), computed from the layer's own forward.
// {fields, dim}: vectors shorter than the CPU's blocks of 8, and 9 vectors of 11 (a block and a
// remainder of both the pairs and the elements).
TEST(DotLayerTest, GradientMatchesItsDefinitionAndFiniteDifferences) {
  for (const auto& [fields, dim] : {std::pair{5, 3}, std::pair{9, 11}}) {
    check_gradient(fields, dim);
  }
}

// A CTR batch (1024 records of 13 + 26 x 16): the same bits on every run, with 1 or 4 threads
// (each row's sums are in a fixed order; the threads split the rows).
TEST(DotLayerTest, SameBitsEveryRunAndThreadCount) {
  const int rows = 1024, fields = 26, dim = 16, cols = 13 + fields * dim;
  const auto layer = dot_layer(fields, dim, cols);
  const auto x = random_floats(static_cast<size_t>(rows) * cols, 53);
  const auto dy = random_floats(static_cast<size_t>(rows) * layer->out().size(), 54);
  auto one = make_cpu_backend(1), four = make_cpu_backend(4);
  const Passes first = run_passes(*one, *layer, x, dy, rows);
  const Passes again = run_passes(*one, *layer, x, dy, rows);
  const Passes threaded = run_passes(*four, *layer, x, dy, rows);
  EXPECT_EQ(first.y, again.y);
  EXPECT_EQ(first.dx, again.dx);
  EXPECT_EQ(first.y, threaded.y);
  EXPECT_EQ(first.dx, threaded.dx);
}

std::string usage_error(const std::string& spec, const std::vector<size_t>& shape) {
  return test::network_error(spec, shape, 2);
}

TEST(DotLayerTest, ParseAndShapeErrorsNameTheLayer) {
  const std::string spec = "dense 8, dot 1 4, dense 2";
  const std::string e = usage_error(spec, {20});
  EXPECT_NE(e.find("--model: '1' is not the number of fields (a whole number in [2, 16777216])"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("\n  " + spec + "\n  " + std::string(spec.find("1 4"), ' ') + "^"), std::string::npos)
      << e;
  EXPECT_NE(
      usage_error("dot 4 0, dense 2", {20}).find("'0' is not the floats per field (a whole number in [1, "),
      std::string::npos);
  EXPECT_NE(usage_error("dot 4, dense 2", {20}).find("dot needs the floats per field (e.g. dot 26 16)"),
            std::string::npos);
  EXPECT_NE(usage_error("dot 4 3 2, dense 2", {20}).find("'2': dot takes 2 number(s)"), std::string::npos);
  EXPECT_NE(
      usage_error("dot 4 6, dense 2", {20})
          .find("--model: layer 1 'dot 4 6' takes 4 vectors of 6 (24 values) from the end of its input, but "
                "its input is only 20 values"),
      std::string::npos);
  EXPECT_NE(usage_error("dense 8, dot 3 3, dense 2", {20})
                .find("layer 2 'dot 3 3' takes 3 vectors of 3 (9 values)"),
            std::string::npos);
  EXPECT_NE(
      usage_error("dot 2 2, dense 2", {1, 4, 4})
          .find(
              "--model: layer 1 'dot 2 2' needs a flat input (the dense features, then the embedding rows), "
              "but gets an image of 1x4x4 (put a flatten before it)"),
      std::string::npos);
  EXPECT_NE(usage_error("conv 2 3, dot 2 2, dense 2", {1, 4, 4}).find("needs a flat input"),
            std::string::npos);
  // What fits: the whole input as the vectors, after a flatten, after a dense layer.
  EXPECT_EQ(usage_error("dot 5 4, dense 2", {20}), "no error");
  EXPECT_EQ(usage_error("flatten, dot 4 4, dense 2", {1, 4, 4}), "no error");
  const Network net("dense 12, DOT 3 4, dense 2", {20}, 2);
  EXPECT_EQ(net.layers()[1]->kind(), LayerKind::kDot);
  EXPECT_EQ(net.layers()[1]->out().text(), "15");
  EXPECT_FALSE(net.layers()[1]->has_params());
  EXPECT_EQ(net.summary(), "20 -> dense 12 -> 12 -> DOT 3 4 -> 15 -> dense 2 -> 2");
}

// A CTR-shaped input (5 dense values, then 4 vectors of 3) whose label is the sign of <v0, v1>
// + <v2, v3>, which no linear function of the input gives: "dot 4 3, dense 8, relu, dense 2"
// learns it through Model::train_step; and train_step's input gradient (what a CTR worker sends
// back to the embedding tables) through the dot layer, the first, matches finite differences.
TEST(DotLayerTest, ModelLearnsAnInteractionThroughTrainStep) {
  auto backend = make_cpu_backend(2);
  const int batch = 64, dense = 5, fields = 4, dim = 3, cols = dense + fields * dim, steps = 300;
  Model model("dot 4 3, dense 8, relu, dense 2", {static_cast<size_t>(cols)}, 2, batch, false, *backend);
  const size_t n = model.layout().total();
  EXPECT_EQ(model.layout().at("layer0.weight").shape,
            (std::vector<size_t>{static_cast<size_t>(cols) + 6, 8}));
  std::vector<float> params(n), grad(n);
  model.init(7, params.data());
  const auto batch_of = [&](int s, std::vector<float>& x, std::vector<int32_t>& y) {
    x = random_floats(static_cast<size_t>(batch) * cols, 1000 + s);
    y.resize(batch);
    for (int b = 0; b < batch; ++b) {
      const float* v = x.data() + b * cols + dense;
      double score = 0;
      for (int k = 0; k < dim; ++k)
        score += double{v[k]} * v[dim + k] + double{v[2 * dim + k]} * v[3 * dim + k];
      y[b] = score > 0;
    }
  };
  std::vector<float> x;
  std::vector<int32_t> y;
  double early = 0, late = 0;
  for (int s = 0; s < steps; ++s) {
    batch_of(s, x, y);
    const double loss =
        model.train_step(params.data(), x.data(), y.data(), batch, grad.data()).loss_sum / batch;
    if (s < 20) early += loss / 20;
    if (s >= steps - 20) late += loss / 20;
    for (size_t i = 0; i < n; ++i) params[i] -= 0.1f * grad[i] / batch;
  }
  EXPECT_LT(late, 0.5 * early) << "mean loss of the first 20 steps " << early << ", of the last 20 " << late;

  batch_of(steps, x, y);
  std::vector<float> input_grad(x.size());
  model.train_step(params.data(), x.data(), y.data(), batch, grad.data(), nullptr, false, {},
                   input_grad.data());
  const auto loss = [&] {
    return model.train_step(params.data(), x.data(), y.data(), batch, grad.data()).loss_sum;
  };
  const float h = 1e-3f;
  int bad = 0;
  for (size_t i = 0; i < x.size(); i += 7) {
    const double numeric = test::central_difference(x, i, h, loss);
    bad +=
        std::fabs(numeric - input_grad[i]) > 5e-3 * std::max(1.0, std::fabs(numeric));  // a relu kink crossed
  }
  EXPECT_LE(bad, 2);
}

}  // namespace
}  // namespace pstrain
