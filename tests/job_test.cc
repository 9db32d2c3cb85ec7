// Whole jobs of real pstrain-ps / pstrain-worker processes on loopback.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

class JobTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir("job"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // One pstrain-worker with `args` on a tiny synthetic dataset, alone (no PS, no peers); returns
  // how it exited and leaves its log in *log.
  ExitStatus run_lone_worker(std::vector<std::string> args, std::string* log) {
    write_synthetic_mnist(dir_, "train", 100, 8, 8, 1, false);
    write_synthetic_mnist(dir_, "t10k", 50, 8, 8, 2, false);
    args.insert(args.begin(), PSTRAIN_WORKER_BIN);
    args.insert(args.end(), {"--data-dir", dir_, "--cache-dir", dir_});
    const ExitStatus status = wait_for(spawn(args, dir_ + "/w0.log"), 30);
    *log = read_file(dir_ + "/w0.log");
    return status;
  }

  std::string dir_;
};

// A barrier that cannot complete is reported with the missing worker's index, and the waiting
// worker gives up at its deadline with a message naming the shard.
TEST_F(JobTest, StalledBarrierNamesTheMissingWorker) {
  write_synthetic_mnist(dir_, "train", 200, 8, 8, 1, false);
  write_synthetic_mnist(dir_, "t10k", 50, 8, 8, 2, false);
  Job job;
  job.num_workers = 2;
  job.dir = dir_;
  job.args = {"--data-dir", dir_, "--cache-dir", dir_, "--hidden", "8", "--batch-size", "4",
              "--stall-report", "0.2", "--timeout", "2"};
  std::vector<pid_t> ps;
  const auto addresses = start_servers(job, &ps);
  // Only worker 0 runs: worker 1 never pushes step 0.
  std::vector<std::string> argv = {PSTRAIN_WORKER_BIN, "--index", "0", "--num-workers", "2",
                                   "--ps-hosts", addresses[0]};
  argv.insert(argv.end(), job.args.begin(), job.args.end());
  const ExitStatus worker = wait_for(spawn(argv, dir_ + "/w0.log"), 30);
  kill(ps[0], SIGTERM);
  wait_for(ps[0], 10);
  const std::string ps_log = read_file(dir_ + "/ps0.log");
  const std::string w_log = read_file(dir_ + "/w0.log");
  EXPECT_FALSE(worker.timed_out);
  EXPECT_EQ(worker.code, 1) << w_log;
  // ps0 answers (WAITING, once a second): w0 waits on for the missing worker, 4 x --timeout in all,
  // then gives up naming it; a worker cut off from its PS would time out after --timeout.
  EXPECT_NE(w_log.find("gave up after 8 s (4 x --timeout) waiting for parameters of version 1 from ps0 at "),
            std::string::npos) << w_log;
  EXPECT_NE(w_log.find("; ps0 waits for the push of w1 for step 0 (waited "), std::string::npos) << w_log;
  EXPECT_NE(w_log.find("w0: waiting for parameters of version 1 from ps0 at "), std::string::npos) << w_log;
  EXPECT_NE(ps_log.find("stall: barrier of step 0 has waited"), std::string::npos) << ps_log;
  EXPECT_NE(ps_log.find("for worker(s) 1\n"), std::string::npos) << ps_log;
}

TEST_F(JobTest, WorkerWithoutServerFailsAtItsDeadline) {
  // A port nothing listens on (bound then released by a PS that exits at once is racy; use port 1).
  std::string log;
  const ExitStatus worker = run_lone_worker({"--ps-hosts", "127.0.0.1:1", "--timeout", "1"}, &log);
  EXPECT_EQ(worker.code, 1) << log;
  EXPECT_NE(log.find("timed out after 1"), std::string::npos) << log;
  EXPECT_NE(log.find("HELLO from ps0 at 127.0.0.1:1"), std::string::npos) << log;
}

// NCCL all-reduces GPU buffers: asked for on the CPU, the worker refuses at once with exit 2.
TEST_F(JobTest, NcclOnTheCpuIsAUsageError) {
  std::string log;
  const ExitStatus worker =
      run_lone_worker({"--mode", "allreduce", "--collective", "nccl", "--device", "cpu", "--timeout", "5"}, &log);
  EXPECT_EQ(worker.code, 2) << log;
  EXPECT_NE(log.find("--collective nccl needs a GPU"), std::string::npos) << log;
}

// A worker's memory does not grow with the dataset: the same job on 10x the records. On the CPU
// (--device cpu), also where a GPU is visible: a GPU worker's peak RSS is mostly the CUDA
// driver's and libraries' (hundreds of MiB, some mapped only as kernels are first used), not the
// data's, and the 2 MiB allowed below is not a bound on them.
TEST_F(JobTest, WorkerPeakMemoryDoesNotGrowWithDatasetSize) {
  long peak[2] = {0, 0};
  const uint32_t sizes[2] = {6000, 60000};
  for (int k = 0; k < 2; ++k) {
    const std::string data = dir_ + "/data" + std::to_string(k);
    std::filesystem::create_directories(data);
    write_synthetic_mnist(data, "train", sizes[k], 28, 28, 3, true);
    write_synthetic_mnist(data, "t10k", 1000, 28, 28, 4, false);
    Job job;
    job.dir = data;
    job.args = {"--data-dir", data, "--cache-dir", data, "--steps", "150", "--batch-size", "64",
                "--timeout", "20", "--device", "cpu"};
    const JobResult result = run_job(job);
    ASSERT_TRUE(result.ok()) << result.logs;
    // The worker's own VmHWM: ru_maxrss would include what the forked test process had mapped.
    const size_t at = result.logs.find("peak_rss_kib=");
    ASSERT_NE(at, std::string::npos) << result.logs;
    peak[k] = std::atol(result.logs.c_str() + at + 13);
    ASSERT_GT(peak[k], 0);
  }
  std::printf("worker peak RSS: %ld KiB with 6k records, %ld KiB with 60k\n", peak[0], peak[1]);
  EXPECT_LE(peak[1], peak[0] + 2048) << "peak RSS " << peak[0] << " KiB for 6k records, " << peak[1]
                                     << " KiB for 60k";
}

// Every progress line's breakdown (means over the workers) adds up to the chief's measured time
// per step, within 10%, also in the lines after an epoch's end, where the workers evaluated their
// shares of the test set (the last epoch's: the chief alone) and waited for each other at the
// barrier.
TEST_F(JobTest, StepBreakdownAddsUpToTheMeasuredStepTime) {
  write_synthetic_mnist(dir_, "train", 20000, 28, 28, 5, false);  // 156 steps of 64 per epoch
  write_synthetic_mnist(dir_, "t10k", 10000, 28, 28, 6, false);  // evaluated in ~1/4 of an epoch
  Job job;
  job.num_workers = 2;
  job.dir = dir_;
  job.args = {"--data-dir", dir_, "--cache-dir", dir_, "--batch-size", "64", "--epochs", "4",
              "--log-every", "1000", "--timeout", "30"};
  const JobResult result = run_job(job);
  ASSERT_TRUE(result.ok()) << result.logs;
  int lines = 0, with_eval = 0;
  for (size_t at = result.logs.find("| measured "); at != std::string::npos;
       at = result.logs.find("| measured ", at + 1)) {
    const std::string line = result.logs.substr(at, result.logs.find('\n', at) - at);
    double measured = 0, step = 0, parts[6] = {0, 0, 0, 0, 0, 0};
    const int fields = std::sscanf(line.c_str(),
                                   "| measured %lf ms/step; step %lf ms = data %lf + compute %lf + push %lf + "
                                   "wait %lf + pull %lf + eval %lf",
                                   &measured, &step, &parts[0], &parts[1], &parts[2], &parts[3], &parts[4], &parts[5]);
    ASSERT_GE(fields, 7) << line;
    with_eval += fields == 8;
    double sum = 0;
    for (double p : parts) sum += p;
    EXPECT_NEAR(sum, step, 0.035) << line;  // each part is rounded to 0.01 ms
    if (lines++ == 0) continue;  // the first step carries no times; the first line's measure has it
    EXPECT_NEAR(step, measured, 0.1 * measured) << line;
    std::printf("%s\n", line.c_str());
  }
  std::printf("%d progress lines, %d with an evaluation\n", lines, with_eval);
  EXPECT_EQ(lines, 4);     // one per epoch end
  EXPECT_EQ(with_eval, 3);  // the lines after the first three epochs' evaluations
  // Every process's last line says what CPU it used and how often it waited or was preempted.
  for (const char* process : {"ps0: all 2 workers done", "w0: done;", "w1: done;"}) {
    const size_t line = result.logs.find(process);
    ASSERT_NE(line, std::string::npos) << process << "\n" << result.logs;
    const size_t at = result.logs.find(" cpu_s=", line);
    ASSERT_NE(at, std::string::npos) << process << "\n" << result.logs;
    double cpu = 0, user = 0, sys = 0;
    long waits = -1, preempted = -1;
    ASSERT_EQ(std::sscanf(result.logs.c_str() + at, " cpu_s=%lf (user %lf + sys %lf) switches=%ld+%ld", &cpu, &user,
                          &sys, &waits, &preempted),
              5)
        << result.logs.substr(at, 80);
    EXPECT_NEAR(cpu, user + sys, 0.0015) << process;
    EXPECT_GT(cpu, 0.05) << process;  // 624 steps
    EXPECT_GT(waits, 624) << process;   // at least one wait for the other side per step
    EXPECT_GE(preempted, 0) << process;
  }
}

}  // namespace
}  // namespace pstrain::test
