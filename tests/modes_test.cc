// The PS's consistency modes beyond the barrier (issue 16), as whole jobs of real processes:
// ssp's bound on how far a worker runs ahead, async's staleness, and backup workers, which keep
// the job going while a worker is stopped. (Their mirrored-contract cases are in mirrored_test.)
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <chrono>
#include <string>
#include <thread>

#include "test_util/idx_writer.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

class ModesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("modes");
    write_synthetic_mnist(dir_, "train", 600, 8, 8, 1, false);
    write_synthetic_mnist(dir_, "t10k", 100, 8, 8, 2, false);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Job job(int workers, std::vector<std::string> flags) const {
    Job j;
    j.num_workers = workers;
    j.dir = dir_;
    j.args = {"--data-dir", dir_, "--cache-dir", dir_, "--hidden", "16,8", "--batch-size", "8", "--optimizer",
              "momentum", "--lr", "0.05", "--timeout", "60", "--epochs", "1000"};
    j.args.insert(j.args.end(), flags.begin(), flags.end());
    return j;
  }

  // The first number after `prefix` in `text`, or -1.
  static long number_after(const std::string& text, const std::string& prefix) {
    const size_t at = text.find(prefix);
    if (at == std::string::npos) return -1;
    return std::stol(text.substr(at + prefix.size()));
  }

  std::string dir_;
};

// With one worker four times slower, the others run ahead, but never more than s steps past the
// slowest: the PS's own counters (each worker's pushed steps at every push) say so, and show the
// bound was reached.
TEST_F(ModesTest, SspNoWorkerRunsMoreThanStalenessStepsAheadOfTheSlowest) {
  for (const int s : {1, 3}) {
    Job j = job(3, {"--mode", "ssp", "--staleness", std::to_string(s), "--steps", "60"});
    j.worker_args[2] = {"--slowdown", "4"};
    const JobResult result = run_job(j);
    ASSERT_TRUE(result.ok()) << result.logs;
    const std::string ps_log = read_file(dir_ + "/ps0.log");
    const long lead = number_after(ps_log, "the largest lead of a worker over the slowest was ");
    EXPECT_EQ(lead, s) << ps_log;  // at most s, and the slow worker made the others reach it
    EXPECT_NE(read_file(dir_ + "/w0.log").find("lead over the slowest worker max " + std::to_string(s)),
              std::string::npos)
        << result.logs;
  }
}

// async applies every push as it comes: the PS applied N x steps updates, and reports the
// staleness it measured (whether any push was stale depends on how the two workers' steps
// interleave; HostileTest.AsyncAppliesEachPushWeightedByItsSamples checks its arithmetic).
TEST_F(ModesTest, AsyncAppliesEveryPushAndReportsItsStaleness) {
  Job j = job(2, {"--mode", "async", "--steps", "50"});
  j.worker_args[1] = {"--slowdown", "3"};
  const JobResult result = run_job(j);
  ASSERT_TRUE(result.ok()) << result.logs;
  const std::string ps_log = read_file(dir_ + "/ps0.log");
  EXPECT_NE(ps_log.find("all 2 workers done at version 100; async: staleness mean"), std::string::npos) << ps_log;
  EXPECT_GE(number_after(ps_log, "; async: staleness mean "), 0) << ps_log;
  EXPECT_GE(number_after(ps_log, " max "), 0) << ps_log;
  EXPECT_NE(ps_log.find(" over 100 updates"), std::string::npos) << ps_log;
  const std::string chief = read_file(dir_ + "/w0.log");
  EXPECT_NE(chief.find("summary: mode=async"), std::string::npos) << chief;
  EXPECT_NE(chief.find("; staleness mean "), std::string::npos) << chief;
  // The PS writes a worker's parameter area whenever it answers a PULL: no computing from it.
  EXPECT_NE(chief.find("w0: ps0 on this host: payloads through shared memory"), std::string::npos) << chief;
  EXPECT_EQ(chief.find("parameter area"), std::string::npos) << chief;
}

// async counts updates, not steps: a worker that registers after the others have pushed (here
// after worker 0 has finished all its steps) still runs all of its own steps from step 0.
TEST_F(ModesTest, AsyncWorkerRegisteringLateRunsAllItsSteps) {
  Job j = job(2, {"--mode", "async", "--steps", "30"});
  std::vector<pid_t> servers;
  const std::vector<std::string> hosts = start_servers(j, &servers);
  ASSERT_EQ(hosts.size(), 1u);
  const pid_t first = spawn(worker_argv(j, 0, {"--ps-hosts", hosts[0]}), dir_ + "/w0.log");
  const ExitStatus w0 = wait_for(first, 60);  // async: worker 0 does not wait for worker 1
  ASSERT_TRUE(w0.ok()) << read_file(dir_ + "/w0.log") << read_file(dir_ + "/ps0.log");
  const pid_t late = spawn(worker_argv(j, 1, {"--ps-hosts", hosts[0]}), dir_ + "/w1.log");
  const ExitStatus w1 = wait_for(late, 60);
  const ExitStatus ps = wait_for(servers[0], 30);
  const std::string w1_log = read_file(dir_ + "/w1.log"), ps_log = read_file(dir_ + "/ps0.log");
  ASSERT_TRUE(w1.ok() && ps.ok()) << w1_log << ps_log;
  EXPECT_NE(w1_log.find("training 30 steps\n"), std::string::npos) << w1_log;
  EXPECT_NE(ps_log.find("all 2 workers done at version 60;"), std::string::npos) << ps_log;
  EXPECT_NE(ps_log.find("; 60 chunk update(s), "), std::string::npos) << ps_log;  // and what they cost
}

size_t progress_lines(const std::string& log) {
  size_t n = 0;
  for (size_t at = log.find(" samples/s "); at != std::string::npos; at = log.find(" samples/s ", at + 1)) ++n;
  return n;
}

// Waits (bounded) until the chief has printed `more` progress lines beyond `seen`.
bool chief_progresses(const std::string& path, size_t seen, size_t more, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (progress_lines(read_file(path)) >= seen + more) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// One of three workers stopped (SIGSTOP): with --backup-workers 1 every step is applied with the
// other two, the chief keeps printing progress, and after SIGCONT the stopped worker's late
// pushes are dropped, it skips to the job's step, and the job completes.
TEST_F(ModesTest, BackupWorkerKeepsTheJobGoingWhileAWorkerIsStopped) {
  const Job j = job(3, {"--backup-workers", "1", "--steps", "3000", "--log-every", "20"});
  const StartedJob started = start_job(j);
  const std::string chief = dir_ + "/w0.log";
  // The first progress line, whatever its step: with backup workers the chief too may skip ahead
  // of a step (it printed global 25 and 40, never 20, on a loaded CI machine).
  ASSERT_TRUE(chief_progresses(chief, 0, 1, 60)) << read_file(chief);
  ASSERT_EQ(kill(started.workers[2], SIGSTOP), 0);
  const size_t seen = progress_lines(read_file(chief));
  const bool progressed = chief_progresses(chief, seen, 10, 60);  // 200 steps without worker 2
  ASSERT_EQ(kill(started.workers[2], SIGCONT), 0);
  EXPECT_TRUE(progressed) << read_file(chief);
  const JobResult result = finish_job(j, started);
  ASSERT_TRUE(result.ok()) << result.logs;
  const std::string ps_log = read_file(dir_ + "/ps0.log");
  EXPECT_GE(number_after(ps_log, "late pushes dropped: "), 1) << ps_log;
  EXPECT_NE(read_file(chief).find("late pushes dropped"), std::string::npos);
  EXPECT_NE(ps_log.find("mode sync with 1 backup worker(s) (a step is applied once 2 workers pushed it)"),
            std::string::npos)
      << ps_log;
}

// Without backup workers the barrier waits for the stopped worker, and the stall report names it;
// after SIGCONT the job goes on and completes.
TEST_F(ModesTest, WithoutBackupWorkersTheStallReportNamesTheStoppedWorker) {
  const Job j = job(3, {"--steps", "300", "--stall-report", "0.5"});
  const StartedJob started = start_job(j);
  ASSERT_TRUE(wait_for_text(dir_ + "/w0.log", "(global 100)", 60)) << read_file(dir_ + "/w0.log");
  ASSERT_EQ(kill(started.workers[2], SIGSTOP), 0);
  const bool reported = wait_for_text(dir_ + "/ps0.log", "s for worker(s) 2", 30);
  ASSERT_EQ(kill(started.workers[2], SIGCONT), 0);
  EXPECT_TRUE(reported) << read_file(dir_ + "/ps0.log");
  const JobResult result = finish_job(j, started);
  EXPECT_TRUE(result.ok()) << result.logs;
}

}  // namespace
}  // namespace pstrain::test
