// One job per directory (docs/operations.md, "One job per directory"): the chief locks
// --checkpoint-dir for its whole life, so a second job there is refused at once, naming the
// holder; a holder that dies, however, leaves no stale lock. Directories a job cannot write stop
// it before its first step.
#include "shared/util/dir_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>
#include <string>

#include "shared/util/error.h"
#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DirLockTest, ASecondLockIsRefusedNamingTheHolderAndFreedWhenTheHolderGoes) {
  TempDir dir("dirlock");
  const std::string ckpt = dir.path + "/new/ckpt";  // created with its parents
  {
    DirLock first(ckpt, "x.lock", "--checkpoint-dir", "the first job");
    EXPECT_TRUE(first.held());
    const std::string why = error_of([&] { DirLock second(ckpt, "x.lock", "--checkpoint-dir", "the second job"); });
    EXPECT_NE(why.find("--checkpoint-dir: " + ckpt + " is in use by another job: pid " + std::to_string(getpid()) + " on host "),
              std::string::npos) << why;
    EXPECT_NE(why.find(": the first job, since "), std::string::npos) << why;
    EXPECT_THROW(DirLock(ckpt, "x.lock", "--checkpoint-dir", "again"), UsageError);
    DirLock other_file(ckpt, "y.lock", "--checkpoint-dir", "another lock file in the same directory");
    EXPECT_TRUE(other_file.held());
  }
  DirLock after(ckpt, "x.lock", "--checkpoint-dir", "the next job");
  EXPECT_TRUE(after.held());
}

// The kernel drops a SIGKILLed holder's lock: no stale lock to clean up by hand.
TEST(DirLockTest, AKilledHolderLeavesNoStaleLock) {
  TempDir dir("dirlock-kill");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    DirLock held(dir.path, "x.lock", "--checkpoint-dir", "the child");
    const char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  const std::string why = error_of([&] { DirLock refused(dir.path, "x.lock", "--checkpoint-dir", "the parent"); });
  EXPECT_NE(why.find("pid " + std::to_string(child) + " on host"), std::string::npos) << why;
  ASSERT_EQ(kill(child, SIGKILL), 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  DirLock taken(dir.path, "x.lock", "--checkpoint-dir", "the parent");
  EXPECT_TRUE(taken.held());
}

TEST(DirLockTest, UnwritableDirectoriesNameThePathAndTheReason) {
  const std::string locked =
      error_of([] { DirLock lock("/proc/pstrain-no-such/ckpt", "x.lock", "--checkpoint-dir", "w0"); });
  EXPECT_NE(locked.find("--checkpoint-dir: cannot create directory /proc/pstrain-no-such/ckpt: "), std::string::npos)
      << locked;
  const std::string saved = error_of([] { check_writable_dir("/proc/pstrain-no-such", "--save-params"); });
  EXPECT_NE(saved.find("--save-params: cannot create directory /proc/pstrain-no-such: "), std::string::npos) << saved;
  TempDir dir("dirlock-writable");
  check_writable_dir(dir.path + "/a/b", "--save-params");  // made, with its parents, then removed
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/a"));
  std::filesystem::create_directories(dir.path + "/c");
  check_writable_dir(dir.path + "/c", "--save-params");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path + "/c"));  // kept, and the probe file is gone
}

// The PS shards of a job check one new checkpoint directory at the same moment: none may fail
// because another removed the directory it had just made, and nothing one of them put there is
// removed by the others' checks.
TEST(DirLockTest, ProcessesCheckingOneNewDirectoryAtOnceAllSucceed) {
  TempDir dir("dirlock-race");
  const std::string shared = dir.path + "/ckpt/sub";
  std::vector<pid_t> children;
  for (int c = 0; c < 4; ++c) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      for (int i = 0; i < 200; ++i) {
        try {
          check_writable_dir(shared, "--checkpoint-dir");
        } catch (const Error& e) {
          std::fprintf(stderr, "check %d: %s\n", i, e.what());
          _exit(1);
        }
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a check failed: status " << status;
  }
  std::filesystem::create_directories(shared);
  std::ofstream(shared + "/.pstrain-checkpoint.lock") << "held\n";
  check_writable_dir(dir.path + "/ckpt/sub/deeper", "--checkpoint-dir");
  EXPECT_TRUE(std::filesystem::exists(shared + "/.pstrain-checkpoint.lock"));
}

// Two jobs on one checkpoint directory: the second chief is refused at once (exit 2), naming
// the first chief's pid; once the first job is gone the directory is free again.
TEST(DirLockJobTest, ASecondJobOnTheCheckpointDirectoryIsRefusedAtOnce) {
  TempDir dir("dirlock-jobs");
  write_synthetic_mnist(dir.path, "train", 200, 8, 8, 31, false);
  write_synthetic_mnist(dir.path, "t10k", 40, 8, 8, 32, false);
  const std::string ckpt = dir.path + "/ckpt";
  Job first;
  first.dir = dir.path + "/first";
  std::filesystem::create_directories(first.dir);
  first.args = {"--data-dir", dir.path, "--cache-dir", first.dir, "--hidden", "8", "--epochs", "100000",
                "--batch-size", "8", "--log-every", "10", "--checkpoint-dir", ckpt, "--checkpoint-every", "50"};
  const StartedJob started = start_job(first);
  ASSERT_TRUE(wait_for_text(first.dir + "/w0.log", "(global 10)", 60)) << read_file(first.dir + "/w0.log");

  Job second = first;
  second.dir = dir.path + "/second";
  std::filesystem::create_directories(second.dir);
  second.args[3] = second.dir;  // --cache-dir
  const auto start_second = [&](const std::string& log) {
    return spawn(worker_argv(second, 0, {"--ps-hosts", "127.0.0.1:9", "--start-timeout", "1"}), log);
  };
  const ExitStatus refused = wait_for(start_second(second.dir + "/w0.log"), 30);
  const std::string log = read_file(second.dir + "/w0.log");
  EXPECT_EQ(refused.code, 2) << log;
  EXPECT_NE(log.find(ckpt + " is in use by another job: pid " + std::to_string(started.workers[0]) + " on host "),
            std::string::npos) << log;
  EXPECT_EQ(log.find("connecting to ps0"), std::string::npos) << "refused before it connects\n" << log;

  for (pid_t pid : started.workers) kill(pid, SIGKILL);
  for (pid_t pid : started.ps) kill(pid, SIGKILL);
  finish_job(first, started);
  const ExitStatus free_again = wait_for(start_second(second.dir + "/w0-again.log"), 30);
  const std::string again = read_file(second.dir + "/w0-again.log");
  EXPECT_EQ(again.find("in use by another job"), std::string::npos) << again;
  EXPECT_NE(again.find("connecting to ps0"), std::string::npos) << again;  // past the lock: no PS there
  EXPECT_EQ(free_again.code, 1) << again;
}

// --save-params and --checkpoint-dir that cannot be written stop the job before its first step.
TEST(DirLockJobTest, UnwritableOutputDirectoriesFailBeforeTheFirstStep) {
  TempDir dir("dirlock-unwritable");
  Job job;
  job.dir = dir.path;
  for (const auto& [flag, path] : {std::pair{"--save-params", "/proc/pstrain-x/params"},
                                   std::pair{"--checkpoint-dir", "/proc/pstrain-x/ckpt"}}) {
    const std::string log = dir.path + "/w0" + std::string(flag) + ".log";
    const ExitStatus status = wait_for(spawn(worker_argv(job, 0, {"--ps-hosts", "127.0.0.1:9", flag, path}), log), 30);
    const std::string text = read_file(log);
    EXPECT_EQ(status.code, 1) << text;
    EXPECT_NE(text.find(std::string(flag) + ": cannot create directory " + path), std::string::npos) << text;
    EXPECT_EQ(text.find("connecting to ps0"), std::string::npos) << text;
  }
  const std::string ps_log = dir.path + "/ps0.log";
  const ExitStatus ps = wait_for(spawn({PSTRAIN_PS_BIN, "--checkpoint-dir", "/proc/pstrain-x/ckpt"}, ps_log), 30);
  EXPECT_EQ(ps.code, 1) << read_file(ps_log);
  EXPECT_NE(read_file(ps_log).find("--checkpoint-dir: cannot create directory /proc/pstrain-x/ckpt"), std::string::npos)
      << read_file(ps_log);
}

}  // namespace
}  // namespace pstrain::test
