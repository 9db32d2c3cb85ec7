// Faults injected on the wire (shared/net/fault_endpoint.h, the testing flag --inject-faults):
// between workers and a PS, each fault on PUSH, PULL and PARAMS is either survived with the
// parameters of a clean run, bit for bit, or ends the job within its deadline with a line naming
// the PS and what went wrong; no push is ever applied twice, and nothing hangs. The same for the
// ring all-reduce's messages (REDUCE, GATHER, BROADCAST), naming the neighbour
// (docs/operations.md, "Faults").
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

// The workers' --timeout. A worker whose PS says it waits for another worker gives up after 4 x
// --timeout (worker/ps_link/dense_client.h), which the PARAMS faults below wait out.
constexpr double kTimeoutS = 2;

class FaultTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir("faults-data");
    write_synthetic_mnist(data_->path, "train", 240, 8, 8, 51, false);
    write_synthetic_mnist(data_->path, "t10k", 40, 8, 8, 52, false);
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }

  struct Run {
    bool ok = false;
    double seconds = 0;  // until the job's processes had exited
    std::string logs;
    SavedParams params;
  };

  // 2 workers, 1 PS, 30 steps of Adam; every process gets `faults` (a worker sends PUSH and PULL,
  // the PS PARAMS). A failed job's PS is stopped once its workers have ended.
  static Run train(const std::string& faults, const std::string& shared_memory = "off") {
    return run_with(shared_memory, [&](Job* job) {
      if (!faults.empty()) job->args.insert(job->args.end(), {"--inject-faults", faults});
      return run_job_stopping_servers(*job);
    });
  }

  // The same job in --mode allreduce over the ring (--shared-memory off: the ring, not the
  // same-host segment), with `faults` on worker 0's link to worker 1 (one faulty link).
  static Run train_ring(const std::string& faults) {
    return run_with("off", [&](Job* job) {
      if (!faults.empty()) job->worker_args[0] = {"--inject-faults", faults};
      return run_allreduce_job(*job);
    });
  }

  // The job both run, given its faults and started by `start`; its time, logs and parameters.
  static Run run_with(const std::string& shared_memory, const std::function<JobResult(Job*)>& start) {
    TempDir dir("faults");
    // The faults are the wire's: workers on the CPU everywhere, so the deadline bounds below do
    // not also count a GPU's start-up under a parallel ctest (13.5-15 s against 13 on an H200).
    Job job;
    job.num_workers = 2;
    job.dir = dir.path;
    job.args = {"--data-dir", data_->path, "--cache-dir", dir.path, "--hidden", "16", "--steps", "30",
                "--batch-size", "8", "--optimizer", "adam", "--lr", "0.01", "--timeout",
                std::to_string(kTimeoutS), "--device", "cpu", "--shared-memory", shared_memory, "--save-params", dir.path + "/params"};
    const auto t0 = std::chrono::steady_clock::now();
    const JobResult result = start(&job);
    Run run;
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    run.ok = result.ok();
    run.logs = result.logs;
    if (run.ok && std::filesystem::exists(dir.path + "/params")) run.params = load_saved_params(dir.path + "/params");
    return run;
  }

  static const SavedParams& clean() {
    static const SavedParams params = [] {
      const Run run = train("");
      EXPECT_TRUE(run.ok) << run.logs;
      return run.params;
    }();
    return params;
  }

  static TempDir* data_;
};
TempDir* FaultTest::data_ = nullptr;

TEST_F(FaultTest, DelaysReordersAndRepeatedRepliesAreSurvivedBitForBit) {
  for (const char* fault : {"delay:PUSH:5:0.3", "reorder:PUSH:5", "reorder:PULL:5", "duplicate:PULL:5",
                            "delay:PARAMS:9:0.3", "reorder:PARAMS:9", "duplicate:PARAMS:9"}) {
    const Run run = train(fault);
    ASSERT_TRUE(run.ok) << fault << "\n" << run.logs;
    EXPECT_NE(run.logs.find("fault injected: "), std::string::npos) << fault << ": no fault was injected";
    EXPECT_TRUE(bit_identical(clean(), run.params)) << fault << ": " << relative_difference(clean(), run.params);
  }
}

// What ends the job, and the line that says why: within the deadline, naming the PS.
TEST_F(FaultTest, LostTruncatedCorruptedAndRepeatedPushesEndTheJobNamingWhy) {
  const std::string timed_out = "timed out after 2 s waiting for parameters from ps0";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"drop:PUSH:5", timed_out},
      {"drop:PULL:5", timed_out},
      {"drop:PARAMS:9", timed_out},
      {"delay:PARAMS:9:8", timed_out},  // past the deadline
      {"duplicate:PUSH:5", "ps0 rejected parameters: "},  // "worker 0 already pushed step 4", or the step was applied
      {"truncate:PUSH:5", "ps0 rejected parameters: PUSH payload is 2420 bytes, header says 1210 float32"},
      {"truncate:PULL:5", "ps0 rejected parameters: header is not valid MessagePack"},
      {"truncate:PARAMS:9", "malformed reply from ps0: PARAMS payload is 2420 bytes, header says 1210 float32"},
      {"corrupt:PUSH:5", "ps0 rejected parameters: unknown header field 'mqgic'"},
      {"corrupt:PULL:5", "ps0 rejected parameters: unknown header field 'mqgic'"},
      {"corrupt:PARAMS:9", "malformed reply from ps0: unknown header field 'mqgic'"},
  };
  // Each case is a job of its own (its own directory and ports, timed on its own) that mostly
  // waits out a deadline: two run at a time. More would crowd a sanitizer build's start-up
  // (11 at once under TSan: a worker's HELLO took 2 s, past --timeout).
  std::vector<Run> runs(cases.size());
  std::atomic<size_t> next{0};
  const auto run_cases = [&] {
    for (size_t i; (i = next++) < cases.size();) runs[i] = train(cases[i].first);
  };
  auto other = std::async(std::launch::async, run_cases);
  run_cases();
  other.get();
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [fault, why] = cases[i];
    const Run& run = runs[i];
    EXPECT_FALSE(run.ok) << fault << "\n" << run.logs;
    EXPECT_NE(run.logs.find("E pstrain-worker: " + why), std::string::npos) << fault << "\n" << run.logs;
    EXPECT_LT(run.seconds, kTimeoutS + 10) << fault;
  }
}

// A repeated push is refused, never applied twice: the PS names the worker and the step.
TEST_F(FaultTest, ARepeatedPushIsNeverAppliedTwice) {
  for (const char* shared_memory : {"off", "auto"}) {
    const Run run = train("duplicate:PUSH:5", shared_memory);
    EXPECT_FALSE(run.ok) << run.logs;
    const bool refused = run.logs.find("already pushed step 4") != std::string::npos ||
                         run.logs.find("push for step 4 but the barrier is at step 5") != std::string::npos;
    EXPECT_TRUE(refused) << "--shared-memory " << shared_memory << "\n" << run.logs;
  }
}

// Faults on the same-host path too (headers over the local channel, payloads in shared memory).
TEST_F(FaultTest, TheSameHostPathSurvivesRepeatsAndEndsOnLosses) {
  const Run repeated = train("duplicate:PULL:5", "auto");
  ASSERT_TRUE(repeated.ok) << repeated.logs;
  EXPECT_TRUE(bit_identical(clean(), repeated.params)) << relative_difference(clean(), repeated.params);
  const Run lost = train("drop:PUSH:5", "auto");
  EXPECT_FALSE(lost.ok) << lost.logs;
  EXPECT_NE(lost.logs.find("waiting for parameters from ps0"), std::string::npos) << lost.logs;
}

// The ring's own links (--mode allreduce): a delay within the deadline is ridden out with the
// same bits; a chunk lost, delayed past the deadline, repeated, reordered, cut or corrupted ends
// the job within its deadline, naming the neighbour it came from and what was wrong with it.
TEST_F(FaultTest, RingDelaysAreSurvivedBitForBit) {
  const Run clean_ring = train_ring("");
  ASSERT_TRUE(clean_ring.ok) << clean_ring.logs;
  for (const char* fault : {"delay:REDUCE:3:0.3", "delay:GATHER:5:0.3", "delay:BROADCAST:1:0.3"}) {
    const Run run = train_ring(fault);
    ASSERT_TRUE(run.ok) << fault << "\n" << run.logs;
    EXPECT_NE(run.logs.find("fault injected: "), std::string::npos) << fault << ": no fault was injected";
    EXPECT_TRUE(bit_identical(clean_ring.params, run.params))
        << fault << ": " << relative_difference(clean_ring.params, run.params);
  }
}

TEST_F(FaultTest, RingLossesRepeatsReordersCutsAndCorruptionsEndTheJobNamingTheNeighbour) {
  // The link is an ordered stream and every message says which step of which operation it is,
  // so a loss shows as the next message arriving out of turn, at once.
  struct Case {
    std::string fault, why, who;
  };
  const std::string w1_names_w0 = "rank 0 (left neighbour at 127.0.0.1:";
  const std::vector<Case> cases = {
      {"drop:REDUCE:3", ": unexpected GATHER from rank 0 ", w1_names_w0},
      {"drop:GATHER:3", ": unexpected REDUCE from rank 0 ", w1_names_w0},  // the next allreduce's
      // Past the deadline: whichever rank's deadline comes first names the other ("no data from
      // rank 1 (left neighbour ...)" or "rank 0 (right neighbour ...) is not taking data").
      {"delay:REDUCE:3:8", "timed out after 2 s: ", " neighbour at 127.0.0.1:"},
      {"duplicate:REDUCE:3", ": unexpected REDUCE from rank 0 ", w1_names_w0},
      {"reorder:REDUCE:3", ": unexpected GATHER from rank 0 ", w1_names_w0},
      {"reorder:GATHER:3", ": unexpected REDUCE from rank 0 ", w1_names_w0},  // the next allreduce's overtook it
      {"truncate:REDUCE:3", " bytes, expected ", w1_names_w0},
      {"corrupt:GATHER:3", ": malformed message from rank 0 ", w1_names_w0},
  };
  for (const Case& c : cases) {
    const Run run = train_ring(c.fault);
    EXPECT_FALSE(run.ok) << c.fault << "\n" << run.logs;
    EXPECT_NE(run.logs.find(c.why), std::string::npos) << c.fault << "\n" << run.logs;
    EXPECT_NE(run.logs.find(c.who), std::string::npos) << c.fault << "\n" << run.logs;
    EXPECT_LT(run.seconds, kTimeoutS + 10) << c.fault;
  }
}

}  // namespace
}  // namespace pstrain::test
