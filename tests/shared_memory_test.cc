// shared/net/shared_memory.h: what same-host peers rely on. A segment a peer opens shows the creator's
// writes; a read-only mapping (the PS's parameter area in a worker) cannot change them; a wrong
// size or a removed name is a clear error. And as whole jobs: the PS's parameter area leaves no
// name in /dev/shm, whether every worker maps it or the PS is stopped before they all came; a
// worker that cannot map it gets the values copied into its own segment, with the same result.
#include "shared/net/shared_memory.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"

namespace pstrain {
namespace {

using test::read_file;
using test::wait_for_text;

TEST(SharedMemoryTest, PeerSeesTheCreatorsWritesAndTheNameGoesAtUnlink) {
  SharedMemory created;
  std::string error;
  ASSERT_TRUE(SharedMemory::create("pstrain-test", 4096, &created, &error)) << error;
  EXPECT_EQ(created.name().rfind("/pstrain-test-", 0), 0u) << created.name();
  auto* floats = static_cast<float*>(created.data());
  EXPECT_EQ(floats[1023], 0.0f);  // zero-filled

  SharedMemory peer;
  ASSERT_TRUE(SharedMemory::open(created.name(), 4096, &peer, &error, /*read_only=*/true)) << error;
  floats[7] = 2.5f;
  EXPECT_EQ(static_cast<const float*>(peer.data())[7], 2.5f);

  SharedMemory wrong;
  EXPECT_FALSE(SharedMemory::open(created.name(), 8192, &wrong, &error));
  EXPECT_NE(error.find("holds 4096 bytes, expected 8192"), std::string::npos) << error;

  created.unlink();
  EXPECT_FALSE(SharedMemory::open(created.name(), 4096, &wrong, &error));
  EXPECT_NE(error.find("shm_open(" + created.name() + ")"), std::string::npos) << error;
  floats[8] = 3.0f;  // the mappings outlive the name
  EXPECT_EQ(static_cast<const float*>(peer.data())[8], 3.0f);
}

// The child of the death test writes through the read-only mapping and dies of SIGSEGV.
TEST(SharedMemoryDeathTest, ReadOnlyMappingCannotBeWritten) {
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "fast");  // the child runs the statement only, in a copy of this process
  SharedMemory created, peer;
  std::string error;
  ASSERT_TRUE(SharedMemory::create("pstrain-test", 4096, &created, &error)) << error;
  ASSERT_TRUE(SharedMemory::open(created.name(), 4096, &peer, &error, /*read_only=*/true)) << error;
  created.unlink();  // the mappings stay
  volatile float* through_peer = static_cast<float*>(peer.data());
  EXPECT_DEATH(through_peer[0] = 1.0f, "");
  GTEST_FLAG_SET(death_test_style, style);
}

class ParameterAreaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_synthetic_mnist(dir_.path, "train", 600, 8, 8, 1, false);
    write_synthetic_mnist(dir_.path, "t10k", 100, 8, 8, 2, false);
  }
  // On the CPU, also where a GPU is visible: a GPU replica copies the parameters to the device
  // and never computes from the area (it never logs "computing from ps0's parameter area").
  test::Job job() const {
    test::Job j;
    j.num_workers = 2;
    j.dir = dir_.path;
    j.args = {"--data-dir", dir_.path, "--cache-dir", dir_.path, "--hidden", "16,8", "--batch-size", "8",
              "--optimizer", "momentum", "--timeout", "60", "--epochs", "1000", "--device", "cpu"};
    return j;
  }
  // The area's name from the PS's log, once the PS has made it.
  std::string area_name() const {
    const std::string marker = "ps0: values in shared memory (";
    if (!wait_for_text(dir_.path + "/ps0.log", marker, 60)) return "";
    const std::string log = read_file(dir_.path + "/ps0.log");
    const size_t from = log.find(marker) + marker.size();
    return log.substr(from, log.find(')', from) - from);
  }
  static bool exists(const std::string& name) { return ::access(("/dev/shm" + name).c_str(), F_OK) == 0; }
  static void kill_all(const std::vector<pid_t>& pids) {
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    for (pid_t pid : pids) test::wait_for(pid, 30);
  }
  TempDir dir_{"area"};
};

// Both workers compute from the one area; its name goes while the job runs, as soon as both
// have sent their first message after WELCOME (not only when the PS exits).
TEST_F(ParameterAreaTest, NameGoesOnceEveryWorkerHasMappedIt) {
  const test::Job j = job();
  const test::StartedJob started = test::start_job(j);
  std::vector<pid_t> all = started.ps;
  all.insert(all.end(), started.workers.begin(), started.workers.end());
  const std::string name = area_name();
  ASSERT_EQ(name.rfind("/pstrain-ps0-params-", 0), 0u) << read_file(dir_.path + "/ps0.log");
  ASSERT_TRUE(wait_for_text(dir_.path + "/ps0.log", "its name is removed", 60)) << read_file(dir_.path + "/ps0.log");
  EXPECT_EQ(::kill(started.ps[0], 0), 0);  // still training
  EXPECT_FALSE(exists(name)) << name;
  for (const char* w : {"/w0.log", "/w1.log"}) {
    EXPECT_TRUE(wait_for_text(dir_.path + w, "computing from ps0's parameter area", 60)) << read_file(dir_.path + w);
  }
  kill_all(all);
}

// The launcher stops a PS with SIGTERM when a worker fails: if that happens before every worker
// registered, the PS removes the area's name as it dies.
TEST_F(ParameterAreaTest, PsStoppedBeforeEveryWorkerRegisteredRemovesTheName) {
  const test::Job j = job();
  std::vector<pid_t> servers;
  const std::vector<std::string> hosts = test::start_servers(j, &servers);
  ASSERT_EQ(hosts.size(), 1u);
  const pid_t w0 = test::spawn(test::worker_argv(j, 0, {"--ps-hosts", hosts[0]}), dir_.path + "/w0.log");
  const std::string name = area_name();
  ASSERT_EQ(name.rfind("/pstrain-ps0-params-", 0), 0u) << read_file(dir_.path + "/ps0.log");
  EXPECT_TRUE(exists(name)) << name;  // worker 1 has not registered: it may still need the name
  ASSERT_EQ(::kill(servers[0], SIGTERM), 0);
  const test::ExitStatus ps = test::wait_for(servers[0], 30);
  EXPECT_EQ(ps.signal, SIGTERM);
  EXPECT_FALSE(exists(name)) << name;
  kill_all({w0});
}

// A worker that cannot map the area (here its name was removed from /dev/shm before it came, as a
// cleaner of /dev/shm would) says so and pulls the values into its own segment instead (PULL shm
// 1), while the other worker computes from the area: the job ends with the same parameters, to
// the bit, as one where both workers map it.
TEST_F(ParameterAreaTest, WorkerThatCannotMapItGetsItsOwnCopyAndTheSameParameters) {
  const auto run = [&](const std::string& tag, bool remove_name) {
    test::Job j = job();
    j.dir = dir_.path + "/" + tag;
    std::filesystem::create_directories(j.dir);
    j.args.insert(j.args.end(), {"--steps", "40", "--save-params", j.dir + "/params"});
    std::vector<pid_t> servers;
    const std::vector<std::string> hosts = test::start_servers(j, &servers);
    const pid_t w0 = test::spawn(test::worker_argv(j, 0, {"--ps-hosts", hosts.at(0)}), j.dir + "/w0.log");
    EXPECT_TRUE(wait_for_text(j.dir + "/w0.log", "computing from ps0's parameter area", 60)) << read_file(j.dir + "/w0.log");
    if (remove_name) {
      const std::string marker = "ps0: values in shared memory (";
      const std::string log = read_file(j.dir + "/ps0.log");
      const size_t from = log.find(marker);
      EXPECT_NE(from, std::string::npos) << log;
      if (from != std::string::npos) {
        const std::string name = log.substr(from + marker.size(), log.find(')', from) - from - marker.size());
        EXPECT_EQ(::unlink(("/dev/shm" + name).c_str()), 0) << name;
      }
    }
    const pid_t w1 = test::spawn(test::worker_argv(j, 1, {"--ps-hosts", hosts.at(0)}), j.dir + "/w1.log");
    for (pid_t pid : {w0, w1, servers.at(0)}) EXPECT_TRUE(test::wait_for(pid, 60).ok()) << tag;
    const std::string w1_log = read_file(j.dir + "/w1.log");
    EXPECT_EQ(w1_log.find("cannot map ps0's parameter area") != std::string::npos, remove_name) << w1_log;
    EXPECT_EQ(w1_log.find("computing from ps0's parameter area") != std::string::npos, !remove_name) << w1_log;
    return test::load_saved_params(j.dir + "/params");
  };
  const test::SavedParams both = run("both-map", false);
  const test::SavedParams one = run("one-copies", true);
  EXPECT_EQ(test::relative_difference(both, one), 0.0);
}

}  // namespace
}  // namespace pstrain
