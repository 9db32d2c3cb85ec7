// Processes started by hand with nothing but their environment (TF_CONFIG, Slurm-like or Open
// MPI-like variables) and the job's flags train exactly as the same job started with flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

constexpr double kTolerance = 1e-5;  // the sync contract: equal to float rounding

std::string tf_config(const std::vector<int>& chief, const std::vector<int>& workers, const std::vector<int>& ps,
                      const std::string& type, int index) {
  const auto list = [](const std::vector<int>& ports) {
    std::string text = "[";
    for (size_t i = 0; i < ports.size(); ++i) text += (i ? ", \"127.0.0.1:" : "\"127.0.0.1:") + std::to_string(ports[i]) + "\"";
    return text + "]";
  };
  std::string cluster = "\"worker\": " + list(workers);
  if (!chief.empty()) cluster = "\"chief\": " + list(chief) + ", " + cluster;
  if (!ps.empty()) cluster += ", \"ps\": " + list(ps);
  return "{\"cluster\": {" + cluster + "}, \"task\": {\"type\": \"" + type + "\", \"index\": " + std::to_string(index) +
         "}}";
}

class ClusterJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_dir_ = new std::string(make_temp_dir("cluster-job-data"));
    write_synthetic_mnist(*data_dir_, "train", 300, 8, 8, 21, false);
    write_synthetic_mnist(*data_dir_, "t10k", 100, 8, 8, 22, false);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*data_dir_);
    delete data_dir_;
    data_dir_ = nullptr;
  }
  void SetUp() override { dir_ = make_temp_dir("cluster-job"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The job's flags, the same for every process; the chief saves its parameters in `params`.
  std::vector<std::string> job_flags(const std::string& params) const {
    return {"--data-dir", *data_dir_, "--cache-dir", dir_, "--hidden", "16,8", "--batch-size", "8", "--steps", "20",
            "--epochs", "5", "--optimizer", "momentum", "--lr", "0.05", "--seed", "7", "--log-every", "5",
            "--timeout", "30", "--save-params", params};
  }

  // The reference: the same job started with flags (test_util's run_job).
  SavedParams with_flags(int num_ps, int num_workers) {  // num_ps 0: allreduce mode
    Job job;
    job.num_ps = std::max(num_ps, 1);  // run_allreduce_job ignores it, but passes it
    job.num_workers = num_workers;
    job.dir = dir_ + "/flags";
    std::filesystem::create_directories(job.dir);
    job.args = job_flags(job.dir + "/params");
    const JobResult result = num_ps == 0 ? run_allreduce_job(job) : run_job(job);
    EXPECT_TRUE(result.ok()) << result.logs;
    return load_saved_params(job.dir + "/params");
  }

  pid_t start(const std::string& name, const std::string& binary, const Env& env, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {binary};
    const std::vector<std::string> flags = job_flags(dir_ + "/params");
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    names_.push_back(name);
    return spawn(argv, log(name), env);
  }

  std::string log(const std::string& name) const { return dir_ + "/" + name + ".log"; }

  // Waits for every process started; true if all exited 0. *logs: all of their logs.
  bool finish(const std::vector<pid_t>& pids, std::string* logs) {
    bool ok = true;
    for (pid_t pid : pids) ok = wait_for(pid, 120).ok() && ok;
    for (const auto& name : names_) *logs += "---- " + name + "\n" + read_file(log(name));
    return ok;
  }

  static std::string* data_dir_;
  std::string dir_;
  std::vector<std::string> names_;
};
std::string* ClusterJobTest::data_dir_ = nullptr;

// No chief entry: worker 0 is the chief. The workers start first and wait for the PS shards,
// saying so; then the shards start.
TEST_F(ClusterJobTest, TfConfigWithoutChiefMatchesFlagsInAnyStartOrder) {
  const SavedParams reference = with_flags(2, 2);
  const std::vector<int> ports = free_tcp_ports(4);
  const std::vector<int> workers = {ports[0], ports[1]}, ps = {ports[2], ports[3]};
  std::vector<pid_t> pids;
  for (int i = 0; i < 2; ++i) {
    pids.push_back(start("w" + std::to_string(i), PSTRAIN_WORKER_BIN, {{"TF_CONFIG", tf_config({}, workers, ps, "worker", i)}}));
  }
  const std::string waiting = "waiting for ps0 at 127.0.0.1:" + std::to_string(ps[0]);
  EXPECT_TRUE(wait_for_text(log("w1"), waiting, 30)) << read_file(log("w1"));
  for (int s = 0; s < 2; ++s) {
    pids.push_back(start("ps" + std::to_string(s), PSTRAIN_PS_BIN, {{"TF_CONFIG", tf_config({}, workers, ps, "ps", s)}}));
  }
  std::string logs;
  ASSERT_TRUE(finish(pids, &logs)) << logs;
  EXPECT_NE(read_file(log("w1")).find("w1: role worker (TF_CONFIG), index 1 of 2 (TF_CONFIG)"), std::string::npos) << logs;
  EXPECT_NE(read_file(log("ps1")).find("ps1: role ps (TF_CONFIG), index 1 of 2 (TF_CONFIG)"), std::string::npos) << logs;
  EXPECT_NE(read_file(log("ps1")).find("serving at 127.0.0.1:" + std::to_string(ps[1])), std::string::npos) << logs;
  EXPECT_LE(relative_difference(reference, load_saved_params(dir_ + "/params")), kTolerance);
}

// A chief entry is worker 0 and TF_CONFIG's worker j is pstrain's worker j+1. An evaluator has
// nothing to do; a process started as the wrong binary for its task refuses.
TEST_F(ClusterJobTest, TfConfigWithChiefMatchesFlags) {
  const SavedParams reference = with_flags(2, 3);
  const std::vector<int> ports = free_tcp_ports(5);
  const std::vector<int> chief = {ports[0]}, workers = {ports[1], ports[2]}, ps = {ports[3], ports[4]};
  std::vector<pid_t> pids;
  for (int s = 0; s < 2; ++s) {
    pids.push_back(start("ps" + std::to_string(s), PSTRAIN_PS_BIN, {{"TF_CONFIG", tf_config(chief, workers, ps, "ps", s)}}));
  }
  pids.push_back(start("chief", PSTRAIN_WORKER_BIN, {{"TF_CONFIG", tf_config(chief, workers, ps, "chief", 0)}}));
  for (int j = 0; j < 2; ++j) {
    pids.push_back(start("worker" + std::to_string(j), PSTRAIN_WORKER_BIN,
                         {{"TF_CONFIG", tf_config(chief, workers, ps, "worker", j)}}));
  }
  const ExitStatus evaluator = wait_for(
      start("evaluator", PSTRAIN_WORKER_BIN, {{"TF_CONFIG", tf_config(chief, workers, ps, "evaluator", 0)}}), 30);
  const ExitStatus wrong =
      wait_for(start("wrong", PSTRAIN_PS_BIN, {{"TF_CONFIG", tf_config(chief, workers, ps, "worker", 0)}}), 30);
  std::string logs;
  ASSERT_TRUE(finish(pids, &logs)) << logs;
  EXPECT_NE(read_file(log("chief")).find("w0: role worker (TF_CONFIG), index 0 of 3 (TF_CONFIG)"), std::string::npos);
  EXPECT_NE(read_file(log("worker0")).find("w1: role worker (TF_CONFIG), index 1 of 3 (TF_CONFIG)"), std::string::npos);
  EXPECT_NE(read_file(log("worker1")).find("w2: role worker (TF_CONFIG), index 2 of 3 (TF_CONFIG)"), std::string::npos);
  EXPECT_NE(read_file(log("chief")).find("summary: mode=sync workers=3 ps=2 steps=20"), std::string::npos) << logs;
  EXPECT_LE(relative_difference(reference, load_saved_params(dir_ + "/params")), kTolerance);
  EXPECT_TRUE(evaluator.ok()) << read_file(log("evaluator"));
  EXPECT_NE(read_file(log("evaluator")).find("this task is an evaluator"), std::string::npos) << read_file(log("evaluator"));
  EXPECT_EQ(wrong.code, 2) << read_file(log("wrong"));
  EXPECT_NE(read_file(log("wrong")).find("TF_CONFIG's task is worker 0, but this is pstrain-ps: start pstrain-worker"),
            std::string::npos)
      << read_file(log("wrong"));
}

// A malformed TF_CONFIG stops either binary at its start with a usage error that names it (exit
// 2), never a crash: JSON the parser refuses, nesting deeper than 64 levels, a key given twice.
TEST_F(ClusterJobTest, MalformedTfConfigIsAUsageError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker" "index": 0}})",
       "TF_CONFIG is not valid JSON: parse error at line 1, column 74: syntax error while parsing object"},
      {std::string(100000, '['), "TF_CONFIG is not valid JSON: nested deeper than 64 levels"},
      {R"({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker"}, "task": {}})",
       "TF_CONFIG: the key \"task\" appears twice in one object"}};
  int n = 0;
  for (const std::string& binary : {PSTRAIN_WORKER_BIN, PSTRAIN_PS_BIN}) {
    for (const auto& [doc, message] : cases) {
      const std::string name = "bad" + std::to_string(n++);
      const ExitStatus status = wait_for(start(name, binary, {{"TF_CONFIG", doc}}), 30);
      const std::string text = read_file(log(name));
      EXPECT_EQ(status.code, 2) << binary << "\n" << text;
      EXPECT_NE(text.find(": " + message), std::string::npos) << binary << "\n" << text;
      EXPECT_EQ(text.find("terminate called"), std::string::npos) << text;
    }
  }
}

// allreduce mode: no ps job; the chief binds its own entry's port for the rendezvous.
TEST_F(ClusterJobTest, TfConfigAllreduceMatchesFlags) {
  const SavedParams reference = with_flags(0, 2);  // run_allreduce_job: --mode allreduce
  const std::vector<int> ports = free_tcp_ports(2);
  std::vector<pid_t> pids;
  pids.push_back(start("w1", PSTRAIN_WORKER_BIN, {{"TF_CONFIG", tf_config({ports[0]}, {ports[1]}, {}, "worker", 0)}},
                       {"--mode", "allreduce"}));
  pids.push_back(start("w0", PSTRAIN_WORKER_BIN, {{"TF_CONFIG", tf_config({ports[0]}, {ports[1]}, {}, "chief", 0)}},
                       {"--mode", "allreduce"}));
  std::string logs;
  ASSERT_TRUE(finish(pids, &logs)) << logs;
  EXPECT_NE(read_file(log("w1")).find("rendezvous at 127.0.0.1:" + std::to_string(ports[0]) + " (TF_CONFIG)"),
            std::string::npos)
      << logs;
  EXPECT_LE(relative_difference(reference, load_saved_params(dir_ + "/params")), kTolerance);
}

// Every rank runs the same command (as under srun or mpirun); the first --num-ps ranks become
// parameter servers by switching binaries (--role auto), the others workers.
class RankEnvJobTest : public ClusterJobTest, public ::testing::WithParamInterface<std::string> {
 protected:
  Env rank_env(int rank, int world) const {
    if (GetParam() == "slurm") {
      return {{"SLURM_PROCID", std::to_string(rank)},    {"SLURM_NTASKS", std::to_string(world)},
              {"SLURM_LOCALID", std::to_string(rank)},   {"SLURM_STEP_ID", "0"},
              {"SLURM_STEP_NODELIST", "testnode"},      {"SLURM_STEP_TASKS_PER_NODE", std::to_string(world)}};
    }
    return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)}, {"OMPI_COMM_WORLD_SIZE", std::to_string(world)},
            {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank)},
            {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(world)}};
  }
};

TEST_P(RankEnvJobTest, OneCommandForEveryRankMatchesFlags) {
  const std::string source = GetParam() == "slurm" ? "Slurm" : "Open MPI";
  const SavedParams reference = with_flags(2, 3);
  const int base_port = free_tcp_ports(2, /*consecutive=*/true)[0];
  // Slurm: every rank runs pstrain-worker; Open MPI: every rank runs pstrain-ps.
  const std::string binary = GetParam() == "slurm" ? PSTRAIN_WORKER_BIN : PSTRAIN_PS_BIN;
  std::vector<pid_t> pids;
  for (int rank = 4; rank >= 0; --rank) {  // workers first: any start order
    pids.push_back(start("rank" + std::to_string(rank), binary, rank_env(rank, 5),
                         {"--role", "auto", "--num-ps", "2", "--base-port", std::to_string(base_port)}));
  }
  std::string logs;
  ASSERT_TRUE(finish(pids, &logs)) << logs;
  const std::string ps1 = read_file(log("rank1")), w2 = read_file(log("rank4"));
  EXPECT_NE(ps1.find("ps1: role ps (" + source + "), index 1 of 2 (" + source + ")"), std::string::npos) << ps1;
  EXPECT_NE(ps1.find("serving at 127.0.0.1:" + std::to_string(base_port + 1)), std::string::npos) << ps1;
  EXPECT_NE(w2.find("w2: role worker (" + source + "), index 2 of 3 (" + source + "), host "), std::string::npos) << w2;
  EXPECT_NE(w2.find("local rank 4 (" + source + ")"), std::string::npos) << w2;
  const std::string switched = GetParam() == "slurm" ? ps1 : w2;
  EXPECT_NE(switched.find(GetParam() == "slurm" ? "running " + PSTRAIN_PS_BIN : "running " + PSTRAIN_WORKER_BIN),
            std::string::npos)
      << switched;
  EXPECT_LE(relative_difference(reference, load_saved_params(dir_ + "/params")), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Launchers, RankEnvJobTest, ::testing::Values("slurm", "openmpi"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pstrain::test
