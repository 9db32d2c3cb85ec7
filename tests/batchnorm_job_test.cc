// Batch norm in whole jobs of real processes (docs/models.md, "batchnorm"): with global
// statistics N workers equal one process on the concatenated batch (the mirrored contract), over
// the PS shards and over the all-reduce ring; local statistics do not; the running statistics,
// which are not on the PS shards, persist through checkpoints, so a resumed job ends as the
// uninterrupted one did, bit for bit; the flags that global statistics cannot serve are refused. ExportTest.BatchNormCnnRoundTripCarriesTheRunningStatistics
// covers --save-params, --evaluate, --predict and pstrain-export.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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

  // `workers` workers of batch `batch` for 20 steps (num_ps 0: allreduce over the ring), the
  // saved parameters and running statistics together; the logs in *logs.
  SavedParams mirrored(int num_ps, int workers, int batch, const std::string& optimizer,
                       const std::vector<std::string>& more = {}, std::string* logs = nullptr,
                       const std::string& model = kModel, const std::vector<std::string>& state = kState) {
    const std::string tag = "m" + std::to_string(runs_++);
    Job job;
    job.num_ps = std::max(num_ps, 1);
    job.num_workers = workers;
    job.dir = dir_ + "/" + tag;
    std::filesystem::create_directories(job.dir);
    const std::string params = dir_ + "/" + tag + "-params";
    const std::string lr = optimizer == "adam" ? "0.01" : optimizer == "momentum" ? "0.05" : "0.1";
    job.args = {"--data-dir", dir_, "--cache-dir", dir_, "--model", model, "--batch-size", std::to_string(batch),
                "--steps", "20", "--epochs", "5", "--optimizer", optimizer, "--lr", lr, "--seed", "7",
                "--timeout", "30", "--save-params", params};
    job.args.insert(job.args.end(), more.begin(), more.end());
    const JobResult result = num_ps == 0 ? run_allreduce_job(job) : run_job(job);
    EXPECT_TRUE(result.ok()) << result.logs;
    if (logs != nullptr) *logs = result.logs;
    if (!result.ok()) return {};
    SavedParams p = load_saved_params(params);
    for (const std::string& s : state) {  // the running statistics compared as variables too
      std::vector<size_t> shape;
      p.names.push_back(s);
      p.values.push_back(read_npy(params + "/" + s + ".npy", &shape));
    }
    return p;
  }

  std::string dir_;
  int runs_ = 0;
};

class BatchNormMirroredTest : public BatchNormJobTest, public ::testing::WithParamInterface<std::string> {};

// A bias right before batchnorm changes nothing the model computes (the batch's mean takes it
// away), so its gradient is 0 up to rounding, which Adam's g / sqrt(v) turns into steps of about
// lr either way: with adam those biases (layer0.bias, layer2.bias) and the running means that
// carry them are left out of the comparison (with sgd and momentum they are within 1e-5 too).
SavedParams without_biases_before_batchnorm(SavedParams p) {
  SavedParams kept;
  for (size_t v = 0; v < p.names.size(); ++v) {
    const std::string& n = p.names[v];
    if (n == "layer0.bias" || n == "layer2.bias" || n.find("running_mean") != std::string::npos) continue;
    kept.names.push_back(n);
    kept.values.push_back(std::move(p.values[v]));
  }
  return kept;
}

// 3 workers of batch 8 against one of 24, 20 steps: over 2 PS shards (sync) and over the ring
// (allreduce), and with --recompute, parameters and running statistics within float rounding;
// with local statistics, clearly not.
TEST_P(BatchNormMirroredTest, ThreeWorkersWithGlobalStatisticsEqualOneWorkerOnTheConcatenatedBatch) {
  const std::string optimizer = GetParam();
  const double tolerance = 1e-5;
  const bool adam = optimizer == "adam";
  SavedParams reference = mirrored(1, 1, 24, optimizer);
  ASSERT_FALSE(reference.values.empty());
  for (int num_ps : {2, 0}) {
    const SavedParams p = mirrored(num_ps, 3, 8, optimizer);
    ASSERT_FALSE(p.values.empty());
    const double all = relative_difference(reference, p);
    const double rel = adam ? relative_difference(without_biases_before_batchnorm(reference),
                                                  without_biases_before_batchnorm(p))
                            : all;
    EXPECT_LE(rel, tolerance) << optimizer << (num_ps == 0 ? " ring" : " 2 PS");
    std::printf("batchnorm %s N=3 %s: max |difference| / max |parameter| = %.3g%s (all variables: %.3g)\n",
                optimizer.c_str(), num_ps == 0 ? "ring all-reduce" : "2 PS shards", rel,
                adam ? " without the biases before batchnorm" : "", all);
  }
  if (optimizer == "sgd") {  // --recompute: a block's forward again in backward, its statistics combined again
    const double rel = relative_difference(reference, mirrored(2, 3, 8, optimizer, {"--recompute"}));
    EXPECT_LE(rel, tolerance) << "--recompute";
    std::printf("batchnorm sgd N=3 2 PS shards --recompute: %.3g\n", rel);
  }
  const SavedParams local = mirrored(2, 3, 8, optimizer, {"--batchnorm-stats", "local"});
  const double rel = relative_difference(reference, local);
  EXPECT_GT(rel, 1e-3) << optimizer << " local statistics";
  std::printf("batchnorm %s N=3 local statistics: %.3g\n", optimizer.c_str(), rel);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, BatchNormMirroredTest, ::testing::Values("sgd", "momentum", "adam"));

// Batch norm inside residual blocks (an identity block, a stride-2 projected one) keeps the
// contract too: 3 workers of batch 8 on 2 PS shards against one of 24, sgd, 20 steps.
TEST_F(BatchNormJobTest, ResidualBlocksWithBatchNormKeepTheMirroredContract) {
  const std::string resnet =
      "conv 4 3 pad=1, bn, relu, residual(conv 4 3 pad=1, bn, relu, conv 4 3 pad=1, bn), relu, "
      "residual(conv 8 3 stride=2 pad=1, bn, relu, conv 8 3 pad=1, bn), relu, flatten, dense 10";
  std::vector<std::string> state;
  for (int p : {1, 3, 5, 7, 9}) {
    state.push_back("layer" + std::to_string(p) + ".running_mean");
    state.push_back("layer" + std::to_string(p) + ".running_var");
  }
  const SavedParams reference = mirrored(1, 1, 24, "sgd", {}, nullptr, resnet, state);
  const SavedParams p = mirrored(2, 3, 8, "sgd", {}, nullptr, resnet, state);
  ASSERT_FALSE(reference.values.empty());
  ASSERT_FALSE(p.values.empty());
  const double rel = relative_difference(reference, p);
  EXPECT_LE(rel, 1e-5);
  std::printf("batchnorm in residual blocks, sgd N=3 2 PS shards: %.3g\n", rel);
}

// What global statistics cannot serve: the worker exits 2 naming the flag and the batchnorm layer
// before it contacts a PS (none listens here).
TEST_F(BatchNormJobTest, WhatGlobalStatisticsCannotServeIsRefused) {
  const std::string nobody = "127.0.0.1:" + std::to_string(free_tcp_ports(1).at(0));
  const std::string layer = "layer 2 'batchnorm'";
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--batch-size", "4", "--accum-steps", "2"},
       "--batchnorm-stats global: gradient accumulation (2 micro-batches a step) would normalise each micro-batch "
       "alone in " + layer + ": drop --accum-steps (or --batch-size auto's split), or give --batchnorm-stats local"},
      {{"--backup-workers", "1"},
       "--batchnorm-stats global: " + layer + " combines every worker's statistics each step, which --backup-workers "
       "would wait for: give --batchnorm-stats local"},
      {{"--batchnorm-stats", "both"}, "--batchnorm-stats: 'both' is not one of global, local"},
  };
  Job job;
  job.dir = dir_;
  job.num_workers = 3;
  job.args = {"--data-dir", dir_, "--cache-dir", dir_, "--model", kModel, "--steps", "2", "--timeout", "5",
              "--start-timeout", "5"};
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string log = dir_ + "/refused" + std::to_string(i) + ".log";
    std::vector<std::string> extra = {"--ps-hosts", nobody};
    extra.insert(extra.end(), cases[i].flags.begin(), cases[i].flags.end());
    const ExitStatus status = wait_for(spawn(worker_argv(job, 0, extra), log), 30);
    const std::string text = read_file(log);
    EXPECT_EQ(status.code, 2) << cases[i].message << "\n" << text;
    EXPECT_NE(text.find("pstrain-worker: " + cases[i].message + " (see --help)"), std::string::npos) << text;
  }
}

// A replaced worker (--allow-rejoin, what launch.sh --max-restarts gives the PS) would redo its
// step's calls that the others have passed: ps0 refuses the first STATS of such a job, naming the
// way out, rather than let the job wait out --timeout.
TEST_F(BatchNormJobTest, GlobalStatisticsWithReplaceableWorkersAreRefusedByPs0) {
  Job job;
  job.dir = dir_;
  job.num_workers = 2;
  job.args = {"--data-dir", dir_, "--cache-dir", dir_, "--model", kModel, "--steps", "2", "--timeout", "10",
              "--allow-rejoin"};
  const JobResult result = run_job_stopping_servers(job);
  EXPECT_FALSE(result.ok()) << result.logs;
  EXPECT_NE(result.logs.find("ps0 rejected batch-norm statistics: STATS: batch norm's global statistics do not "
                             "survive a replaced worker (--allow-rejoin, launch.sh --max-restarts): give the workers "
                             "--batchnorm-stats local, or no --max-restarts"),
            std::string::npos)
      << result.logs;
}

// 20 steps at once, against 10 steps checkpointed every 5 and then resumed to 20 (the running
// statistics of step 10 loaded from the checkpoint by every worker): the same parameters and
// running statistics, bit for bit, with global statistics (every worker holds the chief's) and
// with local ones (the other worker's own are replaced by the chief's on resume, and nothing it
// computes depends on them: the chief evaluates alone).
TEST_F(BatchNormJobTest, ResumedFromACheckpointEqualsTheUninterruptedRun) {
  for (const std::string stats : {"global", "local"}) {
    SCOPED_TRACE(stats);
    const std::string ckpt = dir_ + "/ckpt-" + stats;
    const std::vector<std::string> every = {"--batchnorm-stats", stats, "--checkpoint-dir", ckpt,
                                            "--checkpoint-every", "5"};
    const Run uninterrupted = train("whole-" + stats, 20, {"--batchnorm-stats", stats});
    const Run first = train("first-" + stats, 10, every);
    std::vector<std::string> resume = every;
    resume.push_back("--resume");
    const Run resumed = train("resumed-" + stats, 20, resume);
    ASSERT_EQ(resumed.state.size(), kState.size()) << resumed.logs;
    ASSERT_EQ(first.state.size(), kState.size()) << first.logs;
    EXPECT_NE(resumed.logs.find("--resume: from checkpoint"), std::string::npos) << resumed.logs;
    EXPECT_NE(resumed.logs.find("running statistics from " + ckpt + "/v"), std::string::npos) << resumed.logs;
    EXPECT_TRUE(std::filesystem::exists(ckpt + "/v0000000010/layer1.running_mean.npy"));
    EXPECT_GT(relative_difference(uninterrupted.params, first.params), 1e-4);  // the first half is not the whole
    EXPECT_NE(uninterrupted.state, first.state);
    EXPECT_EQ(relative_difference(uninterrupted.params, resumed.params), 0.0);
    for (size_t i = 0; i < kState.size(); ++i) EXPECT_EQ(uninterrupted.state[i], resumed.state[i]) << kState[i];
  }
}

}  // namespace
}  // namespace pstrain::test
