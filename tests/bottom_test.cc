// bottom K(<layers>) (DLRM's bottom MLP, docs/models.md): the grammar and every error, shapes,
// variables, scratch and summary, the forward and backward passes against a block written out
// by hand, the input's gradient (what reaches the embedding rows) against finite differences,
// and model.json with a save/load round trip. The model's parameter gradients through a block
// are in layers_test.cc (ModelGradientTest.BottomBlocksMatchFiniteDifferences), the GPU against
// the CPU in cuda_backend_test.cc, a CTR job in ctr_job_test.cc.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "shared/train/layout.h"
#include "shared/util/error.h"
#include "test_util/idx_writer.h"
#include "test_util/network.h"
#include "test_util/random.h"
#include "worker/backend/backend.h"
#include "worker/model/layers.h"
#include "worker/model/model.h"
#include "worker/model/model_file.h"
#include "worker/model/saved_model.h"
#include "worker/model/param_files.h"

namespace pstrain {
namespace {

using test::random_floats;

std::string usage_error(const std::string& spec, const std::vector<size_t>& shape = {17}) {
  return test::network_error(spec, shape, 2);
}

// The message of a parse or block error and its caret line under the spec.
std::string pointed(const std::string& message, const std::string& spec, size_t position, size_t length) {
  return "--model: " + message + "\n  " + spec + "\n  " + std::string(position, ' ') + std::string(length, '^');
}

TEST(BottomGrammarTest, ABlockIsOneLayerHoldingItsCountAndList) {
  const std::string spec = "BOTTOM 13 (Dense 8, relu, dropout 0.1,), dot 27 4, dense 1";
  const auto layers = parse_model(spec);
  ASSERT_EQ(layers.size(), 3u);
  EXPECT_EQ(layers[0].kind, LayerKind::kBottom);
  EXPECT_EQ(layers[0].args, (std::vector<double>{13}));
  EXPECT_EQ(layers[0].text, "BOTTOM 13 (Dense 8, relu, dropout 0.1,)");
  EXPECT_EQ(layers[0].position, 0u);
  ASSERT_EQ(layers[0].layers.size(), 3u);  // a trailing comma inside, as outside
  EXPECT_EQ(layers[0].layers[0].kind, LayerKind::kDense);
  EXPECT_EQ(layers[0].layers[0].position, spec.find("Dense"));
  EXPECT_EQ(layers[0].layers[2].args, (std::vector<double>{0.1}));
  EXPECT_EQ(layers[1].kind, LayerKind::kDot);
  EXPECT_EQ(parse_model("bottom 2(relu)")[0].text, "bottom 2(relu)");
}

TEST(BottomGrammarTest, EveryBadSpecIsAUsageErrorPointingAtIt) {
  std::string spec = "bottom (dense 8), dense 2";
  EXPECT_EQ(usage_error(spec), pointed("bottom needs the number of values its layers take (e.g. bottom 13(dense 64, "
                                       "relu, dense 8))",
                                       spec, 0, 6));
  spec = "bottom x(dense 8), dense 2";
  EXPECT_EQ(usage_error(spec),
            pointed("'x' is not the number of values its layers take (a whole number in [1, 16777216])", spec, 7, 1));
  spec = "bottom 0 (dense 8), dense 2";
  EXPECT_EQ(usage_error(spec),
            pointed("'0' is not the number of values its layers take (a whole number in [1, 16777216])", spec, 7, 1));
  spec = "dense 20, bottom 3 dense 8, dense 2";
  EXPECT_EQ(usage_error(spec),
            pointed("bottom takes its layers in parentheses: bottom 13(dense 64, relu, dense 8)", spec, 10, 6));
  spec = "bottom 3";
  EXPECT_EQ(usage_error(spec),
            pointed("bottom takes its layers in parentheses: bottom 13(dense 64, relu, dense 8)", spec, 0, 6));
  spec = "bottom 3( ), dense 2";
  EXPECT_EQ(usage_error(spec), pointed("the bottom block of layer 1 has no layers", spec, 8, 3));
  spec = "bottom 3(relu) tanh, dense 2";
  EXPECT_EQ(usage_error(spec), pointed("'tanh' follows a bottom block's ')' (a comma is missing?)", spec, 15, 4));
  spec = "bottom 3(relu, softmax), dense 2";
  EXPECT_EQ(usage_error(spec), pointed("softmax (the loss) cannot be in a bottom block", spec, 15, 7));
  spec = "residual(relu, bottom 3(relu)), dense 2";
  EXPECT_EQ(usage_error(spec),
            pointed("bottom blocks do not nest (a block's layers are plain layers)", spec, 15, 6));
  spec = "bottom 3(relu, residual(relu)), dense 2";
  EXPECT_EQ(usage_error(spec),
            pointed("residual blocks do not nest (a block's layers are plain layers)", spec, 15, 8));
  spec = "bottom 3(relu, bottom 2(relu)), dense 2";
  EXPECT_EQ(usage_error(spec),
            pointed("bottom blocks do not nest (a block's layers are plain layers)", spec, 15, 6));
  spec = "bottom 3(dense x), dense 2";
  EXPECT_EQ(usage_error(spec),
            pointed("'x' is not the number of outputs (a whole number in [1, 16777216])", spec, 15, 1));
  EXPECT_NE(usage_error("bottom 3(relu,, tanh), dense 2").find("layer 1.2 is empty"), std::string::npos);
  EXPECT_NE(usage_error("swish, dense 2").find("dot, cross, bottom K(...), softmax, residual(...), parallel(... | ...))"), std::string::npos)
      << usage_error("swish, dense 2");
}

TEST(BottomGrammarTest, ShapeErrorsNameTheBlockAndPointAtIt) {
  // A CTR record with --embedding-dim 8: 13 + 26 x 8 = 221 values.
  std::string spec = "dense 221, bottom 300(dense 8), dense 2";
  EXPECT_EQ(usage_error(spec, {221}),
            pointed("layer 2 'bottom 300(dense 8)' takes the first 300 values of its input, but its input is only 221 "
                    "values (with --embedding-dim D, a CTR record is 13 + 26 x D)",
                    spec, 11, 19));
  spec = "bottom 17(dense 8), dense 2";
  EXPECT_EQ(usage_error(spec),
            pointed("layer 1 'bottom 17(dense 8)' takes all 17 values of its input and passes none on (without the "
                    "block, its layers take them all)",
                    spec, 0, 18));
  spec = "bottom 4(dense 8), dense 2";
  EXPECT_EQ(usage_error(spec, {1, 4, 4}),
            pointed("layer 1 'bottom 4(dense 8)' needs a flat input (the dense features, then the embedding rows), "
                    "but gets an image of 1x4x4 (put a flatten before it)",
                    spec, 0, 17));
  // The inner layers' own shape errors name them by block and place; their input is the K values.
  EXPECT_EQ(usage_error("bottom 4(relu, conv 2 3), dense 2"),
            "--model: layer 1.2 'conv 2 3' needs an image input (channels x height x width), but gets a flat vector of "
            "4 values (a dense or flatten layer, or flat data, comes before it)");
  EXPECT_NE(usage_error("bottom 4(dense 8, dot 3 3), dense 2").find("layer 1.2 'dot 3 3' takes 3 vectors of 3 (9 "
                                                                    "values) from the end of its input, but its "
                                                                    "input is only 8 values"),
            std::string::npos);
  // What fits: K from 1 to the input's size - 1, after a dense layer, after a flatten.
  EXPECT_EQ(usage_error("bottom 1(dense 2), dense 2"), "no error");
  EXPECT_EQ(usage_error("bottom 16(tanh), dense 2"), "no error");
  EXPECT_EQ(usage_error("dense 9, bottom 3(dense 2), dense 2"), "no error");
  EXPECT_EQ(usage_error("flatten, bottom 3(dense 2), dense 2", {1, 4, 4}), "no error");
}

// 5 dense values then 4 vectors of 3: the bottom MLP makes a fifth vector of 3 from the 5 values
// and the dot layer then sees 5 vectors.
const char* const kDlrm = "bottom 5(dense 6, relu, dense 3), dot 5 3, dense 4, relu, dense 2";
constexpr size_t kCols = 5 + 4 * 3;

TEST(BottomNetworkTest, ShapesVariablesScratchAndSummary) {
  const Network net(kDlrm, {kCols}, 2);
  const Layer& block = *net.layers()[0];
  EXPECT_EQ(block.kind(), LayerKind::kBottom);
  EXPECT_EQ(block.in().text(), "17");
  EXPECT_EQ(block.out().text(), "15");  // 3 made + 12 passed on
  EXPECT_TRUE(block.has_params());
  EXPECT_EQ(block.param_layers(), 2);
  EXPECT_EQ(net.layers()[1]->out().text(), "25");  // 15 + 10 pairs
  const Layout& layout = net.layout();
  EXPECT_EQ(layout.at("layer0.weight").shape, (std::vector<size_t>{5, 6}));
  EXPECT_EQ(layout.at("layer0.bias").shape, (std::vector<size_t>{6}));
  EXPECT_EQ(layout.at("layer1.weight").shape, (std::vector<size_t>{6, 3}));
  EXPECT_EQ(layout.at("layer2.weight").shape, (std::vector<size_t>{25, 4}));
  EXPECT_EQ(layout.at("layer3.weight").shape, (std::vector<size_t>{4, 2}));
  EXPECT_EQ(block.weight_offset(), 0u);
  // Per sample: x[:5]; the chain's dense 6 (relu in place) and dense 3 outputs and two gradient
  // buffers of 6; the layers' dy of 3.
  EXPECT_EQ(block.scratch_floats(), 5u + (6 + 3 + 2 * 6) + 3u);
  EXPECT_EQ(net.summary(),
            "17 -> bottom 5(dense 6 -> 6 -> relu -> dense 3 -> 3), the other 12 passed on -> 15 -> dot 5 3 -> 25 -> "
            "dense 4 -> 4 -> relu -> dense 2 -> 2");
}

// --recompute (the block and the dot after it run again in backward, from the block's input)
// gives the same gradients, the input's included.
TEST(BottomNetworkTest, RecomputeGivesTheSameGradients) {
  auto backend = make_cpu_backend(1);
  const int batch = 8;
  Model plain(kDlrm, {kCols}, 2, batch, false, *backend), recomputed(kDlrm, {kCols}, 2, batch, true, *backend);
  std::vector<float> params(plain.layout().total());
  plain.init(3, params.data());
  const auto x = random_floats(batch * kCols, 38, -1.0f, 1.0f);
  const std::vector<int32_t> y = {0, 1, 1, 0, 1, 0, 0, 1};
  std::vector<float> grad(params.size()), grad_again(params.size()), input(x.size()), input_again(x.size());
  plain.train_step(params.data(), x.data(), y.data(), batch, grad.data(), nullptr, false, {}, input.data());
  recomputed.train_step(params.data(), x.data(), y.data(), batch, grad_again.data(), nullptr, false, {},
                        input_again.data());
  EXPECT_EQ(grad, grad_again);
  EXPECT_EQ(input, input_again);
}

// A layer and its variables, ready to run.
struct Block {
  std::unique_ptr<Layer> layer;
  Layout layout;
  std::vector<float> params;
};

Block block(const std::string& spec, size_t inputs) {
  Block b{make_layer(parse_model(spec)[0], Shape::vector(inputs), 0), Layout(), {}};
  b.layer->declare(b.layout, 0);
  b.params = random_floats(b.layout.total(), 31, -0.7f, 0.7f);
  return b;
}

// bottom 3(dense 2, tanh) on 6 values, written out: h = tanh(x[:3] W + b), y = [h, x[3:]];
// dz = dy[:2] (1 - h^2), dW = x[:3]^T dz, db = the sum of dz, dx = [dz W^T, dy[2:]].
TEST(BottomLayerTest, PassesAreThoseOfItsLayersOnTheFirstKValues) {
  const int rows = 4, cols = 6, k = 3, m = 2, out = m + cols - k;
  Block b = block("bottom 3(dense 2, tanh)", cols);
  ASSERT_EQ(b.layout.total(), static_cast<size_t>(k * m + m));
  const float* w = b.params.data();
  const float* bias = w + k * m;
  const auto x = random_floats(rows * cols, 32, -1.0f, 1.0f);
  const auto dy = random_floats(rows * out, 33, -1.0f, 1.0f);

  std::vector<double> y(rows * out), dx(rows * cols), grad(b.layout.total());
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < m; ++j) {
      double z = bias[j];
      for (int i = 0; i < k; ++i) z += double{x[r * cols + i]} * w[i * m + j];
      const double h = std::tanh(z), dz = dy[r * out + j] * (1 - h * h);
      y[r * out + j] = h;
      for (int i = 0; i < k; ++i) {
        grad[i * m + j] += x[r * cols + i] * dz;
        dx[r * cols + i] += dz * w[i * m + j];
      }
      grad[k * m + j] += dz;
    }
    for (int c = k; c < cols; ++c) {
      y[r * out + m + c - k] = x[r * cols + c];
      dx[r * cols + c] = dy[r * out + m + c - k];
    }
  }

  auto backend = make_cpu_backend(1);
  std::vector<float> scratch(b.layer->scratch_floats() * rows, NAN), got_y(y.size()), got_dx(dx.size(), NAN),
      got_grad(grad.size(), NAN);
  LayerContext ctx{*backend};
  ctx.scratch = scratch.data();
  b.layer->forward(ctx, b.params.data(), x.data(), got_y.data(), rows);
  b.layer->backward(ctx, b.params.data(), x.data(), got_y.data(), dy.data(), got_dx.data(), got_grad.data(), rows,
                    false);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(got_y[i], y[i], 1e-6) << "y " << i;
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(got_dx[i], dx[i], 1e-6) << "dx " << i;
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_NEAR(got_grad[i], grad[i], 1e-5) << "grad " << i;
  for (int r = 0; r < rows; ++r) {  // the passed-on values are copies, exactly
    for (int c = k; c < cols; ++c) {
      EXPECT_EQ(got_y[r * out + m + c - k], x[r * cols + c]);
      EXPECT_EQ(got_dx[r * cols + c], dy[r * out + m + c - k]);
    }
  }

  // Without dx (the model's first layer, no input gradient wanted): the same gradients, added to
  // what is there when accumulating.
  std::vector<float> again(grad.size(), 1.0f);
  b.layer->forward(ctx, b.params.data(), x.data(), got_y.data(), rows);
  b.layer->backward(ctx, b.params.data(), x.data(), got_y.data(), dy.data(), nullptr, again.data(), rows, true);
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_NEAR(again[i], got_grad[i] + 1.0f, 1e-6) << "accumulated " << i;
}

// A block whose layers change nothing's shape or are identities still splits and joins exactly.
TEST(BottomLayerTest, IdentityAndElementwiseLayersInside) {
  const int rows = 3, cols = 5;
  const auto x = random_floats(rows * cols, 34, -1.0f, 1.0f), dy = random_floats(rows * cols, 35, -1.0f, 1.0f);
  auto backend = make_cpu_backend(1);
  for (const std::string spec : {"bottom 2(flatten)", "bottom 2(relu)"}) {
    Block b = block(spec, cols);
    std::vector<float> scratch(b.layer->scratch_floats() * rows), y(x.size()), dx(x.size());
    LayerContext ctx{*backend};
    ctx.scratch = scratch.data();
    b.layer->forward(ctx, nullptr, x.data(), y.data(), rows);
    b.layer->backward(ctx, nullptr, x.data(), y.data(), dy.data(), dx.data(), nullptr, rows, false);
    for (int i = 0; i < rows * cols; ++i) {
      const bool inside = i % cols < 2, relu = spec == "bottom 2(relu)";
      EXPECT_EQ(y[i], inside && relu ? std::max(x[i], 0.0f) : x[i]) << spec << " " << i;
      EXPECT_EQ(dx[i], inside && relu && x[i] <= 0 ? 0.0f : dy[i]) << spec << " " << i;
    }
  }
}

// What a CTR worker sends back to the tables: train_step's input gradient through a bottom
// block (the first layer) and the dot layer, against central finite differences of the loss.
TEST(BottomLayerTest, InputGradientMatchesFiniteDifferences) {
  auto backend = make_cpu_backend(1);
  const int batch = 6;
  const char* const spec = "bottom 5(dense 6, tanh, dense 3), dot 5 3, dense 4, tanh, dense 2";
  Model model(spec, {kCols}, 2, batch, false, *backend);
  std::vector<float> params(model.layout().total()), grad(params.size());
  model.init(5, params.data());
  auto x = random_floats(batch * kCols, 36, -1.0f, 1.0f);
  const std::vector<int32_t> y = {0, 1, 1, 0, 1, 0};
  std::vector<float> input_grad(x.size());
  model.train_step(params.data(), x.data(), y.data(), batch, grad.data(), nullptr, false, {}, input_grad.data());
  const auto loss = [&] { return model.train_step(params.data(), x.data(), y.data(), batch, grad.data()).loss_sum; };
  const float h = 1e-3f;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double numeric = test::central_difference(x, i, h, loss);
    worst = std::max(worst, std::fabs(numeric - input_grad[i]) / std::max(1.0, std::fabs(numeric)));
  }
  EXPECT_LT(worst, 2e-3);
}

// model.json lists the block with its K and inner layers and all their variables; the
// parameters saved and loaded come back bit for bit; a different block is refused by name.
TEST(BottomModelFileTest, TheBlockIsInModelJsonAndItsVariablesRoundTrip) {
  ModelDescription d;
  d.spec = kDlrm;
  d.input_shape = {kCols};
  d.classes = 2;
  const nlohmann::json j = nlohmann::json::parse(model_json_text(d));
  const nlohmann::json& b = j["layers"][0];
  EXPECT_EQ(b["kind"], "bottom");
  EXPECT_EQ(b["args"], (std::vector<int>{5}));
  ASSERT_EQ(b["layers"].size(), 3u);
  EXPECT_EQ(b["layers"][2]["text"], "dense 3");
  EXPECT_EQ(b["variables"],
            (std::vector<std::string>{"layer0.weight", "layer0.bias", "layer1.weight", "layer1.bias"}));
  EXPECT_EQ(j["layers"][2]["variables"], (std::vector<std::string>{"layer2.weight", "layer2.bias"}));

  const TempDir dir("bottom-model");
  write_model_json(dir.path, d);
  const Layout layout = layout_of(d);
  const std::vector<float> params = random_floats(layout.total(), 37);
  save_params(dir.path, layout, params.data());
  std::vector<float> loaded(layout.total());
  load_params(dir.path, layout, loaded.data());
  EXPECT_EQ(loaded, params);

  SavedModelQuery q;
  q.flag = "--init-params";
  q.dir = dir.path;
  q.model_given = true;
  q.model = std::string(kDlrm).replace(std::string(kDlrm).find("relu"), 4, "tanh");
  try {
    resolve_saved_model(q);
    ADD_FAILURE() << "a different block was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0 is 'bottom 5(dense 6, relu, dense 3)'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pstrain
