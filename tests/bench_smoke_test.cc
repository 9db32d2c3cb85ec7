// The benchmarks are not tests; this only checks that each one runs and prints well-formed rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <sstream>
#include <string>

#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"

namespace {

std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  while (fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  EXPECT_EQ(pclose(pipe), 0) << command;
  return out;
}

int matching_lines(const std::string& text, const std::regex& row) {
  std::istringstream lines(text);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    EXPECT_TRUE(std::regex_match(line, row)) << "malformed row: " << line;
    ++count;
  }
  return count;
}

const std::string kNum = "[0-9]+(\\.[0-9]+)?";

// The Python for the PyTorch benchmarks: $PSTRAIN_TORCH_PYTHON, else python3.
std::string torch_python() {
  const char* env = std::getenv("PSTRAIN_TORCH_PYTHON");
  return env != nullptr && *env != '\0' ? env : "python3";
}

bool has_torch(const std::string& python) {
  return std::system((python + " -c 'import torch, numpy' >/dev/null 2>&1").c_str()) == 0;
}

std::string build_dir() {
  const std::string worker = PSTRAIN_WORKER_BIN;
  return worker.substr(0, worker.rfind('/'));
}

TEST(BenchSmokeTest, CommPrintsOneRowPerConfiguration) {
  const std::string out =
      run(std::string(PSTRAIN_BENCH_DIR) + "/comm --sizes 1 --transport tcp,ipc --workers 1,2 --shards 1 --rounds 2");
  const std::regex row("size=1MiB transport=(tcp|ipc) workers=[12] shards=1 raw_ms=" + kNum + " raw_n_ms=" + kNum +
                       " pstrain_ms=" + kNum + " efficiency=" + kNum + " efficiency_n=" + kNum + " aggregate_GBps=" + kNum + " cpu_cores=" + kNum);
  EXPECT_EQ(matching_lines(out, row), 4) << out;
  const std::string json = run(std::string(PSTRAIN_BENCH_DIR) + "/comm --sizes 1 --workers 1 --shards 2 --rounds 1 --json");
  EXPECT_NE(json.find("\"efficiency\": "), std::string::npos) << json;
  EXPECT_NE(json.find("\"raw_n_ms\": "), std::string::npos) << json;
  EXPECT_NE(json.find("\"cpu_cores\": "), std::string::npos) << json;
  EXPECT_EQ(json.front(), '[');
}

TEST(BenchSmokeTest, ApplyPrintsEveryUpdateAgainstMemcpy) {
  const std::string out = run(std::string(PSTRAIN_BENCH_DIR) + "/apply --mib 1 --rounds 1");
  const std::regex row("update=(accumulate|finite-check|sgd|momentum|adam) mib=1 ms=" + kNum + " GBps=" + kNum +
                       " memcpy_GBps=" + kNum + " ratio=" + kNum);
  EXPECT_EQ(matching_lines(out, row), 5) << out;
}

TEST(BenchSmokeTest, CheckpointStallPrintsTheStallAndTheRates) {
  pstrain::TempDir dir("bench-checkpoint-stall");
  const std::string out = run(std::string(PSTRAIN_BENCH_DIR) + "/checkpoint_stall --gib 0.02 --disk-gib 0.01 --step-rows 1000 --dir " + dir.path);
  const std::regex rows("longest stall: " + kNum + " ms|write: " + kNum + " GB in " + kNum + " s: " + kNum +
                        " GB/s while training \\(disk " + kNum + " GB/s\\); with training idle " + kNum + " s: " + kNum +
                        " GB/s");
  EXPECT_EQ(matching_lines(out, rows), 2) << out;
}

// bench/train_vs_torch.py needs PyTorch (PSTRAIN_TORCH_PYTHON names a Python that has it;
// default python3): skipped where it is missing, as on CI.
// One epoch of the default job (468 steps): checkpoints of steps 100 to 400 and the last one.
TEST(BenchSmokeTest, CheckpointCostPrintsBothRunsAndARatio) {
  const std::string build = std::string(PSTRAIN_WORKER_BIN).substr(0, std::string(PSTRAIN_WORKER_BIN).rfind('/'));
  const std::string out = run("PSTRAIN_BUILD_DIR=" + build + " python3 " + PSTRAIN_SOURCE_DIR +
                              "/bench/checkpoint_cost.py --epochs 1 --every 100 --repeat 1");
  const std::regex row("(plain +samples_per_s=[0-9]+ +runs=\\[[0-9]+\\])|"
                       "(checkpointing +samples_per_s=[0-9]+ +runs=\\[[0-9]+\\] +checkpoints_per_run=5 \\(every 100 steps\\))|"
                       "(ratio=" + kNum + ")");
  EXPECT_EQ(matching_lines(out, row), 3) << out;
}

// A quarter of a minute, sampled every 3 s: a line per sample and a row per process with its
// first value, its largest and the growth (the verdict itself needs the long runs).
TEST(BenchSmokeTest, SoakSamplesEveryProcessAndReportsItsGrowth) {
  const std::string build = std::string(PSTRAIN_WORKER_BIN).substr(0, std::string(PSTRAIN_WORKER_BIN).rfind('/'));
  const std::string command = "PSTRAIN_BUILD_DIR=" + build + " python3 " + PSTRAIN_SOURCE_DIR +
                              "/bench/soak.py --minutes 0.25 --interval 3 --warmup 3 --limit 1000 2>/dev/null";
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[4096];
  while (fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  EXPECT_EQ(pclose(pipe), 0) << out;
  for (const char* name : {"ps0", "w0", "w1"}) {
    const std::regex row(std::string(name) + " +[0-9]+ +[0-9]+ +-?" + kNum + " +[0-9]+ +[0-9]+ +-?" + kNum +
                         " +[0-9]+ +[0-9]+ +-?" + kNum);
    std::istringstream lines(out);
    std::string line;
    int rows = 0;
    while (std::getline(lines, line)) rows += std::regex_match(line, row) ? 1 : 0;
    EXPECT_EQ(rows, 1) << name << "\n" << out;
  }
  EXPECT_NE(out.find("soak: no process grew past the limit"), std::string::npos) << out;
  EXPECT_GE(std::count(out.begin(), out.end(), '\n'), 8) << out;  // the samples' lines
}

// A few steps per configuration (the target is low enough for all of them to reach it).
TEST(BenchSmokeTest, StragglersPrintsEveryConfigurationAgainstSync) {
  const std::string out = run("python3 " + std::string(PSTRAIN_SOURCE_DIR) + "/bench/stragglers.py --build-dir " + build_dir() +
                              " --steps 30 --target 0.3 --configs sync,backup1,ssp2,async");
  const std::regex row("(config +to_target_s +epoch +speedup +final_acc +acc_diff +samples_per_s +train_s +job_s +counters)|"
                       "((sync|backup1|ssp2|async) +" + kNum + " +1 +" + kNum + " +" + kNum + " +[+-]" + kNum + " +[0-9]+ +" +
                       kNum + " +" + kNum + "  .+)");
  EXPECT_EQ(matching_lines(out, row), 5) << out;
  EXPECT_NE(out.find("\nsync "), std::string::npos) << out;
  EXPECT_NE(out.find("dropped="), std::string::npos) << out;
  EXPECT_NE(out.find("lead_max="), std::string::npos) << out;
}

const std::string kPeersHeader = "config +samples_per_s +ratio +test_acc +wall_s +rss_mib";

// pstrain's rows through launch.sh (no PyTorch needed; ratios print as "-" without its baseline).
TEST(BenchSmokeTest, PeersPrintsPstrainsConfigurations) {
  const std::string out = run("python3 " + std::string(PSTRAIN_SOURCE_DIR) + "/bench/peers.py --build-dir " + build_dir() +
                              " --configs pstrain-1w,pstrain-2w,pstrain-ring --steps 20 --repeat 1");
  const std::regex row("(" + kPeersHeader + ")|(pstrain-1w +[0-9]+ +- +" + kNum + " +" + kNum + "  ps0=[0-9]+ w0=[0-9]+)|" +
                       "(pstrain-2w +[0-9]+ +- +" + kNum + " +" + kNum + "  ps0=[0-9]+ w0=[0-9]+ w1=[0-9]+)|" +
                       "(pstrain-ring +[0-9]+ +- +" + kNum + " +" + kNum + "  w0=[0-9]+ w1=[0-9]+)");
  EXPECT_EQ(matching_lines(out, row), 4) << out;
}

TEST(BenchSmokeTest, PeersComparesWithPyTorchOneProcessAndDdp) {
  const std::string python = torch_python();
  if (!has_torch(python)) GTEST_SKIP() << python << " has no PyTorch/numpy (set PSTRAIN_TORCH_PYTHON)";
  const std::string out = run("python3 " + std::string(PSTRAIN_SOURCE_DIR) + "/bench/peers.py --build-dir " + build_dir() +
                              " --python " + python + " --configs torch,torch-ddp,pstrain-2w --steps 20 --repeat 1");
  const std::regex row("(" + kPeersHeader + ")|(torch +[0-9]+ +1\\.000 +" + kNum + " +" + kNum + "  rank0=[0-9]+)|" +
                       "(torch-ddp +[0-9]+ +" + kNum + " +" + kNum + " +" + kNum + "  rank0=[0-9]+ rank1=[0-9]+)|" +
                       "(pstrain-2w +[0-9]+ +" + kNum + " +" + kNum + " +" + kNum + "  ps0=[0-9]+ w0=[0-9]+ w1=[0-9]+)");
  EXPECT_EQ(matching_lines(out, row), 4) << out;
}

const std::string kCtrHeader = "config +samples_per_s +ratio +test_auc +logloss  rss_mib";
const std::string kCtrSmall = " --train-lines 5000 --test-lines 1000 --steps 4 --repeat 1";

// The CTR job's pstrain row (ratios print as "-" without PyTorch), and the sweep's rows.
TEST(BenchSmokeTest, CtrPrintsPstrainsRowAndTheSweep) {
  const std::string ctr = "python3 " + std::string(PSTRAIN_SOURCE_DIR) + "/bench/ctr.py --build-dir " + build_dir();
  const std::string out = run(ctr + " --configs pstrain" + kCtrSmall);
  const std::regex row("(" + kCtrHeader + ")|(pstrain +[0-9]+ +- +" + kNum + " +" + kNum + "  ps0=[0-9]+ w0=[0-9]+ w1=[0-9]+)");
  EXPECT_EQ(matching_lines(out, row), 2) << out;
  const std::string sweep = run(ctr + " --configs pstrain --sweep --sweep-sizes 1e5,1e6 --sweep-lines 5000 --steps 2");
  const std::regex sweep_row("( *distinct_ids +config +step_ms +rows +table_mib +ps_growth_mib  rss_mib)|"
                             "( *10{5,6} +pstrain +" + kNum + " +[0-9]+ +" + kNum + " +" + kNum +
                             "  ps0=[0-9]+ w0=[0-9]+ w1=[0-9]+)");
  EXPECT_EQ(matching_lines(sweep, sweep_row), 3) << sweep;
}

TEST(BenchSmokeTest, CtrComparesWithPyTorchOneProcessAndDdp) {
  const std::string python = torch_python();
  if (!has_torch(python)) GTEST_SKIP() << python << " has no PyTorch/numpy (set PSTRAIN_TORCH_PYTHON)";
  const std::string out = run("python3 " + std::string(PSTRAIN_SOURCE_DIR) + "/bench/ctr.py --build-dir " + build_dir() +
                              " --python " + python + kCtrSmall);
  const std::regex row("(" + kCtrHeader + ")|(torch +[0-9]+ +1\\.000 +" + kNum + " +" + kNum + "  rank0=[0-9]+)|" +
                       "(torch-ddp +[0-9]+ +" + kNum + " +" + kNum + " +" + kNum + "  rank0=[0-9]+ rank1=[0-9]+)|" +
                       "(pstrain +[0-9]+ +" + kNum + " +" + kNum + " +" + kNum + "  ps0=[0-9]+ w0=[0-9]+ w1=[0-9]+)");
  EXPECT_EQ(matching_lines(out, row), 4) << out;
}

TEST(BenchSmokeTest, TrainVsTorchPrintsBothProgramsAndARatio) {
  const std::string python = torch_python();
  if (!has_torch(python)) GTEST_SKIP() << python << " has no PyTorch/numpy (set PSTRAIN_TORCH_PYTHON)";
  const std::string out = run(python + " " + PSTRAIN_SOURCE_DIR + "/bench/train_vs_torch.py --device cpu --steps 30 --repeat 2 --worker " +
                              PSTRAIN_WORKER_BIN);
  const std::regex row("(program=(pstrain|torch) samples_per_s=[0-9]+ test_accuracy=" + kNum + ")|(ratio=" + kNum + ")");
  EXPECT_EQ(matching_lines(out, row), 3) << out;
  const std::string cnn = run(python + " " + PSTRAIN_SOURCE_DIR + "/bench/train_vs_torch.py --device cpu --model cnn " +
                              "--steps 5 --repeat 1 --worker " + PSTRAIN_WORKER_BIN);
  EXPECT_EQ(matching_lines(cnn, row), 3) << cnn;
  EXPECT_NE(cnn.find("CNN of configs/fashion_cnn.cfg"), std::string::npos) << cnn;
}

}  // namespace
