// Workers and signals (docs/operations.md, "How processes are stopped"): whenever SIGTERM,
// SIGINT or SIGHUP ends a worker, here while its PS is stopped and has not answered its HELLO,
// the names of the worker's shared-memory segments go with it. A checkpointing chief takes a
// first SIGTERM as the request for a final checkpoint and a second as "stop now".
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "test_util/idx_writer.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

class WorkerSignalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_synthetic_mnist(dir_.path, "train", 64, 8, 8, 41, false);
    write_synthetic_mnist(dir_.path, "t10k", 16, 8, 8, 42, false);
    job_.dir = dir_.path;
    job_.num_workers = 2;
    job_.args = {"--data-dir", dir_.path, "--cache-dir", dir_.path, "--hidden", "8", "--steps", "5",
                 "--batch-size", "8", "--timeout", "60"};
    const std::vector<std::string> hosts = start_servers(job_, &servers_);
    ASSERT_EQ(hosts.size(), 1u);
    host_ = hosts[0];
    ASSERT_EQ(kill(servers_[0], SIGSTOP), 0);  // it will not answer any HELLO
  }
  void TearDown() override {
    for (pid_t pid : servers_) {
      kill(pid, SIGKILL);
      kill(pid, SIGCONT);
      wait_for(pid, 30);
    }
  }
  // Worker `index` waiting for the stopped PS, its segment made.
  pid_t waiting_worker(int index, const std::vector<std::string>& extra, const std::string& log) {
    std::vector<std::string> flags = {"--ps-hosts", host_};
    flags.insert(flags.end(), extra.begin(), extra.end());
    const pid_t pid = spawn(worker_argv(job_, index, flags), log);
    EXPECT_TRUE(wait_for_text(log, "connecting to ps0", 60)) << read_file(log);
    EXPECT_TRUE(wait_until([&] { return !shm_segments_of(pid).empty(); }, 60)) << read_file(log);
    return pid;
  }

  TempDir dir_{"signals"};
  Job job_;
  std::vector<pid_t> servers_;
  std::string host_;
};

TEST_F(WorkerSignalTest, EverySignalThatEndsAWorkerRemovesItsSegments) {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    const std::string log = dir_.path + "/w1-" + std::to_string(sig) + ".log";
    const pid_t worker = waiting_worker(1, {}, log);
    ASSERT_EQ(kill(worker, sig), 0);
    const ExitStatus status = wait_for(worker, 30);
    EXPECT_EQ(status.signal, sig) << read_file(log);
    EXPECT_EQ(shm_segments_of(worker), std::vector<std::string>{}) << "signal " << sig;
  }
}

TEST_F(WorkerSignalTest, ACheckpointingChiefStopsAtTheSecondSigterm) {
  const std::string log = dir_.path + "/w0.log";
  const pid_t chief = waiting_worker(0, {"--checkpoint-dir", dir_.path + "/ckpt"}, log);
  ASSERT_EQ(kill(chief, SIGTERM), 0);
  ASSERT_TRUE(wait_for_text(log, "w0: SIGTERM: a final checkpoint at the next step", 30)) << read_file(log);
  EXPECT_EQ(kill(chief, 0), 0) << "the first SIGTERM is a request, not the end";
  ASSERT_EQ(kill(chief, SIGTERM), 0);
  const ExitStatus status = wait_for(chief, 30);
  EXPECT_EQ(status.signal, SIGTERM) << read_file(log);
  EXPECT_NE(read_file(log).find("w0: a second SIGTERM: stopping now"), std::string::npos) << read_file(log);
  EXPECT_EQ(shm_segments_of(chief), std::vector<std::string>{});
}

}  // namespace
}  // namespace pstrain::test
