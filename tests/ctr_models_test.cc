// The layers of the CTR models the field ships (docs/models.md): DCN-v2's `cross N` and the
// `parallel(... | ...)` block (wide & deep, DeepFM): the grammar and its errors, shapes, variables
// and scratch, the forward passes against their definitions written out here, the input's and the
// parameters' gradients against finite differences, --recompute, and model.json with a save/load
// round trip and a refused mismatch. The parameter gradients of whole models through them are also
// in layers_test.cc (ModelGradientTest.CrossLayersMatchFiniteDifferences,
// ModelGradientTest.ParallelBlocksMatchFiniteDifferences).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
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

std::string usage_error(const std::string& spec, const std::vector<size_t>& shape = {9}) {
  return test::network_error(spec, shape, 2);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(CrossGrammarTest, TheCountAndEveryError) {
  const auto layers = parse_model("Cross 3, dense 2");
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].kind, LayerKind::kCross);
  EXPECT_EQ(layers[0].args, (std::vector<double>{3}));
  EXPECT_TRUE(contains(usage_error("cross, dense 2"), "cross needs the number of cross layers (e.g. cross 3)"))
      << usage_error("cross, dense 2");
  EXPECT_TRUE(contains(usage_error("cross 0, dense 2"), "'0' is not the number of cross layers (a whole number in [1, 64])"));
  EXPECT_TRUE(contains(usage_error("cross 65, dense 2"), "[1, 64]"));
  EXPECT_TRUE(contains(usage_error("cross 2 3, dense 2"), "cross takes 1 number(s)"));
  EXPECT_EQ(usage_error("cross 2, dense 2", {2, 3, 3}),
            "--model: layer 1 'cross 2' needs a flat input (the dense features, then the embedding rows), but gets an "
            "image of 2x3x3 (put a flatten before it)");
  EXPECT_TRUE(contains(usage_error("crss 2, dense 2"), "did you mean 'cross'")) << usage_error("crss 2, dense 2");
}

TEST(CrossNetworkTest, ShapesVariablesScratchAndSummary) {
  const Network net("dense 6, cross 3, relu, dense 2", {9}, 2);
  const Layer& cross = *net.layers()[1];
  EXPECT_EQ(cross.out().text(), "6");
  EXPECT_EQ(cross.param_layers(), 3);
  const Layout& layout = net.layout();
  for (int p = 1; p <= 3; ++p) {
    EXPECT_EQ(layout.at("layer" + std::to_string(p) + ".weight").shape, (std::vector<size_t>{6, 6}));
    EXPECT_EQ(layout.at("layer" + std::to_string(p) + ".bias").shape, (std::vector<size_t>{6}));
  }
  EXPECT_EQ(layout.at("layer4.weight").shape, (std::vector<size_t>{6, 2}));
  EXPECT_EQ(cross.weight_offset(), layout.at("layer1.weight").offset);
  EXPECT_EQ(cross.scratch_floats(), 5u * 6);  // x_1, x_2 and u_0, u_1, u_2
  auto backend = make_cpu_backend(1);
  EXPECT_EQ(cross.col_floats(7, *backend), 3u * 7 * 6);
  EXPECT_EQ(net.summary(), "9 -> dense 6 -> 6 -> cross 3 -> 6 -> relu -> dense 2 -> 2");
}

// x_{l+1} = x0 * (x_l W_l + b_l) + x_l, in double here.
TEST(CrossLayerTest, ForwardIsItsDefinition) {
  auto backend = make_cpu_backend(1);
  const int batch = 3, d = 5, layers = 2;
  Model model("cross 2, dense 2", {d}, 2, batch, false, *backend);
  std::vector<float> params(model.layout().total());
  model.init(4, params.data());
  for (size_t i = 0; i < params.size(); ++i) params[i] += 0.1f * std::cos(static_cast<float>(i));
  const auto x = random_floats(batch * d, 12, -1.5f, 1.5f);
  const float* logits = model.logits(params.data(), x.data(), batch);
  std::vector<float> out(batch * 2);
  backend->download(out.data(), logits, out.size());
  const Layout& layout = model.layout();
  for (int r = 0; r < batch; ++r) {
    std::vector<double> x0(x.begin() + r * d, x.begin() + (r + 1) * d), xl = x0;
    for (int l = 0; l < layers; ++l) {
      const float* w = params.data() + layout.at("layer" + std::to_string(l) + ".weight").offset;
      const float* b = params.data() + layout.at("layer" + std::to_string(l) + ".bias").offset;
      std::vector<double> next(d);
      for (int j = 0; j < d; ++j) {
        double u = b[j];
        for (int i = 0; i < d; ++i) u += xl[i] * w[i * d + j];
        next[j] = x0[j] * u + xl[j];
      }
      xl = next;
    }
    const float* w = params.data() + layout.at("layer2.weight").offset;
    const float* b = params.data() + layout.at("layer2.bias").offset;
    for (int k = 0; k < 2; ++k) {
      double z = b[k];
      for (int j = 0; j < d; ++j) z += xl[j] * w[j * 2 + k];
      EXPECT_NEAR(out[r * 2 + k], z, 1e-5 * std::max(1.0, std::fabs(z))) << r << " " << k;
    }
  }
}

// The input's gradient (what reaches the embedding rows) and every parameter's, against central
// differences, for `spec` on flat records of `cols`.
void check_gradients(const std::string& spec, size_t cols, bool recompute = false) {
  auto backend = make_cpu_backend(1);
  const int batch = 5;
  Model model(spec, {cols}, 2, batch, recompute, *backend);
  std::vector<float> params(model.layout().total()), grad(params.size()), scratch(params.size());
  model.init(6, params.data());
  for (size_t i = 0; i < params.size(); ++i) params[i] += 0.05f * std::sin(static_cast<float>(i));
  auto x = random_floats(batch * cols, 41, -1.0f, 1.0f);
  const std::vector<int32_t> y = {0, 1, 1, 0, 1};
  std::vector<float> input_grad(x.size());
  model.train_step(params.data(), x.data(), y.data(), batch, grad.data(), nullptr, false, {}, input_grad.data());
  const auto loss = [&] {
    return model.train_step(params.data(), x.data(), y.data(), batch, scratch.data()).loss_sum;
  };
  const float h = 1e-3f;
  double worst_input = 0, worst_param = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double numeric = test::central_difference(x, i, h, loss);
    worst_input = std::max(worst_input, std::fabs(numeric - input_grad[i]) / std::max(1.0, std::fabs(numeric)));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const double numeric = test::central_difference(params, i, h, loss);
    worst_param = std::max(worst_param, std::fabs(numeric - grad[i]) / std::max(1.0, std::fabs(numeric)));
  }
  EXPECT_LT(worst_input, 2e-3) << spec;
  EXPECT_LT(worst_param, 2e-3) << spec;
}

TEST(CrossLayerTest, GradientsMatchFiniteDifferences) {
  check_gradients("cross 1, dense 2", 7);
  check_gradients("cross 3, tanh, dense 2", 7);
  check_gradients("dense 6, tanh, cross 2, dense 3, tanh, dense 2", 7);
}

TEST(CrossLayerTest, RecomputeGivesTheSameGradients) {
  auto backend = make_cpu_backend(1);
  const int batch = 4;
  const char* const spec = "dense 6, tanh, cross 2, relu, dense 4, tanh, dense 2";
  Model plain(spec, {7}, 2, batch, false, *backend), again(spec, {7}, 2, batch, true, *backend);
  std::vector<float> params(plain.layout().total()), a(params.size()), b(params.size());
  plain.init(8, params.data());
  const auto x = random_floats(batch * 7, 44);
  const std::vector<int32_t> y = {1, 0, 0, 1};
  plain.train_step(params.data(), x.data(), y.data(), batch, a.data());
  again.train_step(params.data(), x.data(), y.data(), batch, b.data());
  EXPECT_EQ(a, b);
}

TEST(ParallelGrammarTest, BranchesAndEveryError) {
  const auto layers = parse_model("PARALLEL(dense 2 | dense 4, relu, dropout 0.1, dense 2), relu, dense 2");
  ASSERT_EQ(layers.size(), 3u);
  const LayerSpec& p = layers[0];
  EXPECT_EQ(p.kind, LayerKind::kParallel);
  EXPECT_EQ(p.text, "PARALLEL(dense 2 | dense 4, relu, dropout 0.1, dense 2)");
  ASSERT_EQ(p.layers.size(), 2u);
  EXPECT_EQ(p.layers[0].kind, LayerKind::kBranch);
  EXPECT_EQ(p.layers[0].text, "dense 2");
  EXPECT_EQ(p.layers[1].text, "dense 4, relu, dropout 0.1, dense 2");
  ASSERT_EQ(p.layers[1].layers.size(), 4u);
  EXPECT_EQ(p.layers[1].layers[3].text, "dense 2");

  EXPECT_TRUE(contains(usage_error("parallel(dense 2), dense 2"),
                       "a parallel block sums two branches or more, separated by '|'"));
  EXPECT_TRUE(contains(usage_error("parallel(dense 2 | ), dense 2"), "branch 2 of the parallel block of layer 1 has no layers"));
  EXPECT_TRUE(contains(usage_error("parallel(dense 2 | residual(dense 2)), dense 2"), "blocks do not nest"));
  EXPECT_TRUE(contains(usage_error("parallel(dense 2 | dense 3, softmax)"), "softmax (the loss) cannot be in a parallel block"));
  EXPECT_TRUE(contains(usage_error("parallel dense 2 | dense 2"), "parallel takes its layers in parentheses"));
  EXPECT_TRUE(contains(usage_error("dense 4, parallel(dense 2 | dense 5, relu, dense 3)"),
                       "layer 2 'parallel(dense 2 | dense 5, relu, dense 3)' sums its branches, but branch 1 'dense 2' "
                       "gives 2 and branch 2 'dense 5, relu, dense 3' gives 3 (end each branch with the same width"))
      << usage_error("dense 4, parallel(dense 2 | dense 5, relu, dense 3)");
  EXPECT_TRUE(contains(usage_error("parallel(dense 2 | dense 4, relu, conv 2 3)"), "layer 1.2.3 'conv 2 3' needs an image input"))
      << usage_error("parallel(dense 2 | dense 4, relu, conv 2 3)");
}

TEST(ParallelNetworkTest, ShapesVariablesScratchAndSummary) {
  const Network net("parallel(dense 2 | dense 4, relu, dense 2 | flatten), tanh, dense 2", {2}, 2);
  const Layer& p = *net.layers()[0];
  EXPECT_EQ(p.param_layers(), 3);
  const Layout& layout = net.layout();
  EXPECT_EQ(layout.at("layer0.weight").shape, (std::vector<size_t>{2, 2}));
  EXPECT_EQ(layout.at("layer1.weight").shape, (std::vector<size_t>{2, 4}));
  EXPECT_EQ(layout.at("layer2.weight").shape, (std::vector<size_t>{4, 2}));
  EXPECT_EQ(layout.at("layer3.weight").shape, (std::vector<size_t>{2, 2}));
  // Per sample: the first chain's output and two gradient buffers of 2; the second's dense 4
  // (relu in place) and dense 2 and two of 4; the third's two of 2 (flatten computes nothing).
  EXPECT_EQ(p.scratch_floats(), (2u + 2 * 2) + (4 + 2 + 2 * 4) + 2 * 2);
  EXPECT_EQ(net.summary(), "2 -> parallel(dense 2 -> 2 | dense 4 -> 4 -> relu -> dense 2 -> 2 | flatten) summed -> "
                           "2 -> tanh -> dense 2 -> 2");
}

// y = x W0 + b0 + relu(x W1 + b1) W2 + b2 + x, in double here.
TEST(ParallelLayerTest, ForwardIsTheSumOfItsBranches) {
  auto backend = make_cpu_backend(1);
  const int batch = 4, d = 3;
  Model model("parallel(dense 3 | dense 5, relu, dense 3 | flatten)", {d}, 3, batch, false, *backend);
  std::vector<float> params(model.layout().total());
  model.init(9, params.data());
  for (size_t i = 0; i < params.size(); ++i) params[i] += 0.1f * std::sin(static_cast<float>(i));
  const auto x = random_floats(batch * d, 13, -1.0f, 1.0f);
  std::vector<float> out(batch * 3);
  backend->download(out.data(), model.logits(params.data(), x.data(), batch), out.size());
  const Layout& layout = model.layout();
  const auto dense = [&](const std::vector<double>& in, int p, int outputs) {
    const float* w = params.data() + layout.at("layer" + std::to_string(p) + ".weight").offset;
    const float* b = params.data() + layout.at("layer" + std::to_string(p) + ".bias").offset;
    std::vector<double> y(outputs);
    for (int k = 0; k < outputs; ++k) {
      y[k] = b[k];
      for (size_t i = 0; i < in.size(); ++i) y[k] += in[i] * w[i * outputs + k];
    }
    return y;
  };
  for (int r = 0; r < batch; ++r) {
    const std::vector<double> xr(x.begin() + r * d, x.begin() + (r + 1) * d);
    const std::vector<double> wide = dense(xr, 0, 3);
    std::vector<double> h = dense(xr, 1, 5);
    for (double& v : h) v = std::max(v, 0.0);
    const std::vector<double> deep = dense(h, 2, 3);
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(out[r * 3 + k], wide[k] + deep[k] + xr[k], 1e-5) << r << " " << k;
  }
}

TEST(ParallelLayerTest, GradientsMatchFiniteDifferences) {
  check_gradients("parallel(dense 2 | dense 6, tanh, dense 2)", 7);
  // DeepFM's form: the pairs' sum beside an MLP, after a layer whose gradient needs the block's dx.
  check_gradients("dense 8, tanh, parallel(dense 2 | dot 4 2, dense 2 | dense 5, sigmoid, dropout 0.3, dense 2)", 7);
  // DCN-v2's parallel form, and an identity branch.
  check_gradients("dense 6, parallel(cross 2, dense 2 | dense 4, tanh, dense 2), tanh, dense 2", 7);
  check_gradients("dense 6, parallel(flatten | bn, dense 6, tanh), dense 2", 7);
}

TEST(ParallelModelFileTest, TheBlockIsInModelJsonAndItsVariablesRoundTrip) {
  const char* const spec = "parallel(dense 1 | dot 3 2, dense 1 | dense 4, relu, dense 1), dense 2";
  ModelDescription d;
  d.spec = spec;
  d.input_shape = {8};
  d.classes = 2;
  const nlohmann::json j = nlohmann::json::parse(model_json_text(d));
  const nlohmann::json& b = j["layers"][0];
  EXPECT_EQ(b["kind"], "parallel");
  ASSERT_EQ(b["layers"].size(), 3u);
  EXPECT_EQ(b["layers"][1]["kind"], "branch");
  EXPECT_EQ(b["layers"][1]["text"], "dot 3 2, dense 1");
  ASSERT_EQ(b["layers"][2]["layers"].size(), 3u);
  EXPECT_EQ(b["variables"], (std::vector<std::string>{"layer0.weight", "layer0.bias", "layer1.weight", "layer1.bias",
                                                      "layer2.weight", "layer2.bias", "layer3.weight", "layer3.bias"}));
  EXPECT_EQ(j["layers"][1]["variables"], (std::vector<std::string>{"layer4.weight", "layer4.bias"}));

  const TempDir dir("parallel-model");
  write_model_json(dir.path, d);
  const Layout layout = layout_of(d);
  const std::vector<float> params = random_floats(layout.total(), 38);
  save_params(dir.path, layout, params.data());
  std::vector<float> loaded(layout.total());
  load_params(dir.path, layout, loaded.data());
  EXPECT_EQ(loaded, params);

  SavedModelQuery q;
  q.flag = "--init-params";
  q.dir = dir.path;
  q.model_given = true;
  q.model = "parallel(dense 1 | dot 3 2, dense 1 | dense 4, tanh, dense 1), dense 2";
  try {
    resolve_saved_model(q);
    ADD_FAILURE() << "a different block was accepted";
  } catch (const UsageError& e) {
    EXPECT_TRUE(contains(e.what(), "layer 0 is 'parallel(dense 1 | dot 3 2, dense 1 | dense 4, relu, dense 1)'"))
        << e.what();
  }
  q.model = spec;  // the same model is taken
  EXPECT_NO_THROW(resolve_saved_model(q));
}

TEST(CrossModelFileTest, EachCrossLayerHasItsVariables) {
  ModelDescription d;
  d.spec = "cross 2, dense 2";
  d.input_shape = {5};
  d.classes = 2;
  const nlohmann::json j = nlohmann::json::parse(model_json_text(d));
  EXPECT_EQ(j["layers"][0]["variables"],
            (std::vector<std::string>{"layer0.weight", "layer0.bias", "layer1.weight", "layer1.bias"}));
  EXPECT_EQ(j["layers"][1]["variables"], (std::vector<std::string>{"layer2.weight", "layer2.bias"}));
}

}  // namespace
}  // namespace pstrain
