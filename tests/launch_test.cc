// launch/launch.sh driving the real binaries: fail fast, and the mirrored contract end to end.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <random>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>
#include <thread>
#include <tuple>

#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/launched.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

// SIGTERM to a checkpointing job's launcher while worker w2 is paused, so that the job cannot
// end before the launcher has passed the signal on to the chief, however fast the machine; w2
// goes on as soon as the launcher says so (one stopped for 2 s would make it give up the final
// checkpoint).
void stop_with_sigterm(pid_t launcher, const std::string& run_dir) {
  const pid_t w2 = pid_of(run_dir, "w2");
  ASSERT_GT(w2, 0) << read_file(run_dir + "/cmd.txt");
  ASSERT_EQ(kill(w2, SIGSTOP), 0);
  const bool sent = kill(launcher, SIGTERM) == 0;
  const bool passed_on = sent && wait_for_text(run_dir + ".log", "received SIGTERM; w0 writes a final checkpoint", 30);
  ASSERT_EQ(kill(w2, SIGCONT), 0);
  ASSERT_TRUE(sent);
  ASSERT_TRUE(passed_on) << read_file(run_dir + ".log");
}

class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("launch");
    write_synthetic_mnist(dir_, "train", 3000, 8, 8, 5, false);
    write_synthetic_mnist(dir_, "t10k", 200, 8, 8, 6, false);
    setenv("PSTRAIN_BUILD_DIR", std::filesystem::path(PSTRAIN_PS_BIN).parent_path().c_str(), 1);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::string> launch(const std::string& run, std::vector<std::string> counts,
                                  std::vector<std::string> flags) {
    std::vector<std::string> argv = {"/bin/bash", PSTRAIN_LAUNCH_SH, "--no-setup", "--run-dir", dir_ + "/" + run};
    argv.insert(argv.end(), counts.begin(), counts.end());
    argv.push_back("--");
    for (const char* f : {"--hidden", "16,8", "--timeout", "20"}) argv.push_back(f);
    argv.push_back("--data-dir");
    argv.push_back(dir_);
    argv.push_back("--cache-dir");
    argv.push_back(dir_);
    argv.insert(argv.end(), flags.begin(), flags.end());
    return argv;
  }
  std::string log_of(const std::string& name) const { return dir_ + "/" + name + ".log"; }
  std::string params_of(const std::string& name) const { return dir_ + "/" + name + "-params"; }
  // DIR/ckpt-NAME, made here as an operator's shared directory would be. (The binaries make a
  // missing one, but two shards making it at the same moment can fail: "--checkpoint-dir: cannot
  // write into DIR: No such file or directory", from check_writable_dir in
  // shared/util/dir_lock.cc, which removes the directory it made for its probe.)
  std::string checkpoint_dir(const std::string& name) const {
    const std::string path = dir_ + "/ckpt-" + name;
    std::filesystem::create_directories(path);
    return path;
  }
  // launch.sh with `counts` and the job `flags` plus --save-params params_of(name), its output in
  // log_of(name); `during` acts on the running job (the launcher's pid, the run directory).
  ExitStatus run(const std::string& name, const std::vector<std::string>& counts,
                 std::vector<std::string> flags,
                 const std::function<void(pid_t, const std::string&)>& during = nullptr) {
    flags.insert(flags.end(), {"--save-params", params_of(name)});
    const pid_t launcher = spawn(launch(name, counts, flags), log_of(name));
    if (during) during(launcher, dir_ + "/" + name);
    return wait_for(launcher, 180);
  }
  // The checkpointing job of the SIGTERM tests (2 PS, 3 workers, 1000 steps, cosine schedule).
  static std::vector<std::string> sigterm_job(const std::string& optimizer, const std::string& ckpt);
  // A run of sigterm_job stopped by SIGTERM to its launcher at a random step (`seed`), then
  // resumed from its final checkpoint on each shard count of `resume_on`: every resumed run must
  // end with `want`'s bits.
  void stop_and_resume(const std::string& optimizer, unsigned seed, const std::vector<std::string>& resume_on,
                       const SavedParams& want);

  std::string dir_;
};

TEST_F(LaunchTest, KilledWorkerStopsTheJobNamingIt) {
  const std::string run = dir_ + "/kill";
  const pid_t launcher = spawn(launch("kill", {"--num-workers", "3"}, {"--epochs", "1000", "--batch-size", "4"}),
                               dir_ + "/launch.log");
  ASSERT_TRUE(wait_for_text(run + "/w0.log", "training", 60)) << read_file(dir_ + "/launch.log");
  // w0 trains once the PS answers; the launcher may not have started (and recorded) w2 yet.
  ASSERT_TRUE(wait_for_text(run + "/cmd.txt", "\nw2\t", 60)) << read_file(dir_ + "/launch.log");
  const pid_t w1 = pid_of(run, "w1");
  ASSERT_GT(w1, 0) << read_file(run + "/cmd.txt");
  const std::vector<pid_t> pids = launched_pids(run);
  ASSERT_EQ(pids.size(), 4u);  // ps0, w0, w1, w2
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(w1, SIGKILL), 0);
  const ExitStatus status = wait_for(launcher, 30);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string out = read_file(dir_ + "/launch.log");
  EXPECT_FALSE(status.timed_out) << out;
  EXPECT_NE(status.code, 0) << out;
  EXPECT_LT(seconds, 30);
  EXPECT_NE(out.find("w1 (pid " + std::to_string(w1) + ") died: killed by signal 9"), std::string::npos) << out;
  for (pid_t pid : pids) EXPECT_FALSE(alive(pid)) << "pid " << pid << " survived the launcher";
}

// kill -9 of the PS: the job stops naming it, and the names in /dev/shm that the PS had made
// and not removed yet, which it removes itself only when a catchable signal ends it, go too.
// (The PS's own names live from its start until every worker has mapped them, a millisecond or
// so: the test makes one in its name, "pstrain-ps0-params-PID-...", for a window it can hit.)
TEST_F(LaunchTest, KilledServerStopsTheJobAndTheLauncherRemovesItsSharedMemoryName) {
  const std::string run = dir_ + "/kill-ps";
  const pid_t launcher =
      spawn(launch("kill-ps", {"--num-workers", "2"}, {"--epochs", "1000", "--batch-size", "4"}),
            dir_ + "/kill-ps.log");
  ASSERT_TRUE(wait_for_text(run + "/ps0.log", "values in shared memory (/pstrain-ps0-params-", 60))
      << read_file(dir_ + "/kill-ps.log");
  const pid_t ps0 = pid_of(run, "ps0");
  ASSERT_GT(ps0, 0) << read_file(run + "/cmd.txt");
  const std::string left = "/dev/shm/pstrain-ps0-params-" + std::to_string(ps0) + "-0123456789abcdef";
  std::ofstream(left) << "x";
  ASSERT_FALSE(shm_segments_of(ps0).empty());
  ASSERT_EQ(kill(ps0, SIGKILL), 0);
  const ExitStatus status = wait_for(launcher, 30);
  const std::string out = read_file(dir_ + "/kill-ps.log");
  EXPECT_EQ(status.code, 1) << out;
  EXPECT_NE(out.find("ps0 (pid " + std::to_string(ps0) + ") died: killed by signal 9"), std::string::npos)
      << out;
  EXPECT_NE(out.find("launch: removed /dev/shm/pstrain-ps0-params-" + std::to_string(ps0) + "-"),
            std::string::npos)
      << out;
  for (pid_t pid : launched_pids(run)) {
    EXPECT_FALSE(alive(pid)) << "pid " << pid << " survived the launcher";
    EXPECT_EQ(shm_segments_of(pid), std::vector<std::string>{}) << "pid " << pid;
  }
}

// The one-worker reference runs over TCP, the sharded run over the launcher's default ipc://.
TEST_F(LaunchTest, MirroredContractThroughTheLauncher) {
  const auto train = [&](const std::string& run, int ps, int workers, int batch, const std::string& transport) {
    const std::string params = dir_ + "/" + run + "-params";
    const pid_t launcher = spawn(launch(run, {"--num-ps", std::to_string(ps), "--num-workers", std::to_string(workers),
                                              "--transport", transport},
                                        {"--steps", "20", "--batch-size", std::to_string(batch), "--optimizer",
                                         "momentum", "--lr", "0.05", "--save-params", params}),
                                 dir_ + "/" + run + ".log");
    const ExitStatus status = wait_for(launcher, 120);
    EXPECT_TRUE(status.ok()) << read_file(dir_ + "/" + run + ".log");
    return params;
  };
  const std::string one = train("one", 1, 1, 24, "tcp");
  const std::string many = train("many", 2, 3, 8, "ipc");
  EXPECT_EQ(read_file(dir_ + "/one.log").find("at ipc://"), std::string::npos);
  EXPECT_NE(read_file(dir_ + "/many.log").find("w2: connecting to ps1 at ipc://@pstrain-"), std::string::npos)
      << read_file(dir_ + "/many.log");
  EXPECT_LE(relative_difference(load_saved_params(one), load_saved_params(many)), 1e-5);
}

// launch.sh --bind 0.0.0.0 on one host (issue 50: the PS shards, bound off loopback, turned CURVE
// on; the workers, reaching them over ipc:// or 127.0.0.1, did not; none registered and the job
// ended after --timeout): the launcher gives every process --curve, and the job trains the bits
// of the same job on loopback, over ipc and tcp; with --insecure, in the clear.
TEST_F(LaunchTest, BindToAllInterfacesRunsOnOneHostWithCurveOnEveryProcess) {
  const std::vector<std::string> job = {"--steps",     "10",       "--batch-size", "8",
                                        "--optimizer", "momentum", "--lr",         "0.05"};
  const auto train = [&](const std::string& name, std::vector<std::string> counts,
                         std::vector<std::string> flags = {}) {
    counts.insert(counts.begin(), {"--num-ps", "2", "--num-workers", "2"});
    flags.insert(flags.begin(), job.begin(), job.end());
    const ExitStatus status = run(name, counts, flags);
    EXPECT_TRUE(status.ok()) << read_file(log_of(name));
    return status.ok() ? load_saved_params(params_of(name)) : SavedParams{};
  };
  const SavedParams want = train("loopback", {});
  for (const std::string transport : {"ipc", "tcp"}) {
    const std::string name = "bind-all-" + transport;
    const SavedParams got = train(name, {"--bind", "0.0.0.0", "--transport", transport});
    EXPECT_TRUE(bit_identical(want, got)) << name << ": " << relative_difference(want, got);
    for (const char* process : {"ps0", "ps1", "w0", "w1"}) {
      const std::string log = read_file(dir_ + "/" + name + "/" + process + ".log");
      EXPECT_NE(log.find("security: CURVE (encrypted, peers authenticated by the job's key from "),
                std::string::npos)
          << name << " " << process << ": " << log;
    }
  }
  const SavedParams clear = train("bind-all-insecure", {"--bind", "0.0.0.0"}, {"--insecure"});
  EXPECT_TRUE(bit_identical(want, clear)) << relative_difference(want, clear);
  const std::string ps0 = read_file(dir_ + "/bind-all-insecure/ps0.log");
  EXPECT_EQ(ps0.find("security: CURVE"), std::string::npos) << ps0;
  EXPECT_NE(ps0.find("--insecure: traffic to and from non-loopback addresses"), std::string::npos) << ps0;
  EXPECT_EQ(read_file(dir_ + "/loopback/ps0.log").find("security: CURVE"), std::string::npos);
}

// Issue 16's mirrored cases end to end, with the launcher's default config (which sets a
// batch-size the flags override): per-worker batches 10,20,30 (the launcher's --worker-batch),
// three accumulated micro-batches of 20, and ssp with staleness 0 all equal one worker on 60.
TEST_F(LaunchTest, PerWorkerBatchesAccumulationAndSspEqualOneWorkerThroughTheLauncher) {
  const auto train = [&](const std::string& run, std::vector<std::string> counts, std::vector<std::string> flags) {
    const std::string params = dir_ + "/" + run + "-params";
    for (const char* f : {"--steps", "20", "--optimizer", "momentum", "--lr", "0.05", "--save-params"}) {
      flags.push_back(f);
    }
    flags.push_back(params);
    const pid_t launcher = spawn(launch(run, counts, flags), dir_ + "/" + run + ".log");
    const ExitStatus status = wait_for(launcher, 120);
    EXPECT_TRUE(status.ok()) << read_file(dir_ + "/" + run + ".log");
    return load_saved_params(params);
  };
  const SavedParams one = train("one60", {"--num-workers", "1"}, {"--batch-size", "60"});
  const SavedParams shares = train("shares", {"--num-workers", "3", "--worker-batch", "10,20,30"}, {});
  EXPECT_NE(read_file(dir_ + "/shares/w2.log").find("this worker's 30 from position 30"), std::string::npos)
      << read_file(dir_ + "/shares/w2.log");
  EXPECT_LE(relative_difference(one, shares), 1e-5) << "--worker-batch 10,20,30";
  const SavedParams accum = train("accum", {"--num-workers", "1"}, {"--batch-size", "20", "--accum-steps", "3"});
  EXPECT_LE(relative_difference(one, accum), 1e-5) << "--batch-size 20 --accum-steps 3";
  const SavedParams ssp =
      train("ssp", {"--num-workers", "3"}, {"--batch-size", "20", "--mode", "ssp", "--staleness", "0"});
  EXPECT_LE(relative_difference(one, ssp), 1e-5) << "--mode ssp --staleness 0";
}

// The mirrored contract for a convolutional model with dropout (issue 17), through the launcher:
// 1 worker on batches of 24 equals 3 workers on 8 each, with 1 or 2 PS shards. Dropout's masks
// follow the samples' records, not the workers, so they agree.
TEST_F(LaunchTest, ConvolutionalModelWithDropoutKeepsTheMirroredContract) {
  const std::string model =
      "conv 4 3 pad=1, relu, maxpool 2, conv 6 3, tanh, flatten, dense 16, relu, dropout 0.25, dense 10";
  const auto train = [&](const std::string& run, int ps, int workers, int batch) {
    const std::string params = dir_ + "/" + run + "-params";
    const pid_t launcher = spawn(launch(run, {"--num-ps", std::to_string(ps), "--num-workers", std::to_string(workers)},
                                        {"--model", model, "--steps", "20", "--batch-size", std::to_string(batch),
                                         "--optimizer", "momentum", "--lr", "0.05", "--save-params", params}),
                                 dir_ + "/" + run + ".log");
    const ExitStatus status = wait_for(launcher, 120);
    EXPECT_TRUE(status.ok()) << read_file(dir_ + "/" + run + ".log");
    return load_saved_params(params);
  };
  const SavedParams one = train("cnn-1x24", 1, 1, 24);
  EXPECT_NE(read_file(dir_ + "/cnn-1x24/w0.log").find("model: 1x8x8 -> conv 4 3 pad=1 -> 4x8x8 -> maxpool 2 -> 4x4x4 -> relu"),
            std::string::npos)
      << read_file(dir_ + "/cnn-1x24/w0.log");
  for (const auto& [ps, workers] : {std::pair{2, 1}, std::pair{1, 3}, std::pair{2, 3}}) {
    const std::string run = "cnn-s" + std::to_string(ps) + "-n" + std::to_string(workers);
    const SavedParams p = train(run, ps, workers, 24 / workers);
    const double rel = relative_difference(one, p);
    EXPECT_LE(rel, 1e-5) << run;
    std::printf("CNN with dropout, S=%d N=%d: max |difference| / max |parameter| = %.3g\n", ps, workers, rel);
  }
}

// Augmentation (--augment-flip, --augment-shift) draws each record's transform from (seed,
// epoch, record): 3 workers on batches of 8 equal 1 worker on 24, with 1 and 2 shards, for 130
// steps (past the first epoch's 125, where the draws change); and it does change the training.
TEST_F(LaunchTest, AugmentedTrainingKeepsTheMirroredContract) {
  const std::string model = "conv 4 3 pad=1, relu, maxpool 2, flatten, dense 10";
  const auto train = [&](const std::string& run, int ps, int workers, int batch, bool augment) {
    const std::string params = dir_ + "/" + run + "-params";
    std::vector<std::string> flags = {"--model", model, "--steps", "130", "--batch-size", std::to_string(batch),
                                      "--optimizer", "adam", "--lr", "0.01", "--save-params", params};
    if (augment) flags.insert(flags.end(), {"--augment-flip", "--augment-shift", "2"});
    const pid_t launcher = spawn(launch(run, {"--num-ps", std::to_string(ps), "--num-workers", std::to_string(workers)},
                                        flags),
                                 dir_ + "/" + run + ".log");
    const ExitStatus status = wait_for(launcher, 120);
    EXPECT_TRUE(status.ok()) << read_file(dir_ + "/" + run + ".log");
    return load_saved_params(params);
  };
  const SavedParams one = train("aug-1x24", 1, 1, 24, true);
  EXPECT_NE(read_file(dir_ + "/aug-1x24/w0.log").find("augmenting training images: flip shift 2"), std::string::npos)
      << read_file(dir_ + "/aug-1x24/w0.log");
  EXPECT_GT(relative_difference(one, train("plain-1x24", 1, 1, 24, false)), 1e-3) << "augmentation changed nothing";
  for (const auto& [ps, workers] : {std::pair{1, 3}, std::pair{2, 3}}) {
    const std::string run = "aug-s" + std::to_string(ps) + "-n" + std::to_string(workers);
    const double rel = relative_difference(one, train(run, ps, workers, 24 / workers, true));
    EXPECT_LE(rel, 1e-5) << run;
    std::printf("augmented CNN, S=%d N=%d: max |difference| / max |parameter| = %.3g\n", ps, workers, rel);
  }
}

// SIGTERM or SIGINT to the launcher while processes of its job are stopped (SIGSTOP): it exits
// 143 or 130 within seconds, and leaves no process and no /dev/shm name of the job behind. The
// stopped ones get SIGCONT with their SIGTERM; a checkpointing job gives up its final checkpoint
// when a process stays stopped for 2 s. One case stops ps1 before it answered any worker, so
// that the workers' segments for it are still named in /dev/shm.
TEST_F(LaunchTest, SignalledLauncherExitsPromptlyWhileProcessesAreStopped) {
  struct Case {
    std::string name;
    int signal;
    std::vector<std::string> stopped;
    bool checkpointing;
    bool before_workers_registered;
  };
  const std::vector<Case> cases = {{"ps0-term", SIGTERM, {"ps0"}, false, false},
                                   {"w1-int", SIGINT, {"w1"}, false, false},
                                   {"ps1-w2-ckpt-term", SIGTERM, {"ps1", "w2"}, true, false},
                                   {"ps0-ckpt-int", SIGINT, {"ps0"}, true, false},
                                   {"ps1-at-start-term", SIGTERM, {"ps1"}, false, true}};
  for (const Case& c : cases) {
    const std::string run_dir = dir_ + "/" + c.name;
    std::vector<std::string> flags = {"--steps", "100000", "--batch-size", "8", "--log-every", "1"};
    if (c.checkpointing) {
      flags.insert(flags.end(), {"--checkpoint-dir", checkpoint_dir(c.name), "--checkpoint-every", "50"});
    }
    const pid_t launcher =
        spawn(launch(c.name, {"--num-ps", "2", "--num-workers", "3"}, flags), run_dir + ".log");
    if (c.before_workers_registered) {
      // ps1 is bound; the launcher starts no worker before it has read this.
      wait_for_file(run_dir + "/ps1.addr", 60);
      ASSERT_TRUE(signal_launched(run_dir, "ps1", SIGSTOP)) << read_file(run_dir + "/cmd.txt");
    } else {
      ASSERT_TRUE(wait_for_step(launcher, run_dir, 20)) << read_file(run_dir + ".log");
      for (const std::string& name : c.stopped) ASSERT_TRUE(signal_launched(run_dir, name, SIGSTOP)) << name;
    }
    ASSERT_TRUE(wait_for_text(run_dir + "/cmd.txt", "\nw2\t", 60)) << read_file(run_dir + ".log");
    const std::vector<pid_t> pids = launched_pids(run_dir);
    size_t segments = 0;
    if (c.before_workers_registered) {
      for (int w = 0; w < 3; ++w) {  // each worker waits for ps1's answer with its segment for ps1 named
        const pid_t worker = pid_of(run_dir, "w" + std::to_string(w));
        ASSERT_TRUE(wait_for_text(run_dir + "/w" + std::to_string(w) + ".log", "connecting to ps1", 60));
        wait_until([&] { return !shm_segments_of(worker).empty(); }, 60);
        segments += shm_segments_of(worker).size();
      }
      EXPECT_GT(segments, 0u) << "no worker's segment was named before the signal";
    }
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(kill(launcher, c.signal), 0);
    const ExitStatus status = wait_for(launcher, 30);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string log = read_file(run_dir + ".log");
    EXPECT_EQ(status.code, 128 + c.signal) << c.name << "\n" << log;
    EXPECT_LT(seconds, 10) << c.name << "\n" << log;
    EXPECT_NE(log.find(std::string("received ") + (c.signal == SIGTERM ? "SIGTERM" : "SIGINT")),
              std::string::npos)
        << log;
    if (c.checkpointing) {
      EXPECT_NE(log.find("stopped (SIGSTOP or a debugger) for 2s: no final checkpoint; stopping all"),
                std::string::npos)
          << log;
    }
    EXPECT_EQ(log.find("sending SIGKILL"), std::string::npos)
        << "the stopped processes did not act on SIGTERM\n"
        << log;
    for (pid_t pid : pids) {
      EXPECT_FALSE(alive(pid)) << c.name << ": pid " << pid << " survived the launcher";
      EXPECT_EQ(shm_segments_of(pid), std::vector<std::string>{}) << c.name << ": pid " << pid;
      if (alive(pid)) kill(pid, SIGKILL);
    }
    std::printf("%s: %s to the launcher with %zu process(es) stopped%s: exit %d after %.2f s\n",
                c.name.c_str(), c.signal == SIGTERM ? "SIGTERM" : "SIGINT", c.stopped.size(),
                c.before_workers_registered ? " before the workers registered" : "", status.code, seconds);
  }
}

// Issue 29's recovery acceptance, one TEST_F per kind of interruption (ctest -j runs them side by
// side): a job of 2 PS shards and 3 workers with Adam is interrupted once at a seeded random step,
// for each of five seeds, and every run ends with the parameters of one uninterrupted run of the
// kind, bit for bit (the PS sums in worker order: docs/operations.md, "Determinism"). Steps are
// cheap here (a 16-8 MLP on 8x8 images); a run costs mostly its start. The random step is at
// most 40% into the job, so the job is still running when the test acts on what it printed.
constexpr unsigned kRecoverySeeds[] = {1, 2, 3, 4, 5};
const std::vector<std::string> kTwoShardsThreeWorkers = {"--num-ps", "2", "--num-workers", "3"};

// kill -9 of a random worker at a random step with --max-restarts 1: the launcher restarts it
// with the same index, the replacement redoes the step its predecessor left.
TEST_F(LaunchTest, KilledWorkerIsReplacedAndNothingIsLost) {
  const std::vector<std::string> job = {"--steps", "1000", "--batch-size", "8", "--optimizer", "adam",
                                        "--lr", "0.01", "--log-every", "1"};
  ASSERT_TRUE(run("uninterrupted", kTwoShardsThreeWorkers, job).ok()) << read_file(log_of("uninterrupted"));
  const SavedParams want = load_saved_params(params_of("uninterrupted"));
  std::vector<std::string> counts = kTwoShardsThreeWorkers;
  counts.insert(counts.end(), {"--max-restarts", "1"});
  for (unsigned seed : kRecoverySeeds) {
    std::mt19937 rng(seed);
    const int victim = static_cast<int>(rng() % 3);
    const int at = 20 + static_cast<int>(rng() % 380);
    const std::string name = "replaced-" + std::to_string(seed);
    pid_t killed = -1;
    const ExitStatus status = run(name, counts, job, [&](pid_t launcher, const std::string& run_dir) {
      ASSERT_TRUE(wait_for_step(launcher, run_dir, at)) << read_file(log_of(name));
      killed = pid_of(run_dir, "w" + std::to_string(victim));
      ASSERT_GT(killed, 0);
      ASSERT_EQ(kill(killed, SIGKILL), 0);
    });
    const std::string log = read_file(log_of(name));
    ASSERT_TRUE(status.ok()) << "seed " << seed << "\n" << log;
    EXPECT_NE(
        log.find("w" + std::to_string(victim) + " (pid " + std::to_string(killed) +
                 ") died: killed by signal 9 (SIGKILL); restarting it with the same index (restart 1 of 1)"),
        std::string::npos)
        << log;
    EXPECT_NE(log.find("registered again from a new peer: a replacement; it redoes step"), std::string::npos)
        << log;
    const SavedParams got = load_saved_params(params_of(name));
    const double rel = relative_difference(want, got);
    const bool same = bit_identical(want, got);
    EXPECT_TRUE(same) << "seed " << seed << ": w" << victim << " killed at step ~" << at << ": " << rel;
    std::printf("seed %u: w%d killed after step %d, replaced; max |difference| / max |parameter| = %.3g%s\n",
                seed, victim, at, rel, same ? " (bit-identical)" : "");
  }
}

// kill -9 of a random PS shard at a random step, checkpoints every 40 steps, --max-restarts 1:
// the launcher restarts the whole job from the last complete checkpoint (each costs about 20 ms
// here: more frequent ones would make the checkpoints most of the test's time).
TEST_F(LaunchTest, KilledServerRestartsTheJobFromItsCheckpointAndNothingIsLost) {
  const auto job = [&](const std::string& ckpt) {
    return std::vector<std::string>{"--steps", "1000", "--batch-size", "8", "--optimizer", "adam",
                                    "--lr", "0.01", "--log-every", "1", "--checkpoint-dir", ckpt,
                                    "--checkpoint-every", "40"};
  };
  ASSERT_TRUE(run("ps-uninterrupted", kTwoShardsThreeWorkers, job(checkpoint_dir("ps-uninterrupted"))).ok())
      << read_file(log_of("ps-uninterrupted"));
  const SavedParams want = load_saved_params(params_of("ps-uninterrupted"));
  std::vector<std::string> counts = kTwoShardsThreeWorkers;
  counts.insert(counts.end(), {"--max-restarts", "1"});
  for (unsigned seed : kRecoverySeeds) {
    std::mt19937 rng(seed);
    const int victim = static_cast<int>(rng() % 2);
    const int at = 60 + static_cast<int>(rng() % 340);
    const std::string name = "ps-killed-" + std::to_string(seed);
    const std::string ckpt = checkpoint_dir(name);
    pid_t killed = -1;
    const ExitStatus status = run(name, counts, job(ckpt), [&](pid_t launcher, const std::string& run_dir) {
      ASSERT_TRUE(wait_for_step(launcher, run_dir, at)) << read_file(log_of(name));
      killed = pid_of(run_dir, "ps" + std::to_string(victim));
      ASSERT_GT(killed, 0);
      ASSERT_EQ(kill(killed, SIGKILL), 0);
    });
    const std::string log = read_file(log_of(name));
    ASSERT_TRUE(status.ok()) << "seed " << seed << "\n" << log;
    EXPECT_NE(log.find("ps" + std::to_string(victim) + " (pid " + std::to_string(killed) +
                       ") died: killed by signal 9 (SIGKILL); restarting the whole job from its last "
                       "complete checkpoint " + ckpt + "/v"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("--resume: from checkpoint"), std::string::npos) << log;
    // The chief, blocked on the dead shard, takes the launcher's second SIGTERM as "stop now": no
    // process waits out the grace period to be SIGKILLed.
    EXPECT_EQ(log.find("sending SIGKILL"), std::string::npos) << log;
    const SavedParams got = load_saved_params(params_of(name));
    const double rel = relative_difference(want, got);
    const bool same = bit_identical(want, got);
    EXPECT_TRUE(same) << "seed " << seed << ": ps" << victim << " killed at step ~" << at << ": " << rel;
    std::printf(
        "seed %u: ps%d killed after step %d, the job restarted from its checkpoint; max |difference| / "
        "max |parameter| = %.3g%s\n",
        seed, victim, at, rel, same ? " (bit-identical)" : "");
  }
}

std::vector<std::string> LaunchTest::sigterm_job(const std::string& optimizer, const std::string& ckpt) {
  return {"--steps", "1000", "--batch-size", "8", "--optimizer", optimizer,
          "--lr", optimizer == "adam" ? "0.01" : "0.05", "--lr-schedule", "cosine", "--log-every", "1",
          "--checkpoint-dir", ckpt, "--checkpoint-every", "97", "--keep-checkpoints", "100"};
}

void LaunchTest::stop_and_resume(const std::string& optimizer, unsigned seed,
                                 const std::vector<std::string>& resume_on, const SavedParams& want) {
  std::mt19937 rng(seed);
  const int at = 50 + static_cast<int>(rng() % 350);
  const std::string tag = optimizer + "-" + std::to_string(seed);
  const std::string ckpt = checkpoint_dir(tag);
  const auto stop = [&](pid_t launcher, const std::string& run_dir) {
    ASSERT_TRUE(wait_for_step(launcher, run_dir, at)) << read_file(log_of("stopped-" + tag));
    stop_with_sigterm(launcher, run_dir);
  };
  const ExitStatus stopped =
      run("stopped-" + tag, kTwoShardsThreeWorkers, sigterm_job(optimizer, ckpt), stop);
  const std::string stop_log = read_file(log_of("stopped-" + tag));
  EXPECT_EQ(stopped.code, 143) << stop_log;
  EXPECT_NE(stop_log.find("launch: stopped after the final checkpoint (SIGTERM)"), std::string::npos)
      << stop_log;
  EXPECT_FALSE(std::filesystem::exists(params_of("stopped-" + tag))) << "a stopped job saved params";
  const std::string marker = "w0: stopping after step ";
  const size_t found = stop_log.find(marker);
  ASSERT_NE(found, std::string::npos) << stop_log;
  const unsigned long long final_step = std::stoull(stop_log.substr(found + marker.size()));
  EXPECT_GE(final_step, static_cast<unsigned long long>(at));
  const std::string final_version = std::to_string(final_step);
  for (const std::string& num_ps : resume_on) {
    const std::string name = "resumed-" + tag + "-S" + num_ps;
    // Each resume starts from the final checkpoint: an earlier resume's own checkpoints go.
    for (const auto& entry : std::filesystem::directory_iterator(ckpt)) {
      const std::string v = entry.path().filename().string();
      if (v[0] == 'v' && std::stoull(v.substr(1)) > final_step) std::filesystem::remove_all(entry.path());
    }
    const ExitStatus resumed =
        run(name, {"--num-ps", num_ps, "--num-workers", "3", "--resume"}, sigterm_job(optimizer, ckpt));
    const std::string log = read_file(log_of(name));
    ASSERT_TRUE(resumed.ok()) << log;
    EXPECT_NE(log.find("--resume: from checkpoint " + ckpt + "/v" +
                       std::string(10 - final_version.size(), '0') + final_version),
              std::string::npos)
        << log;
    const SavedParams got = load_saved_params(params_of(name));
    const double rel = relative_difference(want, got);
    const bool same = bit_identical(want, got);
    EXPECT_TRUE(same) << optimizer << ", seed " << seed << ", stopped near step " << at << ", resumed on "
                      << num_ps << " shards: " << rel;
    std::printf(
        "%s, seed %u: SIGTERM near step %d (final checkpoint at %s), resumed on %s shard(s): "
        "max |difference| / max |parameter| = %.3g%s\n",
        optimizer.c_str(), seed, at, final_version.c_str(), num_ps.c_str(), rel,
        same ? " (bit-identical)" : "");
  }
}

// SIGTERM to the launcher of a checkpointing job at a random step: a final checkpoint, every
// process exits (143), and the job resumed with --resume ends with the uninterrupted run's bits.
TEST_F(LaunchTest, StoppedBySigtermAndResumedEqualsAnUninterruptedRun) {
  ASSERT_TRUE(run("full-adam", kTwoShardsThreeWorkers, sigterm_job("adam", checkpoint_dir("full-adam"))).ok())
      << read_file(log_of("full-adam"));
  EXPECT_NE(read_file(log_of("full-adam")).find(" + ckpt "), std::string::npos)
      << "checkpoint time is not in the step breakdown";
  const SavedParams want = load_saved_params(params_of("full-adam"));
  for (unsigned seed : kRecoverySeeds) stop_and_resume("adam", seed, {"2"}, want);
}

// The same for each optimizer's state, resumed on the 2 shards that saved the checkpoint and on 3
// (Adam on 2: the test above).
TEST_F(LaunchTest, StoppedBySigtermAndResumedOnAnyShardCountWithEachOptimizer) {
  const std::vector<std::tuple<std::string, unsigned, std::vector<std::string>>> cases = {
      {"sgd", 6, {"2", "3"}}, {"momentum", 7, {"2", "3"}}, {"adam", 8, {"3"}}};
  for (const auto& [optimizer, seed, resume_on] : cases) {
    const std::string full = "full-" + optimizer;
    ASSERT_TRUE(run(full, kTwoShardsThreeWorkers, sigterm_job(optimizer, checkpoint_dir(full))).ok())
        << read_file(log_of(full));
    stop_and_resume(optimizer, seed, resume_on, load_saved_params(params_of(full)));
  }
}

// --resume auto (Slurm --requeue, Kubernetes restarts): the first start finds no checkpoint and
// starts fresh; the next resumes, here with more steps than the job that saved (the schedule is
// recomputed: constant here), and ends with the parameters of one uninterrupted run that long.
TEST_F(LaunchTest, ResumeAutoStartsFreshThenResumesALongerJob) {
  const std::string ckpt = dir_ + "/ckpt-auto";
  const auto run = [&](const std::string& name, const std::string& steps, bool checkpointing) {
    std::vector<std::string> flags = {"--steps", steps, "--batch-size", "8", "--optimizer", "adam", "--lr", "0.01",
                                      "--lr-schedule", "constant", "--log-every", "50",
                                      "--save-params", dir_ + "/" + name + "-params"};
    std::vector<std::string> counts = {"--num-ps", "2", "--num-workers", "2"};
    if (checkpointing) {
      flags.insert(flags.end(), {"--checkpoint-dir", ckpt, "--checkpoint-every", "100"});
      counts.insert(counts.end(), {"--resume", "auto"});
    }
    const ExitStatus status = wait_for(spawn(launch(name, counts, flags), dir_ + "/" + name + ".log"), 180);
    EXPECT_TRUE(status.ok()) << read_file(dir_ + "/" + name + ".log");
    return read_file(dir_ + "/" + name + ".log");
  };
  const std::string first = run("auto-first", "300", true);
  EXPECT_NE(first.find("--resume=auto: no complete checkpoint in '" + ckpt + "': starting fresh"), std::string::npos)
      << first;
  const std::string longer = run("auto-longer", "600", true);
  EXPECT_NE(longer.find("--resume: from checkpoint " + ckpt + "/v0000000300"), std::string::npos) << longer;
  EXPECT_NE(longer.find("the job's length changes from 300 to 600 steps"), std::string::npos) << longer;
  run("one-600", "600", false);
  const SavedParams want = load_saved_params(dir_ + "/one-600-params");
  const SavedParams got = load_saved_params(dir_ + "/auto-longer-params");
  EXPECT_TRUE(bit_identical(want, got)) << relative_difference(want, got);
}

// allreduce mode: the chief checkpoints the whole vector and its optimizer state; stopped by
// SIGTERM and resumed, every worker loads it and the job ends where an uninterrupted one does.
TEST_F(LaunchTest, AllreduceStoppedAndResumedEqualsAnUninterruptedRun) {
  const std::string ckpt = dir_ + "/ckpt-ring";
  const std::vector<std::string> job = {"--mode", "allreduce", "--steps", "900", "--batch-size", "8", "--optimizer",
                                        "adam", "--lr", "0.01", "--log-every", "1", "--checkpoint-dir", ckpt,
                                        "--checkpoint-every", "100"};
  const auto run = [&](const std::string& name, std::vector<std::string> extra, const std::function<void(pid_t)>& during) {
    std::vector<std::string> flags = job;
    flags.insert(flags.end(), {"--save-params", dir_ + "/" + name + "-params"});
    std::vector<std::string> counts = {"--num-workers", "3"};
    counts.insert(counts.end(), extra.begin(), extra.end());
    const pid_t launcher = spawn(launch(name, counts, flags), dir_ + "/" + name + ".log");
    if (during) during(launcher);
    return wait_for(launcher, 180);
  };
  ASSERT_TRUE(run("ring-full", {}, nullptr).ok()) << read_file(dir_ + "/ring-full.log");
  std::filesystem::remove_all(ckpt);
  const int at = 150 + static_cast<int>(std::mt19937(5)() % 600);
  const ExitStatus stopped = run("ring-stopped", {}, [&](pid_t launcher) {
    ASSERT_TRUE(wait_for_text(dir_ + "/ring-stopped/w0.log", "(global " + std::to_string(at) + ")", 60));
    stop_with_sigterm(launcher, dir_ + "/ring-stopped");
  });
  EXPECT_EQ(stopped.code, 143) << read_file(dir_ + "/ring-stopped.log");
  ASSERT_TRUE(run("ring-resumed", {"--resume"}, nullptr).ok()) << read_file(dir_ + "/ring-resumed.log");
  const std::string log = read_file(dir_ + "/ring-resumed.log");
  EXPECT_NE(log.find("w2: --resume: from checkpoint " + ckpt + "/v"), std::string::npos) << log;
  const SavedParams want = load_saved_params(dir_ + "/ring-full-params");
  const SavedParams got = load_saved_params(dir_ + "/ring-resumed-params");
  const double rel = relative_difference(want, got);
  EXPECT_TRUE(bit_identical(want, got)) << rel;
  std::printf("allreduce: SIGTERM near step %d, resumed: max |difference| / max |parameter| = %.3g\n", at, rel);
}

// allreduce mode through the launcher: no PS is started, and the result is sync mode's.
TEST_F(LaunchTest, AllreduceModeStartsNoServerAndMatchesSync) {
  const auto train = [&](const std::string& run, std::vector<std::string> mode) {
    const std::string params = dir_ + "/" + run + "-params";
    std::vector<std::string> flags = {"--steps", "20", "--batch-size", "8", "--save-params", params};
    flags.insert(flags.end(), mode.begin(), mode.end());
    const pid_t launcher = spawn(launch(run, {"--num-workers", "3"}, flags), dir_ + "/" + run + ".log");
    const ExitStatus status = wait_for(launcher, 120);
    EXPECT_TRUE(status.ok()) << read_file(dir_ + "/" + run + ".log");
    return params;
  };
  const std::string ring = train("ring", {"--mode", "allreduce", "--collective", "ring"});
  const std::string sync = train("sync", {});
  EXPECT_EQ(pid_of(dir_ + "/ring", "ps0"), -1) << read_file(dir_ + "/ring/cmd.txt");
  EXPECT_EQ(launched_pids(dir_ + "/ring").size(), 3u);
  EXPECT_LE(relative_difference(load_saved_params(sync), load_saved_params(ring)), 1e-5);
}

// --check-config: each binary parses and checks its flags and config file as a start would, says
// so and exits, without binding, writing or reading data (the port file stays unwritten).
TEST_F(LaunchTest, CheckConfigParsesEverythingAndStartsNothing) {
  std::ofstream(dir_ + "/bad.cfg") << "lr = 0.1\nfrobnicate = 3\n";
  const std::string port_file = dir_ + "/ps0.addr";
  const auto check = [&](const std::string& binary, std::vector<std::string> flags, const std::string& name) {
    flags.insert(flags.begin(), binary);
    flags.push_back("--check-config");
    const ExitStatus status = wait_for(spawn(flags, dir_ + "/" + name + ".log"), 30);
    return std::pair{status, read_file(dir_ + "/" + name + ".log")};
  };
  auto [ps, ps_out] = check(PSTRAIN_PS_BIN, {"--port-file", port_file, "--data-dir", dir_ + "/none"}, "ps");
  EXPECT_TRUE(ps.ok()) << ps_out;
  EXPECT_EQ(ps_out, "pstrain-ps: configuration OK\n");
  EXPECT_FALSE(std::filesystem::exists(port_file));
  auto [w, w_out] = check(PSTRAIN_WORKER_BIN, {"--ps-hosts", "127.0.0.1:1", "--device", "cuda:7"}, "w");
  EXPECT_TRUE(w.ok()) << w_out;
  EXPECT_EQ(w_out, "pstrain-worker: configuration OK\n");
  for (const auto& [flags, wanted] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--ps-hosts", "127.0.0.1:1", "--lr", "abc"}, "for option '--lr' is invalid"},
           {{"--ps-hosts", "127.0.0.1:1", "--config", dir_ + "/bad.cfg"}, "unrecognised option 'frobnicate'"},
           {{"--ps-hosts", "127.0.0.1:1", "--model", "dense x"}, "--model: 'x' is not the number of outputs"},
           {{"--num-ps", "2", "--ps-hosts", "127.0.0.1:1"}, "--ps-hosts names 1 servers but --num-ps is 2"}}) {
    auto [bad, out] = check(PSTRAIN_WORKER_BIN, flags, "bad");
    EXPECT_EQ(bad.code, 2) << out;
    EXPECT_NE(out.find(wanted), std::string::npos) << out;
  }
}

// launch.sh --dry-run has the binaries check every kind of process's command (--check-config):
// a job flag or config key they refuse fails the dry run (exit 2), naming the processes and the
// binary's message; a good job prints its plan and the binaries' answer. Nothing starts.
TEST_F(LaunchTest, DryRunRefusesWhatTheBinariesRefuse) {
  std::ofstream(dir_ + "/bad.cfg") << "# a key no binary knows\nlr = 0.1\nfrobnicate = 3\n";
  const auto dry_run = [&](const std::string& run, std::vector<std::string> counts, std::vector<std::string> flags) {
    counts.insert(counts.begin(), "--dry-run");
    const ExitStatus status = wait_for(spawn(launch(run, counts, flags), dir_ + "/" + run + ".out"), 60);
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/" + run)) << "a dry run made its run directory";
    return std::pair{status, read_file(dir_ + "/" + run + ".out")};
  };
  auto [good, good_out] = dry_run("good", {"--num-workers", "2", "--transport", "tcp"}, {"--lr", "0.1"});
  EXPECT_TRUE(good.ok()) << good_out;
  EXPECT_NE(good_out.find("launch:   w1   on localhost"), std::string::npos) << good_out;
  EXPECT_NE(good_out.find("\nw1: " + PSTRAIN_WORKER_BIN + " --config "), std::string::npos) << good_out;
  EXPECT_NE(good_out.find("launch: checked ps0, w0, w1 with --check-config: pstrain-ps: configuration OK; "
                          "pstrain-worker: configuration OK"),
            std::string::npos)
      << good_out;
  auto [lr, lr_out] = dry_run("lr", {"--num-workers", "2"}, {"--lr", "abc"});
  EXPECT_EQ(lr.code, 2) << lr_out;
  EXPECT_NE(lr_out.find("refuses the command of w0, w1 (config "), std::string::npos) << lr_out;
  EXPECT_NE(lr_out.find("pstrain-worker: the argument ('abc') for option '--lr' is invalid"), std::string::npos)
      << lr_out;
  EXPECT_NE(lr_out.find("\nw1: "), std::string::npos) << "the plan is printed too:\n" << lr_out;
  auto [unknown, unknown_out] = dry_run("unknown", {"--num-workers", "1"}, {"--frobnicate"});
  EXPECT_EQ(unknown.code, 2) << unknown_out;
  EXPECT_NE(unknown_out.find(PSTRAIN_PS_BIN + " refuses the command of ps0"), std::string::npos) << unknown_out;
  EXPECT_NE(unknown_out.find("unrecognised option '--frobnicate'"), std::string::npos) << unknown_out;
  auto [config, config_out] = dry_run("config", {"--config", dir_ + "/bad.cfg", "--num-workers", "1"}, {});
  EXPECT_EQ(config.code, 2) << config_out;
  EXPECT_NE(config_out.find("(config " + dir_ + "/bad.cfg): pstrain-worker: unrecognised option 'frobnicate'"),
            std::string::npos)
      << config_out;
  auto [ring, ring_out] = dry_run("ring", {"--num-workers", "3"}, {"--mode", "allreduce", "--backup-workers", "1"});
  EXPECT_EQ(ring.code, 2) << ring_out;
  EXPECT_NE(ring_out.find("--backup-workers applies to --mode sync only"), std::string::npos) << ring_out;
}

// Every config in configs/ passes launch.sh --dry-run as its header says to start it (the
// binaries check all of its keys, the model's spec included, for each kind of process): a key
// renamed or a value a binary no longer takes fails here, not at a user's first run. The CTR
// configs take their data on the command line (the dry run reads none).
TEST_F(LaunchTest, EveryShippedConfigPassesADryRun) {
  const std::vector<std::string> ctr_data = {"--train-data", dir_ + "/train.tsv", "--test-data", dir_ + "/test.tsv"};
  const std::map<std::string, std::vector<std::string>> job_flags = {
      {"ctr.cfg", ctr_data},         {"ctr_dlrm.cfg", ctr_data},      {"ctr_dcn.cfg", ctr_data},
      {"ctr_deepfm.cfg", ctr_data},  {"ctr_wide_deep.cfg", ctr_data}};
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(PSTRAIN_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".cfg") continue;
    const std::string name = entry.path().filename().string();
    std::vector<std::string> argv = {"/bin/bash", PSTRAIN_LAUNCH_SH, "--no-setup", "--dry-run", "--config",
                                     entry.path().string(), "--run-dir", dir_ + "/dry-" + name, "--"};
    const auto flags = job_flags.find(name);
    if (flags != job_flags.end()) argv.insert(argv.end(), flags->second.begin(), flags->second.end());
    const ExitStatus status = wait_for(spawn(argv, dir_ + "/" + name + ".out"), 60);
    const std::string out = read_file(dir_ + "/" + name + ".out");
    EXPECT_TRUE(status.ok()) << name << ":\n" << out;
    EXPECT_NE(out.find("pstrain-ps: configuration OK; pstrain-worker: configuration OK"), std::string::npos)
        << name << ":\n" << out;
    ++checked;
  }
  EXPECT_GE(checked, 8) << "configs/ lost its configs";
}

// launch.sh status and stop, from another terminal, on a running checkpointing job: status names
// every process alive, the step out of the total with an ETA and the last checkpoint; stop ends
// the job as SIGTERM to its launcher does (a final checkpoint, exit 143) and waits for it; then
// status says the job has ended. A directory without a job is said to hold none.
TEST_F(LaunchTest, StatusAndStopARunningJob) {
  const std::string ckpt = checkpoint_dir("status");
  const std::string run_dir = dir_ + "/status";
  const pid_t launcher = spawn(launch("status", {"--num-ps", "1", "--num-workers", "2"},
                                      {"--steps", "100000", "--epochs", "100000", "--batch-size", "8", "--log-every", "20",
                                       "--checkpoint-dir", ckpt, "--checkpoint-every", "100"}),
                               log_of("status"));
  ASSERT_TRUE(wait_for_step(launcher, run_dir, 200)) << read_file(log_of("status"));
  ASSERT_TRUE(wait_until([&] { return read_file(run_dir + "/metrics.jsonl").find("\"kind\":\"progress\"") !=
                                      std::string::npos; }, 30));
  const auto command = [&](const std::string& name, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/bin/bash", PSTRAIN_LAUNCH_SH};
    argv.insert(argv.end(), args.begin(), args.end());
    const ExitStatus status = wait_for(spawn(argv, log_of(name)), 150);
    return std::pair{status, read_file(log_of(name))};
  };
  const auto [running, shown] = command("status-running", {"status", run_dir});
  EXPECT_EQ(running.code, 0) << shown;
  for (const std::string& want : std::vector<std::string>{"state: running for ", "progress: step ", "/100000 (", ", ETA ",
                                 "last checkpoint: " + ckpt + "/v", "ps0  on localhost  pid ", "alive"}) {
    EXPECT_NE(shown.find(want), std::string::npos) << "no '" << want << "' in:\n" << shown;
  }
  const auto [stopped, stop_out] = command("stop", {"stop", run_dir});
  EXPECT_EQ(stopped.code, 0) << stop_out;
  EXPECT_NE(stop_out.find("exit status 143 (stopped by SIGTERM after the final checkpoint)"), std::string::npos)
      << stop_out;
  EXPECT_EQ(wait_for(launcher, 10).code, 143) << read_file(log_of("status"));
  EXPECT_NE(read_file(log_of("status")).find("launch: stopped after the final checkpoint (SIGTERM)"),
            std::string::npos);
  const auto [ended, ended_out] = command("status-ended", {"status", run_dir});
  EXPECT_EQ(ended.code, 1) << ended_out;
  EXPECT_NE(ended_out.find("state: not running: ended "), std::string::npos) << ended_out;
  const auto [again, again_out] = command("stop-again", {"stop", run_dir});
  EXPECT_EQ(again.code, 1) << again_out;
  EXPECT_NE(again_out.find("holds no running job"), std::string::npos) << again_out;
  const auto [none, none_out] = command("status-none", {"status", ckpt});
  EXPECT_EQ(none.code, 1) << none_out;
  EXPECT_NE(none_out.find("no job started by launch.sh here"), std::string::npos) << none_out;
}

}  // namespace
}  // namespace pstrain::test
