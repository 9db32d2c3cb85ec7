// Export and reuse (issue 30, item 5): --save-params writes DIR/model.json, so --evaluate,
// --init-params and --predict need no --model; pstrain-export turns a checkpoint into the same
// files; --predict writes each record's class probabilities.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"
#include "worker/data/npy_format.h"
#include "worker/model/model_file.h"

namespace pstrain::test {
namespace {

const char* const kCnn = "conv 4 3 pad=1, relu, maxpool 2, flatten, dense 12, relu, dropout 0.2, dense 10";
constexpr uint64_t kSeed = 1;  // the synthetic data's (train and test share the classes' templates)

std::string field(const std::string& log, const std::string& name) {
  std::smatch m;
  return std::regex_search(log, m, std::regex(name + "=([0-9.]+)")) ? m[1].str() : "none";
}

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("export");
    write_synthetic_mnist(dir_, "train", 400, 8, 8, kSeed, false);
    write_synthetic_mnist(dir_, "t10k", 120, 8, 8, kSeed, false);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A job of 2 workers and 2 PS shards, `steps` steps, checkpointing every 20 into NAME-ckpt and
  // saving NAME-params; returns the chief's log.
  std::string train(const std::string& name, const std::vector<std::string>& model, const std::string& steps = "40") {
    Job job;
    job.num_ps = 2;
    job.num_workers = 2;
    job.dir = dir_ + "/" + name;
    std::filesystem::create_directories(job.dir);
    job.args = {"--data-dir", dir_, "--cache-dir", dir_, "--batch-size", "8", "--steps", steps, "--optimizer", "sgd",
                "--lr", "0.2", "--save-params", dir_ + "/" + name + "-params", "--checkpoint-dir",
                dir_ + "/" + name + "-ckpt", "--checkpoint-every", "20"};
    job.args.insert(job.args.end(), model.begin(), model.end());
    const JobResult result = run_job(job);
    EXPECT_TRUE(result.ok()) << result.logs;
    return read_file(job.dir + "/w0.log");
  }

  // Runs a binary with `args`; its output in *log.
  ExitStatus run(std::vector<std::string> args, std::string* log) {
    const ExitStatus status = wait_for(spawn(args, dir_ + "/run.log"), 60);
    *log = read_file(dir_ + "/run.log");
    return status;
  }
  ExitStatus worker(std::vector<std::string> args, std::string* log) {
    args.insert(args.begin(), {PSTRAIN_WORKER_BIN, "--data-dir", dir_, "--cache-dir", dir_});
    return run(args, log);
  }
  ExitStatus evaluate(const std::string& params, std::vector<std::string> more, std::string* log) {
    more.insert(more.begin(), {"--evaluate", "--init-params", params});
    return worker(more, log);
  }
  ExitStatus export_checkpoint(std::vector<std::string> args, std::string* log) {
    args.insert(args.begin(), PSTRAIN_EXPORT_BIN);
    return run(args, log);
  }
  std::string test_set() const { return dir_ + "/t10k-images-idx3-ubyte," + dir_ + "/t10k-labels-idx1-ubyte"; }

  // The round trip of the acceptance for one model.
  void round_trip(const std::string& name, const std::vector<std::string>& model) {
    const std::string chief = train(name, model);
    const std::string params = dir_ + "/" + name + "-params";
    ASSERT_TRUE(std::filesystem::exists(params + "/model.json"));
    const std::string json = read_file(params + "/model.json");
    EXPECT_NE(json.find("\"format\": \"pstrain-model\""), std::string::npos) << json;
    EXPECT_NE(json.find("\"input_shape\": [\n    1,\n    8,\n    8\n  ]"), std::string::npos) << json;
    EXPECT_NE(json.find("\"test_accuracy\": "), std::string::npos) << json;

    std::string log;  // --evaluate without --model: the chief's figures
    ASSERT_TRUE(evaluate(params, {}, &log).ok()) << log;
    EXPECT_EQ(field(log, "test_loss"), field(chief, "test_loss")) << log << chief;
    EXPECT_EQ(field(log, "test_accuracy"), field(chief, "test_accuracy")) << log << chief;
    EXPECT_GT(std::stod(field(log, "test_accuracy")), 0.3) << log;
    const std::string accuracy = field(log, "test_accuracy");

    // The last checkpoint (step 40, 2 shards), exported, evaluates the same.
    const std::string exported = dir_ + "/" + name + "-exported";
    ASSERT_TRUE(export_checkpoint({dir_ + "/" + name + "-ckpt", exported}, &log).ok()) << log;
    EXPECT_NE(log.find("pstrain-export: step 40 ("), std::string::npos) << log;
    EXPECT_NE(log.find("2 shard(s)"), std::string::npos) << log;
    EXPECT_EQ(relative_difference(load_saved_params(params), load_saved_params(exported)), 0.0);
    ASSERT_TRUE(evaluate(exported, {}, &log).ok()) << log;
    EXPECT_EQ(field(log, "test_loss"), field(chief, "test_loss")) << log;
    EXPECT_EQ(field(log, "test_accuracy"), accuracy) << log;

    // --predict on the test set: its arg-max against the labels is the evaluation's accuracy.
    const std::string npy = dir_ + "/" + name + "-predictions.npy", csv = dir_ + "/" + name + "-predictions.csv";
    ASSERT_TRUE(worker({"--init-params", exported, "--predict", test_set(), "--predictions", npy}, &log).ok()) << log;
    EXPECT_NE(log.find("predictions: 120 records x 10 classes written to " + npy), std::string::npos) << log;
    std::vector<size_t> shape;
    const std::vector<float> p = read_npy(npy, &shape);
    ASSERT_EQ(shape, (std::vector<size_t>{120, 10}));
    int correct = 0;
    for (uint32_t r = 0; r < 120; ++r) {
      const float* row = &p[r * 10];
      float sum = 0;
      for (int c = 0; c < 10; ++c) sum += row[c];
      EXPECT_NEAR(sum, 1.0f, 1e-5f) << r;
      correct += std::max_element(row, row + 10) - row == synthetic_label(kSeed, r);
    }
    char text[16];
    std::snprintf(text, sizeof text, "%.4f", correct / 120.0);
    EXPECT_EQ(text, accuracy);

    ASSERT_TRUE(worker({"--init-params", params, "--predict", test_set(), "--predictions", csv}, &log).ok()) << log;
    const std::string table = read_file(csv);
    EXPECT_EQ(table.rfind("p0,p1,p2,p3,p4,p5,p6,p7,p8,p9\n", 0), 0u) << table.substr(0, 200);
    EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 121);
    const size_t first_row = table.find('\n') + 1;
    EXPECT_NEAR(std::stod(table.substr(first_row)), p[0], 1e-6) << table.substr(0, 200);
  }

  std::string dir_;
};

// A job that completes checkpoints its last version, though --checkpoint-every does not divide it:
// the export of the newest checkpoint is the job's result (issue 47; before, step 20's).
TEST_F(ExportTest, ACompletedJobCheckpointsItsLastStep) {
  train("last", {"--hidden", "16"}, "30");
  std::string log;
  ASSERT_TRUE(export_checkpoint({dir_ + "/last-ckpt", dir_ + "/last-exported"}, &log).ok()) << log;
  EXPECT_NE(log.find("pstrain-export: step 30 ("), std::string::npos) << log;
  EXPECT_EQ(relative_difference(load_saved_params(dir_ + "/last-params"), load_saved_params(dir_ + "/last-exported")),
            0.0);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/last-ckpt/v0000000020/MANIFEST"));
}

TEST_F(ExportTest, MlpRoundTripWithoutModelFlags) { round_trip("mlp", {"--hidden", "16"}); }

TEST_F(ExportTest, CnnRoundTripWithoutModelFlags) { round_trip("cnn", {"--model", kCnn}); }

// A ResNet (an identity block, a projected one, a flat one with a dense projection): its variables, the projections'
// included, go through --save-params, checkpoints, pstrain-export and --evaluate like any others.
TEST_F(ExportTest, ResNetRoundTripWithoutModelFlags) {
  round_trip("resnet", {"--model",
                        "conv 4 3 pad=1, relu, residual(conv 4 3 pad=1, relu, conv 4 3 pad=1), relu, "
                        "residual(conv 8 3 stride=2 pad=1, relu, conv 8 3 pad=1), relu, flatten, "
                        "residual(dense 16, relu), dense 10"});
}

// Batch norm's running statistics (the model's state, not on the PS shards) travel with the
// parameters: --save-params writes them and --evaluate and --predict normalise with them (the
// chief's test figures again), and the last checkpoint holds them, so its export evaluates the
// same. They moved from their start (means 0, variances 1).
TEST_F(ExportTest, BatchNormCnnRoundTripCarriesTheRunningStatistics) {
  round_trip("bn", {"--model", "conv 4 3 pad=1, batchnorm, relu, maxpool 2, flatten, dense 12, bn, relu, dense 10",
                    "--batchnorm-stats", "local"});
  const std::string params = dir_ + "/bn-params", exported = dir_ + "/bn-exported";
  EXPECT_NE(read_file(params + "/model.json").find("\"state\": ["), std::string::npos);
  for (const std::string name : {"layer1.running_mean", "layer1.running_var", "layer3.running_mean",
                                 "layer3.running_var"}) {
    std::vector<size_t> shape;
    const std::vector<float> saved = read_npy(params + "/" + name + ".npy", &shape);
    EXPECT_EQ(shape, (std::vector<size_t>{name[5] == '1' ? 4u : 12u})) << name;
    EXPECT_EQ(read_npy(exported + "/" + name + ".npy", &shape), saved) << name;
    const float start = name.find("var") != std::string::npos ? 1.0f : 0.0f;
    EXPECT_TRUE(std::any_of(saved.begin(), saved.end(), [start](float v) { return v != start; })) << name;
  }
}

// A given model must be the saved one: the message names the variable (or layer) and both shapes.
TEST_F(ExportTest, AModelThatIsNotTheSavedOneNamesTheVariableAndBothShapes) {
  train("a", {"--hidden", "16"});
  const std::string params = dir_ + "/a-params";
  std::string log;
  ExitStatus status = evaluate(params, {"--hidden", "32"}, &log);
  EXPECT_EQ(status.code, 2) << log;
  EXPECT_NE(log.find("--init-params " + params + ": layer0.weight has shape [64, 16] in " + params +
                     "/model.json, but the model needs [64, 32] (--hidden 32)"),
            std::string::npos)
      << log;
  status = evaluate(params, {"--model", "dense 16, tanh, dense 10"}, &log);
  EXPECT_EQ(status.code, 2) << log;
  EXPECT_NE(log.find("layer 1 is 'relu' in " + params + "/model.json, but 'tanh' in --model"), std::string::npos) << log;
  ASSERT_TRUE(evaluate(params, {"--model", "dense 16, relu, dropout 0.5, dense 10"}, &log).ok()) << log;  // the same

  // Data of another shape (10 x 10 images) than the model's.
  const std::string other = dir_ + "/other";
  std::filesystem::create_directories(other);
  write_synthetic_mnist(other, "t10k", 20, 10, 10, kSeed, false);
  status = worker({"--evaluate", "--init-params", params, "--test-data",
                   other + "/t10k-images-idx3-ubyte," + other + "/t10k-labels-idx1-ubyte"},
                  &log);
  EXPECT_EQ(status.code, 1) << log;
  EXPECT_NE(log.find("the model takes inputs of shape [1, 8, 8] (" + params + "/model.json), but the data's records "
                     "are [1, 10, 10]"),
            std::string::npos)
      << log;

  // Fine-tuning from the directory takes its model too.
  Job job;
  job.dir = dir_ + "/tune";
  std::filesystem::create_directories(job.dir);
  job.args = {"--data-dir", dir_, "--cache-dir", dir_, "--batch-size", "8", "--steps", "2", "--init-params", params};
  const JobResult result = run_job(job);
  ASSERT_TRUE(result.ok()) << result.logs;
  EXPECT_NE(read_file(job.dir + "/w0.log").find("model: 1x8x8 -> dense 16"), std::string::npos) << result.logs;
}

// Parameters saved before model.json existed work with --model, and without it say what is needed.
TEST_F(ExportTest, ADirectoryWithoutModelJsonNeedsTheModel) {
  train("a", {"--model", kCnn});
  const std::string params = dir_ + "/a-params";
  std::filesystem::remove(params + "/model.json");
  std::string log;
  const ExitStatus status = evaluate(params, {}, &log);
  EXPECT_EQ(status.code, 2) << log;
  EXPECT_NE(log.find("--init-params " + params + ": there is no " + params +
                     "/model.json (parameters saved by an older pstrain?), so give the model they were trained "
                     "with: --model"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("terminate called"), std::string::npos) << log;
  ASSERT_TRUE(evaluate(params, {"--model", kCnn}, &log).ok()) << log;
  // A directory that is not there is named as such, not blamed on an older pstrain.
  const std::string missing = dir_ + "/no-such-params";
  EXPECT_EQ(evaluate(missing, {}, &log).code, 2) << log;
  EXPECT_NE(log.find("--init-params " + missing + ": no such directory (a --save-params directory, or a pstrain-export "
                     "of a checkpoint)"),
            std::string::npos)
      << log;
}

TEST_F(ExportTest, ExportErrorsAndOlderCheckpointsAndNpz) {
  std::string log;
  const std::string empty = dir_ + "/empty";
  std::filesystem::create_directories(empty + "/v0000000010");  // no MANIFEST: incomplete
  ExitStatus status = export_checkpoint({empty, dir_ + "/out"}, &log);
  EXPECT_EQ(status.code, 1) << log;
  EXPECT_NE(log.find("E pstrain-export: no complete checkpoint in '" + empty + "'; v0000000010: incomplete (no MANIFEST)"),
            std::string::npos)
      << log;
  status = export_checkpoint({empty}, &log);
  EXPECT_EQ(status.code, 2) << log;

  train("a", {"--model", kCnn});
  const std::string ckpt = dir_ + "/a-ckpt", v40 = ckpt + "/v0000000040";
  ASSERT_TRUE(export_checkpoint({ckpt, dir_ + "/a.npz", "--format", "npz"}, &log).ok()) << log;
  const std::string npz = read_file(dir_ + "/a.npz");
  EXPECT_EQ(npz.rfind("PK\x03\x04", 0), 0u);
  const std::string bias = read_file(dir_ + "/a-params/layer1.bias.npy");
  EXPECT_NE(npz.find("layer1.bias.npy" + bias), std::string::npos);  // stored, right after its local header
  EXPECT_NE(npz.find("model.json{"), std::string::npos);

  // A checkpoint written before checkpoints recorded the model: --model and --input-shape.
  std::filesystem::remove(v40 + "/model.json");
  status = export_checkpoint({v40, dir_ + "/old"}, &log);
  EXPECT_EQ(status.code, 2) << log;
  EXPECT_NE(log.find("checkpoint " + v40 + " has no model.json"), std::string::npos) << log;
  status = export_checkpoint({v40, dir_ + "/old", "--model", "conv 5 3 pad=1, relu, maxpool 2, flatten, dense 12, relu, dense 10",
                              "--input-shape", "1x8x8"},
                             &log);
  EXPECT_EQ(status.code, 2) << log;
  EXPECT_NE(log.find("layer0.weight has shape [4, 1, 3, 3] in the checkpoint's MANIFEST, but the model needs [5, 1, 3, 3]"),
            std::string::npos)
      << log;
  ASSERT_TRUE(export_checkpoint({v40, dir_ + "/old", "--model", kCnn, "--input-shape", "1x8x8"}, &log).ok()) << log;
  EXPECT_EQ(relative_difference(load_saved_params(dir_ + "/a-params"), load_saved_params(dir_ + "/old")), 0.0);

  // A damaged shard file: the export names it (a given version) or falls back to the one before.
  std::string shard = read_file(v40 + "/shard1of2.ckpt");
  shard[shard.size() / 2] ^= 1;
  {
    std::FILE* f = std::fopen((v40 + "/shard1of2.ckpt").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(shard.data(), 1, shard.size(), f);
    std::fclose(f);
  }
  status = export_checkpoint({v40, dir_ + "/bad", "--model", kCnn, "--input-shape", "1x8x8"}, &log);
  EXPECT_EQ(status.code, 1) << log;
  EXPECT_NE(log.find("checkpoint " + v40 + ": shard1of2.ckpt: checksum mismatch (corrupted)"), std::string::npos) << log;
  ASSERT_TRUE(export_checkpoint({ckpt, dir_ + "/v20"}, &log).ok()) << log;
  EXPECT_NE(log.find("skipping checkpoint " + v40 + ": shard1of2.ckpt: checksum mismatch"), std::string::npos) << log;
  EXPECT_NE(log.find("pstrain-export: step 20 ("), std::string::npos) << log;
}

// --predict's flags: usage errors (exit 2) that say what is missing.
TEST_F(ExportTest, PredictFlagsAreChecked) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--predict", test_set(), "--predictions", "p.npy"}, "--predict needs --init-params DIR"},
      {{"--init-params", dir_, "--predict", test_set()}, "--predict needs --predictions OUT (OUT.npy or OUT.csv)"},
      {{"--init-params", dir_, "--predictions", "p.npy"}, "--predictions needs --predict INPUT"},
      {{"--init-params", dir_, "--predict", test_set(), "--predictions", "p.txt"},
       "--predictions: 'p.txt' must end in .npy (float32 array) or .csv"},
      {{"--init-params", dir_, "--evaluate", "--predict", test_set(), "--predictions", "p.npy"},
       "--predict and --evaluate are separate runs"}};
  for (const auto& [args, why] : cases) {
    std::string log;
    EXPECT_EQ(worker(args, &log).code, 2) << log;
    EXPECT_NE(log.find(why), std::string::npos) << log;
  }
}

// model.json read back: what was written, and a clear error for a file that is not one.
TEST(ModelFileTest, ReadsWhatItWritesAndRefusesWhatIsNotOne) {
  TempDir dir("model-file");
  ModelDescription d;
  d.spec = "conv 4 3 pad=1, relu, maxpool 2, flatten, dense 10";
  d.input_shape = {1, 8, 8};
  d.classes = 10;
  d.training.optimizer = "adam";
  d.training.steps = 7;
  write_model_json(dir.path, d);
  const std::optional<ModelDescription> back = read_model_json(dir.path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->spec, d.spec);
  EXPECT_EQ(back->input_shape, d.input_shape);
  EXPECT_EQ(back->classes, 10);
  EXPECT_EQ(back->training.steps, 7u);
  EXPECT_EQ(layout_of(*back).total(), 4u * 9 + 4 + 4 * 4 * 4 * 10 + 10);
  EXPECT_FALSE(read_model_json(dir.path + "/none").has_value());

  const std::string path = dir.path + "/model.json", valid = read_file(path);
  const auto error_for = [&](std::string text) {
    write_file_atomically(path, text);
    try {
      read_model_json(dir.path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = valid;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  EXPECT_EQ(error_for("[1, 2").rfind(path + ": not valid JSON: ", 0), 0u);  // then nlohmann's own words
  EXPECT_EQ(error_for("{}"), path + ": not a pstrain model file (no \"format\": \"pstrain-model\")");
  EXPECT_EQ(error_for(replaced("\"version\": 1", "\"version\": 4")),
            path + ": version 4 is not supported (this pstrain reads versions 1 to 3)");
  EXPECT_EQ(error_for(replaced("\"version\": 1", "\"version\": 3")),
            path + ": version 3 is a script's model's, but there is no \"kind\": \"script\"");
  EXPECT_EQ(error_for(replaced("\"model\": \"conv 4", "\"model\": \"conv 5")),
            path + ": its variables are not its layer list's: layer0.weight has shape [4, 1, 3, 3] in " + path +
                "'s variables, but the model needs [5, 1, 3, 3]");
  EXPECT_EQ(error_for(replaced("\"classes\": 10", "\"classes\": 12")).rfind(path + ": its model does not fit its input shape and classes: ", 0), 0u);
  EXPECT_EQ(error_for(replaced("\"input_shape\"", "\"input\"")).rfind(path + ": a field is missing or of the wrong type: ", 0), 0u);
}

}  // namespace
}  // namespace pstrain::test
