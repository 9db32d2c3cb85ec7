// Batch norm in whole jobs of real processes (docs/models.md, "batchnorm"): the running
// statistics, which are not on the PS shards, persist through checkpoints, so a resumed job ends
// as the uninterrupted one did, bit for bit. ExportTest.BatchNormCnnRoundTripCarriesTheRunningStatistics
// covers --save-params, --evaluate, --predict and pstrain-export.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"
#include "worker/data/npy_format.h"

namespace pstrain::test {
namespace {

const char* const kModel = "conv 3 3 pad=1, batchnorm, relu, maxpool 2, flatten, dense 16, bn momentum=0.2, relu, dense 10";
const std::vector<std::string> kState = {"layer1.running_mean", "layer1.running_var", "layer3.running_mean",
                                         "layer3.running_var"};

class BatchNormJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("batchnorm-job");
    write_synthetic_mnist(dir_, "train", 300, 8, 8, 21, false);
    write_synthetic_mnist(dir_, "t10k", 100, 8, 8, 22, false);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  struct Run {
    SavedParams params;
    std::vector<std::vector<float>> state;  // kState's files
    std::string logs;
  };

  // 2 PS shards, 2 workers of batch 8, `steps` steps of adam into NAME-params, with `more` flags.
  Run train(const std::string& name, int steps, const std::vector<std::string>& more) {
    Job job;
    job.num_ps = 2;
    job.num_workers = 2;
    job.dir = dir_ + "/" + name;
    std::filesystem::create_directories(job.dir);
    const std::string params = dir_ + "/" + name + "-params";
    job.args = {"--data-dir", dir_, "--cache-dir", dir_, "--model", kModel, "--batch-size", "8", "--steps",
                std::to_string(steps), "--epochs", "5", "--optimizer", "adam", "--lr", "0.01", "--seed", "3",
                "--timeout", "30", "--save-params", params};
    job.args.insert(job.args.end(), more.begin(), more.end());
    const JobResult result = run_job(job);
    EXPECT_TRUE(result.ok()) << result.logs;
    Run run;
    run.logs = result.logs;
    if (!result.ok()) return run;
    run.params = load_saved_params(params);
    for (const std::string& s : kState) {
      std::vector<size_t> shape;
      run.state.push_back(read_npy(params + "/" + s + ".npy", &shape));
    }
    return run;
  }

  std::string dir_;
};

// 20 steps at once, against 10 steps checkpointed every 5 and then resumed to 20 (the running
// statistics of step 10 loaded from the checkpoint by every worker): the same parameters and
// running statistics, bit for bit.
TEST_F(BatchNormJobTest, ResumedFromACheckpointEqualsTheUninterruptedRun) {
  const std::vector<std::string> every = {"--checkpoint-dir", dir_ + "/ckpt", "--checkpoint-every", "5"};
  const Run uninterrupted = train("whole", 20, {});
  const Run first = train("first", 10, every);
  std::vector<std::string> resume = every;
  resume.push_back("--resume");
  const Run resumed = train("resumed", 20, resume);
  ASSERT_EQ(resumed.state.size(), kState.size()) << resumed.logs;
  ASSERT_EQ(first.state.size(), kState.size()) << first.logs;
  EXPECT_NE(resumed.logs.find("--resume: from checkpoint"), std::string::npos) << resumed.logs;
  EXPECT_NE(resumed.logs.find("running statistics from " + dir_ + "/ckpt/v"), std::string::npos) << resumed.logs;
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/ckpt/v0000000010/layer1.running_mean.npy"));
  EXPECT_GT(relative_difference(uninterrupted.params, first.params), 1e-4);  // the first half is not the whole
  EXPECT_NE(uninterrupted.state, first.state);
  EXPECT_EQ(relative_difference(uninterrupted.params, resumed.params), 0.0);
  for (size_t i = 0; i < kState.size(); ++i) EXPECT_EQ(uninterrupted.state[i], resumed.state[i]) << kState[i];
}

}  // namespace
}  // namespace pstrain::test
