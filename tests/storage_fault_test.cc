// Storage faults (docs/checkpoints.md, "When the disk fills"): the checkpoint directory on a
// small tmpfs that fills up while the job checkpoints. With --checkpoint-errors stop the job ends
// naming the file and the errno, and its last complete checkpoint stays usable: resumed, the job
// ends bit-identical to an uninterrupted run. With warn it goes on and completes. Needs root (it
// mounts the tmpfs); skipped elsewhere.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

class StorageFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_synthetic_mnist(dir_.path, "train", 400, 8, 8, 61, false);
    write_synthetic_mnist(dir_.path, "t10k", 40, 8, 8, 62, false);
    small_ = dir_.path + "/small";
    std::filesystem::create_directories(small_);
    // A checkpoint of this model is 3 x 1266 floats per shard (values and Adam's two slots, 4
    // pages of tmpfs), a model.json and a manifest (a page each): 56 KiB hold two complete ones and
    // part of a third.
    if (mount("tmpfs", small_.c_str(), "tmpfs", 0, "size=56k") != 0) {
      GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "): needs root";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) umount2(small_.c_str(), MNT_DETACH);
  }

  JobResult train(const std::string& tag, const std::string& ckpt, const std::vector<std::string>& more) {
    Job job;
    job.num_workers = 2;
    job.dir = dir_.path + "/" + tag;
    std::filesystem::create_directories(job.dir);
    job.args = {"--data-dir", dir_.path, "--cache-dir", dir_.path, "--hidden", "16,8", "--steps", "120",
                "--batch-size", "8", "--optimizer", "adam", "--lr", "0.01", "--timeout", "5",
                "--save-params", job.dir + "/params"};
    if (!ckpt.empty()) job.args.insert(job.args.end(), {"--checkpoint-dir", ckpt, "--keep-checkpoints", "100"});
    job.args.insert(job.args.end(), more.begin(), more.end());
    return run_job_stopping_servers(job);
  }

  TempDir dir_{"storage"};
  std::string small_;
  bool mounted_ = false;
};

TEST_F(StorageFaultTest, ADiskThatFillsStopsTheJobNamingItAndTheLastCompleteCheckpointResumes) {
  const JobResult full = train("full", small_, {"--checkpoint-every", "10", "--checkpoint-errors", "stop"});
  EXPECT_FALSE(full.ok()) << full.logs;
  EXPECT_NE(full.logs.find("checkpoint of version "), std::string::npos) << full.logs;
  EXPECT_NE(full.logs.find(" failed: cannot write '" + small_ + "/v00000000"), std::string::npos) << full.logs;
  EXPECT_NE(full.logs.find("No space left on device; earlier checkpoints are intact (--checkpoint-errors stop)"),
            std::string::npos) << full.logs;

  // The complete checkpoints on the full disk are intact: a job resumed from them (into a copy
  // with room) ends where an uninterrupted one does.
  const std::string copy = dir_.path + "/copy";
  std::filesystem::copy(small_, copy, std::filesystem::copy_options::recursive);
  const JobResult resumed = train("resumed", copy, {"--checkpoint-every", "1000", "--resume"});
  ASSERT_TRUE(resumed.ok()) << resumed.logs;
  EXPECT_NE(resumed.logs.find("--resume: from checkpoint " + copy + "/v"), std::string::npos) << resumed.logs;
  const JobResult uninterrupted = train("uninterrupted", "", {});
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.logs;
  const SavedParams want = load_saved_params(dir_.path + "/uninterrupted/params");
  const SavedParams got = load_saved_params(dir_.path + "/resumed/params");
  EXPECT_TRUE(bit_identical(want, got)) << relative_difference(want, got);
}

TEST_F(StorageFaultTest, WithWarnAFullDiskIsLoggedAndTheJobCompletes) {
  const JobResult run = train("warn", small_, {"--checkpoint-every", "10", "--checkpoint-errors", "warn"});
  EXPECT_TRUE(run.ok()) << run.logs;
  EXPECT_NE(run.logs.find("No space left on device"), std::string::npos) << run.logs;
  EXPECT_NE(run.logs.find(" W "), std::string::npos) << run.logs;
}

// The chief's manifest cannot be written (here a directory stands where v20's MANIFEST goes): the
// checkpoint of step 20 stays incomplete, the job stops naming it, and --resume takes step 10's.
TEST(ManifestFaultTest, AManifestThatCannotBeWrittenLeavesItsCheckpointIncomplete) {
  TempDir dir("manifest-fault");
  write_synthetic_mnist(dir.path, "train", 400, 8, 8, 63, false);
  write_synthetic_mnist(dir.path, "t10k", 40, 8, 8, 64, false);
  const std::string ckpt = dir.path + "/ckpt";
  std::filesystem::create_directories(ckpt + "/v0000000020/MANIFEST");
  const auto train = [&](const std::string& tag, const std::vector<std::string>& more) {
    Job job;
    job.num_workers = 2;
    job.num_ps = 2;
    job.dir = dir.path + "/" + tag;
    std::filesystem::create_directories(job.dir);
    job.args = {"--data-dir", dir.path, "--cache-dir", dir.path, "--hidden", "16,8", "--steps", "60",
                "--batch-size", "8", "--optimizer", "adam", "--lr", "0.01", "--checkpoint-dir", ckpt,
                "--save-params", job.dir + "/params"};
    job.args.insert(job.args.end(), more.begin(), more.end());
    return run_job_stopping_servers(job);
  };
  // w1 waits for w0's push of step 20 until it gives up, after 4 x --timeout: 8 s.
  const JobResult stopped = train("stopped", {"--checkpoint-every", "10", "--timeout", "2"});
  EXPECT_FALSE(stopped.ok()) << stopped.logs;
  EXPECT_NE(stopped.logs.find("E pstrain-worker: w0: checkpoint of step 20 is incomplete: "), std::string::npos)
      << stopped.logs;
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/v0000000010/MANIFEST"));
  std::filesystem::remove_all(ckpt + "/v0000000020");
  const JobResult resumed = train("resumed", {"--checkpoint-every", "1000", "--resume", "--timeout", "5"});
  ASSERT_TRUE(resumed.ok()) << resumed.logs;
  EXPECT_NE(resumed.logs.find("--resume: from checkpoint " + ckpt + "/v0000000010"), std::string::npos) << resumed.logs;
}

}  // namespace
}  // namespace pstrain::test
