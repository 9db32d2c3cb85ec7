// Residual blocks in the layer list (docs/models.md, "Residual blocks"): the grammar and its
// errors, shapes, projections and variable names, the block's memory, --recompute and gradient
// accumulation on a ResNet-style model, model.json, and the mirrored contract of a job that
// trains one. Finite differences of the blocks are in layers_test.cc
// (ModelGradientTest.ResidualBlocksMatchFiniteDifferences); the GPU against the CPU in
// cuda_backend_test.cc.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "shared/util/error.h"
#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"
#include "test_util/network.h"
#include "test_util/params.h"
#include "test_util/process.h"
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

// Two blocks on 1x8x8 images: one with the identity shortcut, one that halves the resolution and
// changes the channels (a 1x1 projection of stride 2).
const char* const kResNet =
    "conv 4 3 pad=1, relu, residual(conv 4 3 pad=1, relu, conv 4 3 pad=1), relu, "
    "residual(conv 6 3 stride=2 pad=1, relu, conv 6 3 pad=1), relu, globalavgpool, dense 10";

std::string usage_error(const std::string& spec, const std::vector<size_t>& shape = {1, 8, 8}) {
  return test::network_error(spec, shape, 10);
}

// The caret line under the spec in an error: `length` carets at `position`.
std::string pointer(const std::string& spec, size_t position, size_t length) {
  return "\n  " + spec + "\n  " + std::string(position, ' ') + std::string(length, '^');
}

TEST(ResidualGrammarTest, ABlockIsOneLayerHoldingItsList) {
  const auto layers = parse_model("conv 4 3 pad=1, ReSiDuAl (Conv 4 3 pad=1, RELU, dropout 0.1,), relu, dense 10");
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_EQ(layers[1].kind, LayerKind::kResidual);
  EXPECT_EQ(layers[1].text, "ReSiDuAl (Conv 4 3 pad=1, RELU, dropout 0.1,)");
  EXPECT_EQ(layers[1].position, 16u);
  ASSERT_EQ(layers[1].layers.size(), 3u);  // a trailing comma inside, as outside
  EXPECT_EQ(layers[1].layers[0].kind, LayerKind::kConv);
  EXPECT_EQ(layers[1].layers[0].args, (std::vector<double>{4, 3}));
  EXPECT_EQ(layers[1].layers[0].position, 26u);  // in the whole list
  EXPECT_EQ(layers[1].layers[1].kind, LayerKind::kRelu);
  EXPECT_EQ(layers[1].layers[2].args, (std::vector<double>{0.1}));
  EXPECT_EQ(layers[2].kind, LayerKind::kRelu);
}

TEST(ResidualGrammarTest, ErrorsNameTheBlockAndPointIntoTheSpec) {
  std::string spec = "conv 4 3 pad=1, residual(conv 4 x), dense 10";
  EXPECT_NE(usage_error(spec).find("'x' is not the kernel size"), std::string::npos) << usage_error(spec);
  EXPECT_NE(usage_error(spec).find(pointer(spec, spec.find("x)"), 1)), std::string::npos) << usage_error(spec);
  spec = "residual(conv 4 3 pad=1, relu, flatten, dense 10";
  EXPECT_NE(usage_error(spec).find("'(' is not closed" + pointer(spec, 8, 1)), std::string::npos) << usage_error(spec);
  spec = "conv 4 3, relu), dense 10";
  EXPECT_NE(usage_error(spec).find("')' closes no '('" + pointer(spec, 14, 1)), std::string::npos) << usage_error(spec);
  spec = "residual(relu, residual(relu)), flatten, dense 10";
  EXPECT_NE(usage_error(spec).find("residual blocks do not nest" + std::string(" (a block's layers are plain layers)") +
                                   pointer(spec, 15, 8)),
            std::string::npos)
      << usage_error(spec);
  EXPECT_NE(usage_error("residual conv 4 3, flatten, dense 10").find("residual takes its layers in parentheses"),
            std::string::npos);
  spec = "relu, residual( ), flatten, dense 10";
  EXPECT_NE(usage_error(spec).find("the residual block of layer 2 has no layers" + pointer(spec, 14, 3)),
            std::string::npos)
      << usage_error(spec);
  spec = "residual(relu) tanh, flatten, dense 10";
  EXPECT_NE(usage_error(spec).find("'tanh' follows a residual block's ')' (a comma is missing?)" + pointer(spec, 15, 4)),
            std::string::npos)
      << usage_error(spec);
  EXPECT_NE(usage_error("residual(relu, softmax), flatten, dense 10").find("softmax (the loss) cannot be in a residual"),
            std::string::npos);
  EXPECT_NE(usage_error("relu, residual(relu,, tanh), flatten, dense 10").find("layer 2.2 is empty"), std::string::npos);
  EXPECT_NE(usage_error("residual(swish), flatten, dense 10").find("'swish' is not a layer (embedding D (first only), dense, conv, "),
            std::string::npos);
  EXPECT_NE(usage_error("dense 10, swish").find("softmax, residual(...), parallel(... | ...))"), std::string::npos) << usage_error("dense 10, swish");
}

TEST(ResidualGrammarTest, ShapesTheProjectionCannotMatchNameTheBlockAndBothShapes) {
  // Padding 2 makes 8x8 into 10x10: no stride of a 1x1 convolution maps 8 to 10.
  std::string spec = "conv 2 3 pad=1, residual(conv 4 3 pad=2, relu), flatten, dense 10";
  EXPECT_NE(usage_error(spec).find("--model: layer 2 'residual(conv 4 3 pad=2, relu)' maps 2x8x8 to 4x10x10: no 1x1 "
                                   "convolution with a whole stride maps 8x8 to 10x10, so the shortcut has no "
                                   "projection" +
                                   pointer(spec, 16, 30)),
            std::string::npos)
      << usage_error(spec);
  spec = "residual(flatten, dense 10)";
  EXPECT_NE(usage_error(spec).find("layer 1 'residual(flatten, dense 10)' maps 1x8x8 to 10: the shortcut cannot "
                                   "project an image to a flat vector"),
            std::string::npos)
      << usage_error(spec);
  // The inner layers' own shape errors name them by block and place.
  EXPECT_NE(usage_error("flatten, residual(dense 6, conv 4 3), dense 10")
                .find("--model: layer 2.2 'conv 4 3' needs an image input (channels x height x width), but gets a "
                      "flat vector of 6 values"),
            std::string::npos);
}

TEST(ResidualNetworkTest, ShapesVariablesAndSummary) {
  const Network net(kResNet, {1, 8, 8}, 10);
  ASSERT_EQ(net.layers().size(), 8u);
  EXPECT_EQ(net.layers()[2]->out().text(), "4x8x8");
  EXPECT_EQ(net.layers()[4]->out().text(), "6x4x4");
  // p counts in order of appearance: a block's inner layers, then its projection.
  const std::vector<std::pair<std::string, std::vector<size_t>>> expected = {
      {"layer0.weight", {4, 1, 3, 3}}, {"layer1.weight", {4, 4, 3, 3}}, {"layer2.weight", {4, 4, 3, 3}},
      {"layer3.weight", {6, 4, 3, 3}}, {"layer4.weight", {6, 6, 3, 3}}, {"layer5.weight", {6, 4, 1, 1}},
      {"layer6.weight", {6, 10}}};
  ASSERT_EQ(net.layout().tensors().size(), 2 * expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(net.layout().tensors()[2 * i].name, expected[i].first);
    EXPECT_EQ(net.layout().tensors()[2 * i].shape, expected[i].second) << expected[i].first;
  }
  EXPECT_EQ(net.summary(),
            "1x8x8 -> conv 4 3 pad=1 -> 4x8x8 -> relu -> residual(conv 4 3 pad=1 -> 4x8x8 -> relu -> conv 4 3 pad=1 "
            "-> 4x8x8) + identity -> 4x8x8 -> relu -> residual(conv 6 3 stride=2 pad=1 -> 6x4x4 -> relu -> conv 6 3 "
            "pad=1 -> 6x4x4) + projection conv 6 1 stride=2 -> 6x4x4 -> relu -> globalavgpool -> 6 -> dense 10 -> 10");
  // A flat block that changes the width projects with a dense layer.
  const Network flat("dense 8, residual(dense 5, tanh), dense 10", {6}, 10);
  EXPECT_EQ(flat.layout().at("layer2.weight").shape, (std::vector<size_t>{8, 5}));  // after the block's dense
  EXPECT_NE(flat.summary().find("+ projection dense 5 -> 5"), std::string::npos) << flat.summary();
}

// The projection starts He-uniform over its fan-in (the input's channels), from the seed alone.
TEST(ResidualNetworkTest, InitialisationIsDeterministicAndHeUniform) {
  const Network net(kResNet, {1, 8, 8}, 10);
  std::vector<float> a(net.layout().total()), b(a.size()), c(a.size());
  net.init(3, a.data());
  net.init(3, b.data());
  net.init(4, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const TensorSpec& projection = net.layout().at("layer5.weight");
  const float limit = std::sqrt(6.0f / 4.0f);
  float largest = 0;
  for (size_t i = 0; i < projection.size; ++i) largest = std::max(largest, std::fabs(a[projection.offset + i]));
  EXPECT_LE(largest, limit);
  EXPECT_GT(largest, 0.5f * limit);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(a[net.layout().at("layer5.bias").offset + i], 0.0f);
}

// A block's insides (its outputs, its own gradient buffers) are counted in the plan: block 1 keeps
// two 4x8x8 outputs (relu in place) and two gradient buffers of 256; block 2 two 6x4x4 outputs and
// two of 256 (its input's gradient). Outside: 256 + 256 + 96 + 6 + 10 outputs (relu in place after
// a block too), gradients 256 + 256, and the largest convolution's scratch (with the default
// im2col, the 4-channel 3x3 convolution on 8x8: 36 x 64 floats a sample, 4 samples).
TEST(ResidualNetworkTest, TheBlocksInsidesAreInTheMemoryPlan) {
  const Network net(kResNet, {1, 8, 8}, 10);
  EXPECT_EQ(net.layers()[2]->scratch_floats(), 4u * 256);
  EXPECT_EQ(net.layers()[4]->scratch_floats(), 2u * 96 + 2 * 256);
  auto backend = make_cpu_backend(1);
  EXPECT_EQ(backend->Backend::conv_scratch_floats(4, ConvGeometry{4, 8, 8, 3, 1, 1, 8, 8}, 4), 36u * 64 * 4);
  size_t col = 0;
  for (const auto& layer : net.layers()) col = std::max(col, layer->col_floats(4, *backend));
  EXPECT_GT(col, 0u);
  EXPECT_EQ(net.activation_floats(4, false, *backend), (624 + 512 + 1024 + 704) * 4 + col);
  const size_t before = backend->bytes_allocated();
  {
    Model model(kResNet, {1, 8, 8}, 10, 4, false, *backend);
    EXPECT_EQ(backend->bytes_allocated() - before, net.activation_floats(4, false, *backend) * sizeof(float));
  }
  // docs/models.md's example on 1x28x28: 4 x 25,088 and 2 x 12,544 + 2 x 25,088 floats a sample.
  const Network example("conv 32 3 pad=1, relu, residual(conv 32 3 pad=1, relu, conv 32 3 pad=1), relu, "
                        "residual(conv 64 3 stride=2 pad=1, relu, conv 64 3 pad=1), relu, globalavgpool, dense 10",
                        {1, 28, 28}, 10);
  EXPECT_EQ(example.layers()[2]->scratch_floats(), 4u * 25088);
  EXPECT_EQ(example.layers()[4]->scratch_floats(), 2u * 12544 + 2 * 25088);
  EXPECT_NE(example.summary().find("-> residual(conv 64 3 stride=2 pad=1 -> 64x14x14 -> relu -> conv 64 3 pad=1 -> "
                                   "64x14x14) + projection conv 64 1 stride=2 -> 64x14x14 -> "),
            std::string::npos)
      << example.summary();
  EXPECT_EQ(example.layout().at("layer5.weight").shape, (std::vector<size_t>{64, 32, 1, 1}));
}

// --recompute and gradient accumulation leave a ResNet's gradients as they are: bit for bit with
// --recompute (the same parameters after 10 steps), to rounding for two accumulated halves.
TEST(ResidualNetworkTest, RecomputeAndAccumulationGiveTheSameGradients) {
  auto backend = make_cpu_backend(1);
  const int batch = 6;
  std::vector<std::vector<float>> results;
  for (const bool recompute : {false, true}) {
    Model model(kResNet, {1, 8, 8}, 10, batch, recompute, *backend);
    const size_t n = model.layout().total();
    std::vector<float> params(n), grad(n), halves(n);
    model.init(5, params.data());
    for (int s = 0; s < 10; ++s) {
      const auto x = random_floats(static_cast<size_t>(batch) * 64, 200 + s);
      std::vector<int32_t> y(batch);
      for (int i = 0; i < batch; ++i) y[i] = (s + 3 * i) % 10;
      model.train_step(params.data(), x.data(), y.data(), batch, grad.data());
      model.train_step(params.data(), x.data(), y.data(), 3, halves.data());
      model.train_step(params.data(), x.data() + 3 * 64, y.data() + 3, 3, halves.data(), nullptr, true);
      for (size_t i = 0; i < n; ++i) ASSERT_NEAR(halves[i], grad[i], 1e-5 * (1 + std::fabs(grad[i]))) << i;
      for (size_t i = 0; i < n; ++i) params[i] -= 0.05f * grad[i] / batch;
    }
    results.push_back(params);
  }
  EXPECT_EQ(results[0], results[1]);
}

// model.json lists a block with its inner layers and all its variables (the projection's last),
// and reads back; a --model that differs inside a block is refused by name.
TEST(ResidualModelFileTest, TheBlockAndItsVariablesAreInModelJson) {
  ModelDescription d;
  d.spec = kResNet;
  d.input_shape = {1, 8, 8};
  d.classes = 10;
  const nlohmann::json j = nlohmann::json::parse(model_json_text(d));
  const nlohmann::json& block = j["layers"][4];
  EXPECT_EQ(block["kind"], "residual");
  EXPECT_EQ(block["text"], "residual(conv 6 3 stride=2 pad=1, relu, conv 6 3 pad=1)");
  ASSERT_EQ(block["layers"].size(), 3u);
  EXPECT_EQ(block["layers"][0]["text"], "conv 6 3 stride=2 pad=1");
  EXPECT_EQ(block["variables"], (std::vector<std::string>{"layer3.weight", "layer3.bias", "layer4.weight",
                                                           "layer4.bias", "layer5.weight", "layer5.bias"}));
  EXPECT_EQ(j["layers"][7]["variables"], (std::vector<std::string>{"layer6.weight", "layer6.bias"}));

  const TempDir dir("residual-model");
  write_model_json(dir.path, d);
  const auto read = read_model_json(dir.path);
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->spec, kResNet);
  std::vector<float> params(layout_of(d).total(), 0.5f);
  save_params(dir.path, layout_of(d), params.data());
  SavedModelQuery q;
  q.flag = "--init-params";
  q.dir = dir.path;
  q.model_given = true;
  q.model = std::string(kResNet).replace(std::string(kResNet).find("relu, conv 6"), 4, "tanh");
  try {
    resolve_saved_model(q);
    ADD_FAILURE() << "a different block was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("layer 4 is 'residual(conv 6 3 stride=2 pad=1, relu, conv 6 3 pad=1)'"),
              std::string::npos)
        << e.what();
  }
}

// --- Jobs ----------------------------------------------------------------------------------

// A ResNet with dropout inside a block and a flat block after the pooling.
const char* const kJobModel =
    "conv 4 3 pad=1, relu, residual(conv 4 3 pad=1, relu, dropout 0.2, conv 4 3 pad=1), relu, "
    "residual(conv 6 3 stride=2 pad=1, relu, conv 6 3 pad=1), relu, globalavgpool, residual(dense 6, tanh, dense 6), "
    "dense 10";

class ResidualJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_dir_ = new TempDir("residual-data");
    write_synthetic_mnist(data_dir_->path, "train", 300, 8, 8, 11, false);
    write_synthetic_mnist(data_dir_->path, "t10k", 100, 8, 8, 12, false);
  }
  static void TearDownTestSuite() {
    delete data_dir_;
    data_dir_ = nullptr;
  }

  // 20 steps of `model` in sync mode; the saved parameters, or none where the job failed.
  static test::SavedParams train(const std::string& model, int num_ps, int num_workers, int batch,
                                 const std::string& optimizer, test::JobResult* result) {
    const TempDir dir("residual-job");
    test::Job job;
    job.num_ps = num_ps;
    job.num_workers = num_workers;
    job.dir = dir.path;
    const std::string lr = optimizer == "adam" ? "0.01" : optimizer == "momentum" ? "0.05" : "0.1";
    job.args = {"--data-dir", data_dir_->path, "--cache-dir", dir.path, "--model", model, "--steps", "20",
                "--epochs", "5", "--optimizer", optimizer, "--lr", lr, "--seed", "7", "--log-every", "5",
                "--timeout", "30", "--batch-size", std::to_string(batch), "--save-params", dir.path + "/params"};
    *result = test::run_job(job);
    return result->ok() ? test::load_saved_params(dir.path + "/params") : test::SavedParams{};
  }

  static TempDir* data_dir_;
};
TempDir* ResidualJobTest::data_dir_ = nullptr;

// The mirrored contract: 3 workers of batch 8 on 2 PS shards end with the parameters of one
// worker of batch 24, for every optimizer (dropout masks follow the records, inside blocks too).
TEST_F(ResidualJobTest, ThreeWorkersEqualOneOnTheConcatenatedBatch) {
  for (const std::string optimizer : {"sgd", "momentum", "adam"}) {
    test::JobResult one_result, three_result;
    const test::SavedParams one = train(kJobModel, 1, 1, 24, optimizer, &one_result);
    ASSERT_TRUE(one_result.ok()) << one_result.logs;
    EXPECT_NE(one_result.logs.find("+ projection conv 6 1 stride=2 -> 6x4x4"), std::string::npos) << one_result.logs;
    const test::SavedParams three = train(kJobModel, 2, 3, 8, optimizer, &three_result);
    ASSERT_TRUE(three_result.ok()) << three_result.logs;
    ASSERT_EQ(one.names.size(), 18u);  // 9 layers with parameters, projection included
    const double rel = test::relative_difference(one, three);
    EXPECT_LE(rel, 1e-5) << optimizer;
    std::printf("ResNet %s, S=2 N=3 vs N=1: max |difference| / max |parameter| = %.3g\n", optimizer.c_str(), rel);
  }
}

// A block no projection fits stops the worker with exit 2 and a message naming it and pointing
// at it, before it reaches for a PS (none listens at the address given).
TEST_F(ResidualJobTest, ABlockWithoutAProjectionIsExit2) {
  const TempDir dir("residual-exit2");
  const std::string spec = "conv 4 3, residual(conv 4 3 pad=2), flatten, dense 10";
  const test::ExitStatus status =
      test::wait_for(test::spawn({PSTRAIN_WORKER_BIN, "--data-dir", data_dir_->path, "--cache-dir", dir.path,
                                  "--ps-hosts", "127.0.0.1:1", "--batch-size", "8", "--model", spec},
                                 dir.path + "/w0.log"),
                     30);
  const std::string log = test::read_file(dir.path + "/w0.log");
  EXPECT_EQ(status.code, 2) << log;
  EXPECT_NE(log.find("--model: layer 2 'residual(conv 4 3 pad=2)' maps 4x6x6 to 4x8x8: no 1x1 convolution with a "
                     "whole stride maps 6x6 to 8x8, so the shortcut has no projection\n  " +
                     spec + "\n            " + std::string(24, '^') + " (see --help)"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace pstrain
