// Same job, same bits (docs/operations.md, "Determinism"): in sync mode the PS sums a step's
// pushes in worker order, whatever order they arrive in, so a job run again, with its pushes
// delayed at random (--push-jitter-ms), over another transport or on another number of PS
// shards gives bit-identical parameters. The all-reduce sums in a fixed order too.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

class DeterminismTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_dir_ = new std::string(make_temp_dir("determinism"));
    write_synthetic_mnist(*data_dir_, "train", 240, 8, 8, 21, false);
    write_synthetic_mnist(*data_dir_, "t10k", 60, 8, 8, 22, false);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*data_dir_);
    delete data_dir_;
    data_dir_ = nullptr;
  }

  // The job in small: 3 workers, Adam (which turns a last-bit difference of a near-zero
  // gradient into a visible one), every push delayed by up to 1 ms at random. num_ps 0: allreduce.
  static SavedParams train(int num_ps, const std::string& tag, const std::vector<std::string>& extra = {}) {
    const std::string dir = make_temp_dir("determinism-" + tag);
    Job job;
    job.num_ps = std::max(num_ps, 1);
    job.num_workers = 3;
    job.dir = dir;
    job.args = {"--data-dir", *data_dir_, "--cache-dir", dir, "--hidden", "16,8", "--steps", "40", "--batch-size", "8",
                "--optimizer", "adam", "--lr", "0.01", "--seed", "11", "--timeout", "30", "--push-jitter-ms", "1",
                "--save-params", dir + "/params"};
    job.args.insert(job.args.end(), extra.begin(), extra.end());
    const JobResult result = num_ps == 0 ? run_allreduce_job(job) : run_job(job);
    EXPECT_TRUE(result.ok()) << result.logs;
    SavedParams params = load_saved_params(dir + "/params");
    std::filesystem::remove_all(dir);
    return params;
  }

  static std::string* data_dir_;
};
std::string* DeterminismTest::data_dir_ = nullptr;

TEST_F(DeterminismTest, SyncRunsWithRandomPushDelaysAreBitIdentical) {
  const SavedParams first = train(1, "sync-0");
  for (int run = 1; run < 5; ++run) {
    const SavedParams again = train(1, "sync-" + std::to_string(run));
    EXPECT_TRUE(bit_identical(first, again))
        << "run " << run << ": max |difference| / max |parameter| = " << relative_difference(first, again);
  }
}

TEST_F(DeterminismTest, ShardCountTransportAndSspZeroChangeNoBit) {
  const SavedParams one = train(1, "s1");
  const SavedParams three = train(3, "s3");
  EXPECT_TRUE(bit_identical(one, three)) << "S=1 vs S=3: " << relative_difference(one, three);
  const SavedParams sockets = train(2, "sockets", {"--shared-memory", "off"});
  EXPECT_TRUE(bit_identical(one, sockets)) << "shared memory vs sockets: " << relative_difference(one, sockets);
  const SavedParams ssp = train(2, "ssp0", {"--mode", "ssp", "--staleness", "0"});
  EXPECT_TRUE(bit_identical(one, ssp)) << "sync vs ssp 0: " << relative_difference(one, ssp);
  const SavedParams chunked = train(2, "chunked", {"--chunk-kib", "1"});
  EXPECT_TRUE(bit_identical(one, chunked)) << "--chunk-kib 1: " << relative_difference(one, chunked);
}

// The ring all-reduce and the shared-memory all-reduce each sum in a fixed order.
TEST_F(DeterminismTest, AllreduceRunsWithRandomPushDelaysAreBitIdentical) {
  for (const char* shm : {"auto", "off"}) {
    const SavedParams first = train(0, std::string("ring-") + shm, {"--shared-memory", shm});
    for (int run = 1; run < 3; ++run) {
      const SavedParams again = train(0, std::string("ring-") + shm + std::to_string(run), {"--shared-memory", shm});
      EXPECT_TRUE(bit_identical(first, again))
          << "--shared-memory " << shm << " run " << run << ": " << relative_difference(first, again);
    }
  }
}

}  // namespace
}  // namespace pstrain::test
