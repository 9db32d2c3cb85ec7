// Using a trained model (issue 17, item 5): --init-params starts a job from saved .npy files, and
// pstrain-worker --evaluate prints the loss and accuracy of saved parameters with no PS. And the
// evaluations at the epochs' ends, which the workers share where they hold the same parameters.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "worker/data/npy_format.h"
#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

const char* const kModel = "conv 4 3 pad=1, relu, maxpool 2, flatten, dense 12, relu, dropout 0.2, dense 10";

class EvaluateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("evaluate");
    write_synthetic_mnist(dir_, "train", 400, 8, 8, 1, false);
    write_synthetic_mnist(dir_, "t10k", 120, 8, 8, 1, false);  // the same classes (templates)
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A 2-worker job of `steps` steps; returns the chief's log.
  std::string train(const std::string& name, int steps, std::vector<std::string> more, int num_ps = 1,
                    const std::string& lr = "0.2") {
    Job job;
    job.num_ps = num_ps;
    job.num_workers = 2;
    job.dir = dir_ + "/" + name;
    std::filesystem::create_directories(job.dir);
    job.args = {"--data-dir", dir_, "--cache-dir", dir_, "--model", kModel, "--batch-size", "8", "--steps",
                std::to_string(steps), "--optimizer", "sgd", "--lr", lr, "--save-params", dir_ + "/" + name + "-params"};
    job.args.insert(job.args.end(), more.begin(), more.end());
    const JobResult result = run_job(job);
    EXPECT_TRUE(result.ok()) << result.logs;
    return read_file(job.dir + "/w0.log");
  }

  ExitStatus evaluate(std::vector<std::string> args, std::string* log) {
    args.insert(args.begin(), {PSTRAIN_WORKER_BIN, "--evaluate", "--data-dir", dir_, "--cache-dir", dir_});
    const ExitStatus status = wait_for(spawn(args, dir_ + "/evaluate.log"), 60);
    *log = read_file(dir_ + "/evaluate.log");
    return status;
  }

  std::string dir_;
};

std::string field(const std::string& log, const std::string& name) {
  std::smatch m;
  return std::regex_search(log, m, std::regex(name + "=([0-9.]+)")) ? m[1].str() : "none";
}

// The evaluation of the saved parameters is the chief's own last evaluation, to the digit.
TEST_F(EvaluateTest, EvaluatingSavedParametersRepeatsTheChiefsTestFigures) {
  const std::string chief = train("a", 60, {});
  std::string log;
  const ExitStatus status = evaluate({"--model", kModel, "--init-params", dir_ + "/a-params"}, &log);
  ASSERT_TRUE(status.ok()) << log;
  EXPECT_EQ(field(log, "test_loss"), field(chief, "test_loss")) << log << chief;
  EXPECT_EQ(field(log, "test_accuracy"), field(chief, "test_accuracy")) << log << chief;
  EXPECT_NE(log.find("records=120"), std::string::npos) << log;
  EXPECT_GT(std::stod(field(log, "test_accuracy")), 0.3) << log;  // learnt well above chance (0.1)
}

// --init-params: the job starts from the saved values (every shard is initialised with them); a
// step with a negligible learning rate leaves them as they were.
TEST_F(EvaluateTest, InitParamsStartsTheJobFromSavedValues) {
  train("a", 30, {});
  const std::string chief = train("b", 1, {"--init-params", dir_ + "/a-params"}, 2, "1e-30");
  EXPECT_NE(chief.find("initial parameters from " + dir_ + "/a-params (6 variables)"), std::string::npos) << chief;
  const SavedParams a = load_saved_params(dir_ + "/a-params"), b = load_saved_params(dir_ + "/b-params");
  EXPECT_EQ(relative_difference(a, b), 0.0);
  train("fresh", 1, {}, 1, "1e-30");
  EXPECT_GT(relative_difference(a, load_saved_params(dir_ + "/fresh-params")), 0.1);
}

TEST_F(EvaluateTest, AModelThatDoesNotFitTheSavedParametersIsAClearError) {
  train("a", 5, {});
  std::string log;
  ExitStatus status = evaluate({"--model", "conv 5 3 pad=1, relu, maxpool 2, flatten, dense 12, relu, dense 10",
                                "--init-params", dir_ + "/a-params"},
                               &log);
  EXPECT_EQ(status.code, 2) << log;  // the saved model.json names the model (tests/export_test.cc)
  EXPECT_NE(log.find("--init-params " + dir_ + "/a-params: layer0.weight has shape [4, 1, 3, 3] in " + dir_ +
                     "/a-params/model.json, but the model needs [5, 1, 3, 3] (--model)"),
            std::string::npos)
      << log;
  std::filesystem::remove(dir_ + "/a-params/model.json");  // as saved before there was one: the files' shapes
  status = evaluate({"--model", "conv 5 3 pad=1, relu, maxpool 2, flatten, dense 12, relu, dense 10", "--init-params",
                     dir_ + "/a-params"},
                    &log);
  EXPECT_EQ(status.code, 1) << log;
  EXPECT_NE(log.find("--init-params: " + dir_ + "/a-params/layer0.weight.npy has shape (4, 1, 3, 3) but the model's "
                     "layer0.weight is (5, 1, 3, 3)"),
            std::string::npos)
      << log;
  status = evaluate({"--model", kModel, "--init-params", dir_ + "/nowhere"}, &log);
  EXPECT_EQ(status.code, 2) << log;
  EXPECT_NE(log.find("--init-params " + dir_ + "/nowhere: no such directory"), std::string::npos) << log;
  status = evaluate({"--model", kModel}, &log);
  EXPECT_EQ(status.code, 2) << log;
  EXPECT_NE(log.find("--evaluate needs --init-params DIR"), std::string::npos) << log;
  EXPECT_EQ(log.find("terminate called"), std::string::npos) << log;
}

// A malformed parameter file is refused as the data sets' .npy files are (worker/data/npy_format.h): exit 1
// with a message naming --init-params and the file, never a crash. --model ends in dense 10, so
// layer0.weight.npy is the first file read; with --hidden the last bias is read first (for the
// number of classes).
TEST_F(EvaluateTest, AMalformedParameterFileIsAClearError) {
  const std::string params = dir_ + "/bad-params", weight = params + "/layer0.weight.npy";
  std::filesystem::create_directories(params);
  const std::vector<float> values(36, 0.25f);
  write_npy(weight, {4, 1, 3, 3}, values.data());
  std::ifstream in(weight, std::ios::binary);
  const std::string valid((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto with_bytes = [&](const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  std::string f8 = valid;
  f8.replace(f8.find("<f4"), 3, "<f8");
  std::string fortran = valid;
  fortran.replace(fortran.find("False"), 5, "True ");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {valid.substr(0, valid.size() - 4),
       "file is 268 bytes, but its header describes 4 records of 36 bytes (shape (4, 1, 3, 3), float32) after "
       "a 128-byte header (truncated?)"},
      {valid + "tail",
       "file is 276 bytes, but its header describes 4 records of 36 bytes (shape (4, 1, 3, 3), float32) after "
       "a 128-byte header (extra bytes after the data)"},
      {"", "not a .npy file (it does not start with \\x93NUMPY)"},
      {f8, "unsupported dtype '<f8' (float64); parameters must be float32 ('<f4'), as --save-params writes them"},
      {fortran, "fortran_order True (column-major) arrays are not supported"},
      {valid.substr(0, 40), "file is 40 bytes, shorter than its 128-byte .npy header (truncated?)"}};
  std::string log;
  for (const auto& [bytes, why] : cases) {
    with_bytes(weight, bytes);
    const ExitStatus status = evaluate({"--model", kModel, "--init-params", params}, &log);
    EXPECT_EQ(status.code, 1) << log;
    EXPECT_NE(log.find("E pstrain-worker: --init-params: " + weight + ": " + why), std::string::npos) << log;
    EXPECT_EQ(log.find("terminate called"), std::string::npos) << log;
  }
  const std::string bias = params + "/layer1.bias.npy";
  with_bytes(bias, valid.substr(0, 100));
  const ExitStatus status = evaluate({"--hidden", "12", "--init-params", params}, &log);
  EXPECT_EQ(status.code, 1) << log;
  EXPECT_NE(log.find("--init-params: " + bias + ": file is 100 bytes, shorter than its 128-byte .npy header"),
            std::string::npos)
      << log;
}

// Sync and allreduce: the workers evaluate their shares of the test set at an epoch's end (101
// records over 3 workers: records [n i / N, n (i + 1) / N), 33, 34 and 34 of them) and the chief
// reports the sums a step later; the figures are those of the chief alone evaluating the same
// parameters (the epoch's evaluation of a 1-epoch job, the last, which the chief does alone), to
// the printed digit.
TEST_F(EvaluateTest, EpochEvaluationsSharedByTheWorkersEqualTheChiefsAlone) {
  const std::string data = dir_ + "/shared-data";
  std::filesystem::create_directories(data);
  write_synthetic_mnist(data, "train", 480, 8, 8, 3, false);
  write_synthetic_mnist(data, "t10k", 101, 8, 8, 3, false);
  const std::regex done("epoch 1 done: (train loss [0-9.]+ acc [0-9.]+; test loss [0-9.]+ acc [0-9.]+) \\(([^)]*)\\)");
  for (const std::string mode : {"sync", "allreduce"}) {
    std::string figures[2], how[2];
    for (int epochs : {1, 2}) {
      Job job;
      job.num_workers = 3;
      job.dir = dir_ + "/" + mode + std::to_string(epochs);
      std::filesystem::create_directories(job.dir);
      job.args = {"--data-dir", data, "--cache-dir", job.dir, "--hidden", "16,8", "--batch-size", "8", "--epochs",
                  std::to_string(epochs), "--optimizer", "momentum", "--lr", "0.05", "--lr-schedule", "constant",
                  "--timeout", "30"};
      const JobResult result = mode == "sync" ? run_job(job) : run_allreduce_job(job);
      ASSERT_TRUE(result.ok()) << result.logs;
      const std::string chief = read_file(job.dir + "/w0.log");
      std::smatch m;
      ASSERT_TRUE(std::regex_search(chief, m, done)) << chief;
      figures[epochs - 1] = m[1].str();
      how[epochs - 1] = m[2].str();
      EXPECT_EQ(chief.find("not reported"), std::string::npos) << chief;
    }
    EXPECT_EQ(figures[1], figures[0]) << mode;
    EXPECT_EQ(how[0].rfind("evaluated in ", 0), 0u) << mode << ": " << how[0];  // the last: the chief alone
    EXPECT_EQ(how[1].rfind("evaluated by 3 workers, ", 0), 0u) << mode << ": " << how[1];
  }
}

}  // namespace
}  // namespace pstrain::test
