// The mirrored contract (docs/design.md, "The mirrored contract"): N workers of batch b, in sync
// mode on any number of PS shards or in allreduce mode, end with the same parameters as ONE worker
// of batch N*b, to float rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"
#include "worker/backend/backend.h"
#include "worker/cuda/nccl_collective.h"

namespace pstrain::test {
namespace {

constexpr int kBatch = 8;
constexpr int kSteps = 20;

class MirroredBase : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_dir_ = new std::string(make_temp_dir("mirrored"));
    // 300 records: with a global batch of 24 an epoch is 12 steps, so 20 steps cross an epoch.
    write_synthetic_mnist(*data_dir_, "train", 300, 8, 8, 11, false);
    write_synthetic_mnist(*data_dir_, "t10k", 100, 8, 8, 12, false);
  }

  // Trains kSteps steps and returns the saved parameters (num_ps 0: allreduce mode with
  // `collective`; nccl runs on the GPU).
  static SavedParams train(int num_ps, int num_workers, int batch, const std::string& optimizer, const std::string& tag,
                           const std::string& collective = "ring") {
    return train_with(num_ps, num_workers, {"--batch-size", std::to_string(batch)}, optimizer, tag, collective);
  }

  // The same with `batching` flags (--batch-size, --worker-batch, --accum-steps, --mode ...).
  static SavedParams train_with(int num_ps, int num_workers, const std::vector<std::string>& batching,
                                const std::string& optimizer, const std::string& tag,
                                const std::string& collective = "ring", std::string* logs = nullptr,
                                bool ipc = false, const std::map<int, std::vector<std::string>>& worker_args = {}) {
    const std::string dir = make_temp_dir("mirrored-" + tag);
    Job job;
    job.num_ps = std::max(num_ps, 1);
    job.num_workers = num_workers;
    job.dir = dir;
    job.ipc = ipc;
    job.worker_args = worker_args;
    const std::string lr = optimizer == "adam" ? "0.01" : optimizer == "momentum" ? "0.05" : "0.1";
    job.args = {"--data-dir", *data_dir_, "--cache-dir", dir, "--hidden", "16,8", "--steps", std::to_string(kSteps),
                "--epochs", "5", "--optimizer", optimizer, "--lr", lr, "--weight-decay", "0.01", "--seed", "7",
                "--log-every", "5", "--timeout", "30", "--save-params", dir + "/params"};
    job.args.insert(job.args.end(), batching.begin(), batching.end());
    if (collective == "nccl") job.args.insert(job.args.end(), {"--device", "cuda"});
    const JobResult result = num_ps == 0 ? run_allreduce_job(job, collective) : run_job(job);
    EXPECT_TRUE(result.ok()) << result.logs;
    if (logs != nullptr) *logs = result.logs;
    SavedParams params = load_saved_params(dir + "/params");
    std::filesystem::remove_all(dir);
    return params;
  }

  static void TearDownTestSuite() {
    std::filesystem::remove_all(*data_dir_);
    delete data_dir_;
    data_dir_ = nullptr;
  }

  static std::string* data_dir_;
};
std::string* MirroredBase::data_dir_ = nullptr;

class MirroredTest : public MirroredBase, public ::testing::WithParamInterface<std::tuple<std::string, int>> {};

TEST_P(MirroredTest, NWorkersEqualOneWorkerOnTheConcatenatedBatch) {
  const auto& [optimizer, n] = GetParam();
  const double tolerance = optimizer == "adam" ? 1e-4 : 1e-5;
  const SavedParams reference = train(1, 1, n * kBatch, optimizer, optimizer + "-ref");
  for (int shards : {1, 2}) {
    const SavedParams p = train(shards, n, kBatch, optimizer, optimizer + "-n" + std::to_string(n));
    const double rel = relative_difference(reference, p);
    EXPECT_LE(rel, tolerance) << optimizer << " N=" << n << " S=" << shards;
    std::printf("%s N=%d S=%d: max |difference| / max |parameter| = %.3g\n", optimizer.c_str(), n, shards, rel);
  }
}

// allreduce mode with the ring collective keeps the same contract, with no PS at all.
TEST_P(MirroredTest, RingAllreduceEqualsOneWorkerOnTheConcatenatedBatch) {
  const auto& [optimizer, n] = GetParam();
  const double tolerance = optimizer == "adam" ? 1e-4 : 1e-5;
  const SavedParams reference = train(1, 1, n * kBatch, optimizer, optimizer + "-ref");
  const SavedParams p = train(0, n, kBatch, optimizer, optimizer + "-ring" + std::to_string(n));
  const double rel = relative_difference(reference, p);
  EXPECT_LE(rel, tolerance) << optimizer << " N=" << n << " ring";
  std::printf("%s N=%d ring all-reduce: max |difference| / max |parameter| = %.3g\n", optimizer.c_str(), n, rel);
}

// NCCL on the GPUs keeps the contract too (the reference runs on --device auto: the GPU). NCCL
// takes one GPU per rank, so N ranks need N GPUs.
TEST_P(MirroredTest, NcclAllreduceEqualsOneWorkerOnTheConcatenatedBatch) {
  const auto& [optimizer, n] = GetParam();
  const int gpus = cuda_device_count();
  if (!nccl_available()) GTEST_SKIP() << "this build has no NCCL (nccl.h or libnccl was not found by CMake)";
  if (gpus < n) GTEST_SKIP() << "NCCL needs one GPU per rank: " << n << " rank(s), " << gpus << " GPU(s) visible";
  const double tolerance = optimizer == "adam" ? 1e-4 : 1e-5;
  const SavedParams reference = train(1, 1, n * kBatch, optimizer, optimizer + "-ref");
  const SavedParams p = train(0, n, kBatch, optimizer, optimizer + "-nccl" + std::to_string(n), "nccl");
  const double rel = relative_difference(reference, p);
  EXPECT_LE(rel, tolerance) << optimizer << " N=" << n << " nccl";
  std::printf("%s N=%d NCCL all-reduce: max |difference| / max |parameter| = %.3g\n", optimizer.c_str(), n, rel);
}

// Workers on different devices keep the contract (what launch.sh --devices cuda:0,cpu starts):
// even-numbered workers on the GPU, odd ones on the CPU, against one CPU worker.
TEST_P(MirroredTest, GpuAndCpuWorkersEqualOneWorkerOnTheConcatenatedBatch) {
  const auto& [optimizer, n] = GetParam();
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const double tolerance = optimizer == "adam" ? 1e-4 : 1e-5;
  const SavedParams reference =
      train_with(1, 1, {"--batch-size", std::to_string(n * kBatch), "--device", "cpu"}, optimizer, optimizer + "-cpu");
  std::map<int, std::vector<std::string>> devices;
  for (int w = 0; w < n; ++w) devices[w] = {"--device", w % 2 == 0 ? "cuda" : "cpu"};
  const SavedParams p = train_with(1, n, {"--batch-size", std::to_string(kBatch)}, optimizer,
                                   optimizer + "-mixed" + std::to_string(n), "ring", nullptr, false, devices);
  const double rel = relative_difference(reference, p);
  EXPECT_LE(rel, tolerance) << optimizer << " N=" << n << " GPU and CPU workers";
  std::printf("%s N=%d GPU and CPU workers: max |difference| / max |parameter| = %.3g\n", optimizer.c_str(), n, rel);
}

// The check must be able to fail: a different global batch gives clearly different parameters.
using MirroredCheck = MirroredBase;
TEST_F(MirroredCheck, DifferentGlobalBatchIsDetected) {
  const SavedParams a = train(1, 1, 16, "sgd", "neg-a");
  const SavedParams b = train(1, 2, 16, "sgd", "neg-b");
  EXPECT_GT(relative_difference(a, b), 1e-3);
}

// Same-host peers move payloads through shared memory (--shared-memory auto, the default): with
// a PS the arithmetic is the sockets' exactly, so the parameters are bit-identical; the ring's
// shared-memory sum adds in rank order, not ring order, so it agrees to rounding. The logs show
// which path each job took. On the CPU (--device cpu), also where a GPU is visible: a GPU replica
// keeps its parameters and gradients on the device, so it never computes in the segments.
TEST_F(MirroredCheck, SharedMemoryTrainsWhatTheSocketsTrain) {
  std::string shm_logs, socket_logs;
  // As launch.sh runs it: PSes reached at ipc://@, so the headers take the local channel too.
  const SavedParams shm = train_with(2, 2, {"--batch-size", "8", "--shared-memory", "auto", "--device", "cpu"},
                                     "momentum", "shm-ps", "ring", &shm_logs, true);
  const SavedParams sockets = train_with(2, 2, {"--batch-size", "8", "--shared-memory", "off", "--device", "cpu"},
                                         "momentum", "sockets-ps", "ring", &socket_logs);
  EXPECT_EQ(relative_difference(shm, sockets), 0.0);
  for (const char* line : {"w0: ps0 and ps1 on this host: payloads through shared memory, headers over the local channel",
                           "w1: ps0 and ps1 on this host: payloads through shared memory, headers over the local channel"}) {
    EXPECT_NE(shm_logs.find(line), std::string::npos) << line << "\n" << shm_logs;
  }
  EXPECT_EQ(socket_logs.find("shared memory"), std::string::npos) << socket_logs;

  // One shard: backward writes into the segment's gradient area and forward reads the PS's
  // parameter area in place (WELCOME shm 2), with no copy either way.
  const SavedParams one_shm = train_with(1, 2, {"--batch-size", "8", "--shared-memory", "auto", "--device", "cpu"},
                                         "momentum", "shm-ps1", "ring", &shm_logs, true);
  const SavedParams one_sockets = train_with(1, 2, {"--batch-size", "8", "--shared-memory", "off", "--device", "cpu"},
                                             "momentum", "sockets-ps1", "ring", &socket_logs);
  EXPECT_EQ(relative_difference(one_shm, one_sockets), 0.0);
  for (const char* line : {"w0: computing from ps0's parameter area", "w1: computing from ps0's parameter area"}) {
    EXPECT_NE(shm_logs.find(line), std::string::npos) << line << "\n" << shm_logs;
  }
  EXPECT_EQ(socket_logs.find("parameter area"), std::string::npos) << socket_logs;

  const SavedParams ring_shm =
      train_with(0, 3, {"--batch-size", "8", "--device", "cpu"}, "momentum", "shm-ring", "ring", &shm_logs);
  const SavedParams ring = train_with(0, 3, {"--batch-size", "8", "--shared-memory", "off", "--device", "cpu"},
                                      "momentum", "sockets-ring", "ring", &socket_logs);
  EXPECT_LE(relative_difference(ring_shm, ring), 1e-5);
  EXPECT_NE(shm_logs.find("ring rank 2: all-reduce through shared memory (3 ranks on this host"), std::string::npos)
      << shm_logs;
  EXPECT_NE(socket_logs.find("ring rank 2: all-reduce over the ring (--shared-memory off)"), std::string::npos)
      << socket_logs;
}

// Per-worker batch sizes, gradient accumulation and ssp with staleness 0 keep the contract too
// (issue 16): each against one worker on the same global batches, for every optimizer, S = 1, 2.
class MirroredBatchTest : public MirroredBase, public ::testing::WithParamInterface<std::string> {
 protected:
  void expect_equal(const SavedParams& reference, int num_workers, const std::vector<std::string>& batching,
                    const std::string& what) {
    const std::string& optimizer = GetParam();
    const double tolerance = optimizer == "adam" ? 1e-4 : 1e-5;
    for (int shards : {1, 2}) {
      const SavedParams p = train_with(shards, num_workers, batching, optimizer, optimizer + "-" + std::to_string(shards));
      const double rel = relative_difference(reference, p);
      EXPECT_LE(rel, tolerance) << optimizer << " " << what << " S=" << shards;
      std::printf("%s %s S=%d: max |difference| / max |parameter| = %.3g\n", optimizer.c_str(), what.c_str(), shards,
                  rel);
    }
  }
};

TEST_P(MirroredBatchTest, WorkerBatches10And20And30EqualOneWorkerWith60) {
  const SavedParams reference = train(1, 1, 60, GetParam(), GetParam() + "-ref60");
  expect_equal(reference, 3, {"--worker-batch", "10,20,30"}, "--worker-batch 10,20,30");
}

TEST_P(MirroredBatchTest, ThreeAccumulatedMicroBatchesOf16EqualOneBatchOf48) {
  const SavedParams reference = train(1, 1, 48, GetParam(), GetParam() + "-ref48");
  expect_equal(reference, 1, {"--batch-size", "16", "--accum-steps", "3"}, "--batch-size 16 --accum-steps 3");
  // Two workers sharing --global-batch 48, each in 3 micro-batches of 8.
  expect_equal(reference, 2, {"--global-batch", "48", "--accum-steps", "3"}, "N=2 --global-batch 48 --accum-steps 3");
}

TEST_P(MirroredBatchTest, SspWithStalenessZeroEqualsSync) {
  const SavedParams reference = train(1, 1, 3 * kBatch, GetParam(), GetParam() + "-ref24");
  expect_equal(reference, 3, {"--batch-size", std::to_string(kBatch), "--mode", "ssp", "--staleness", "0"},
               "N=3 --mode ssp --staleness 0");
}

// --batch-size auto on the CPU: a memory limit too small for a worker's share makes it split the
// share into micro-batches, and the result is still one worker's on the whole global batch.
// --device cpu, also where a GPU is visible: there the cuBLAS workspace alone (4 or 32 MiB) would
// break the 0.015 MiB limit, which is the point of the plan's figures below.
TEST_P(MirroredBatchTest, AutoBatchKeepsTheGlobalBatch) {
  const SavedParams reference =
      train_with(1, 1, {"--batch-size", "96", "--device", "cpu"}, GetParam(), GetParam() + "-ref96");
  std::string logs;
  const SavedParams p = train_with(1, 2,
                                   {"--batch-size", "auto", "--global-batch", "96", "--gpu-memory-limit", "0.015",
                                    "--device", "cpu"},
                                   GetParam(), GetParam() + "-auto", "ring", &logs);
  EXPECT_LE(relative_difference(reference, p), 1e-5);
  // The plan of 8x8 inputs and 16,8 hidden units: params and grads 10128 bytes, 232 bytes a row
  // (outputs 16 + 8 + 10, gradients 16 + 8 floats), so 24 rows fit 0.015 MiB: each worker's 48
  // samples become 2 micro-batches, and the chief evaluates in batches of 24.
  EXPECT_NE(logs.find("w0: --batch-size auto: micro-batch 24 x 2 = this worker's 48 samples a step (global batch "
                      "96), the largest whose plan fits 0.015 MiB; evaluation in batches of 24"),
            std::string::npos)
      << logs;
  EXPECT_NE(logs.find("w1: --batch-size auto: micro-batch 24 x 2 = this worker's 48 samples a step"),
            std::string::npos)
      << logs;
}

// Gradient accumulation under every learning-rate schedule (issue 44): one worker of 8
// micro-batches of 8, two workers of 4 and two of 2 (global batch 64 in each), per-worker shares
// of 16 and 48 in micro-batches of 4 and 12, and --batch-size auto, all against one worker of
// batch 64, over 20 steps (5 epochs of the 300 records), for each schedule and optimizer.
// The model is smooth (tanh): with a ReLU a pre-activation that lands within rounding of 0 can
// take the other side of the kink when the batch is cut otherwise, and Adam, which divides each
// gradient by its own size, turns that one sample into an O(lr) step (docs/operations.md, "When
// accumulation and one batch part ways"). That is float arithmetic, not the contract: this
// suite pins the contract where it holds, on every CPU.
class MirroredScheduleTest : public MirroredBase,
                             public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {
 protected:
  std::vector<std::string> flags(const std::vector<std::string>& batching) const {
    std::vector<std::string> f = {"--model", "dense 16, tanh, dense 8, tanh, dense 10"};
    const std::string& schedule = std::get<1>(GetParam());
    if (schedule == "step") {
      f.insert(f.end(), {"--lr-schedule", "step", "--lr-decay-steps", "4", "--lr-decay-rate", "0.5"});
    } else if (schedule == "warmup_cosine") {
      f.insert(f.end(), {"--lr-schedule", "cosine", "--warmup-steps", "3"});
    } else if (schedule == "cosine_restarts") {
      f.insert(f.end(), {"--lr-schedule", "cosine-restarts", "--lr-decay-steps", "5", "--lr-cycle-mult", "2"});
    } else {
      f.insert(f.end(), {"--lr-schedule", schedule});
    }
    f.insert(f.end(), batching.begin(), batching.end());
    return f;
  }
};

TEST_P(MirroredScheduleTest, AccumulatedMicroBatchesEqualOneWorkerOfTheWholeBatch) {
  const auto& [optimizer, schedule] = GetParam();
  const std::string tag = optimizer + "-" + schedule;
  const SavedParams reference = train_with(1, 1, flags({"--batch-size", "64", "--device", "cpu"}), optimizer, tag);
  const double tolerance = optimizer == "adam" ? 1e-4 : 1e-5;
  struct Case {
    int workers;
    std::vector<std::string> batching;
  };
  const std::vector<Case> cases = {
      {1, {"--batch-size", "8", "--accum-steps", "8"}},
      {2, {"--batch-size", "8", "--accum-steps", "4"}},
      {2, {"--batch-size", "16", "--accum-steps", "2"}},
      {2, {"--worker-batch", "16,48", "--accum-steps", "4"}},
      {2, {"--batch-size", "auto", "--global-batch", "64", "--gpu-memory-limit", "0.015"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> batching = c.batching;
    batching.insert(batching.end(), {"--device", "cpu"});
    std::string what = "N=" + std::to_string(c.workers);
    for (const std::string& b : c.batching) what += " " + b;
    std::string logs;
    const SavedParams p = train_with(1, c.workers, flags(batching), optimizer, tag + "-n" + std::to_string(c.workers),
                                     "ring", &logs);
    EXPECT_NE(logs.find("micro-batch"), std::string::npos) << what << ": no accumulation?\n" << logs;
    const double rel = relative_difference(reference, p);
    EXPECT_LE(rel, tolerance) << optimizer << " " << schedule << " " << what;
    std::printf("%s %s %s: max |difference| / max |parameter| = %.3g\n", optimizer.c_str(), schedule.c_str(),
                what.c_str(), rel);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, MirroredScheduleTest,
    ::testing::Values(std::make_tuple("adam", "constant"), std::make_tuple("adam", "step"),
                      std::make_tuple("adam", "cosine"), std::make_tuple("adam", "warmup_cosine"),
                      std::make_tuple("adam", "cosine_restarts"), std::make_tuple("sgd", "cosine"),
                      std::make_tuple("momentum", "warmup_cosine")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

INSTANTIATE_TEST_SUITE_P(AllOptimizers, MirroredBatchTest, ::testing::Values("sgd", "momentum", "adam"),
                         [](const auto& info) { return std::string(info.param); });

INSTANTIATE_TEST_SUITE_P(AllOptimizers, MirroredTest,
                         ::testing::Combine(::testing::Values("sgd", "momentum", "adam"),
                                            ::testing::Values(1, 2, 3)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_N" + std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace pstrain::test
