// The job's topology computed once (shared/config/job_topology.h): each mode's PS shards, hybrid
// mode, the tables' and checkpoints' shards, the choices as enums; the converters reading it; and
// the binaries printing it (--check-config --json), which launch.sh plans with.
#include "shared/config/job_topology.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "ps/options_from_job.h"
#include "shared/config/part_options.h"
#include "shared/util/error.h"
#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"  // TempDir
#include "test_util/process.h"
#include "worker/options_from_job.h"

namespace pstrain {
namespace {

JobOptions parse(Role role, std::vector<const char*> args) {
  args.insert(args.begin(), "prog");
  const auto o = parse_job_options(role, static_cast<int>(args.size()), args.data(), EnvMap{});
  if (!o) throw std::runtime_error("no options");
  return *o;
}

struct Case {
  std::vector<const char*> args;  // PS 0's flags
  Mode ps_mode;
  bool hybrid, has_ps;
  int num_ps, table_shards, checkpoint_shards;
  size_t tables;
};

TEST(JobTopologyTest, EachModesShardsTablesAndCheckpoints) {
  const std::vector<Case> cases = {
      {{"--num-ps", "2"}, Mode::kSync, false, true, 2, 0, 2, 0},
      {{"--num-ps", "3", "--mode", "async"}, Mode::kAsync, false, true, 3, 0, 3, 0},
      {{"--mode", "ssp", "--embedding-dim", "4"}, Mode::kSsp, false, true, 1, 0, 1, 1},
      {{"--num-ps", "2", "--mode", "allreduce"}, Mode::kAllreduce, false, false, 0, 0, 1, 0},
      {{"--num-ps", "2", "--mode", "allreduce", "--embedding-dim", "8"}, Mode::kSync, true, true, 2, 2, 3, 1},
      {{"--num-ps", "3", "--embedding-dim", "8", "--embedding-tables", "per-field"}, Mode::kSync, false, true, 3, 0, 3, 26},
      {{"--mode", "allreduce", "--model", "embedding 8, dense 1", "--loss", "bce"}, Mode::kSync, true, true, 1, 1, 2, 1},
  };
  for (const Case& c : cases) {
    const JobOptions o = parse(Role::kPs, c.args);
    const JobTopology t = job_topology(o);
    const std::string what = ::testing::PrintToString(std::vector<std::string>(c.args.begin(), c.args.end()));
    EXPECT_EQ(t.ps_mode, c.ps_mode) << what;
    EXPECT_EQ(t.mode, o.mode) << what;
    EXPECT_EQ(t.hybrid, c.hybrid) << what;
    EXPECT_EQ(t.has_ps, c.has_ps) << what;
    EXPECT_EQ(t.num_ps, c.num_ps) << what;
    EXPECT_EQ(t.table_shards, c.table_shards) << what;
    EXPECT_EQ(t.checkpoint_shards, c.checkpoint_shards) << what;
    EXPECT_EQ(t.tables.size(), c.tables) << what;
    // The converters read it: the PS's mode, the tables' shards in a checkpoint.
    EXPECT_EQ(checkpoint_options(o).table_shards, c.table_shards) << what;
    if (c.has_ps) {
      EXPECT_EQ(server_options(o).mode, c.ps_mode) << what;
    }
  }
}

// A worker's PS client speaks the PS's mode: sync for the tables in hybrid mode (it was the
// job's allreduce, which the hybrid exchange had to correct), the job's mode otherwise.
TEST(JobTopologyTest, WorkersSpeakThePsMode) {
  const JobOptions hybrid = parse(Role::kWorker, {"--mode", "allreduce", "--embedding-dim", "8", "--num-workers", "2",
                                                  "--coordinator", "127.0.0.1:1", "--ps-hosts", "127.0.0.1:2",
                                                  "--train-data", "a.tsv", "--test-data", "b.tsv"});
  EXPECT_EQ(ps_client_options(hybrid).mode, Mode::kSync);
  EXPECT_EQ(exchange_options(hybrid).mode, Mode::kAllreduce);
  EXPECT_EQ(train_options(hybrid).checkpoint_shards, 2);
  const JobOptions ssp = parse(Role::kWorker, {"--mode", "ssp", "--ps-hosts", "127.0.0.1:2"});
  EXPECT_EQ(ps_client_options(ssp).mode, Mode::kSsp);
}

TEST(JobTopologyTest, ChoicesAreEnumsWithTheFlagsMessages) {
  const JobOptions o = parse(Role::kPs, {"--device", "cuda:3", "--embedding-pool", "mean", "--embedding-optimizer",
                                         "ftrl", "--embedding-tables", "per-field", "--embedding-dim", "4"});
  const JobChoices c = job_topology(o).choices;
  EXPECT_EQ(c.device, DeviceKind::kCuda);
  EXPECT_EQ(c.device_index, 3);
  EXPECT_EQ(c.embedding_pool, EmbeddingPool::kMean);
  EXPECT_EQ(c.embedding_optimizer, TableOptimizer::kFtrl);
  EXPECT_EQ(c.embedding_tables, EmbeddingTables::kPerField);
  EXPECT_EQ(embedding_setup(o).pool, EmbeddingPool::kMean);
  EXPECT_EQ(embedding_setup(o).init, "zeros");  // FTRL's rows start at zero, as the PS makes them
  EXPECT_EQ(job_topology(parse(Role::kPs, {"--schema", "criteo", "--train-data", "a", "--test-data", "b"})).choices.data,
            DataKind::kSchema);
  EXPECT_EQ(job_topology(parse(Role::kPs, {"--train-data", "a.csv", "--test-data", "b.csv"})).choices.data, DataKind::kCsv);
  EXPECT_EQ(job_topology(parse(Role::kPs, {})).choices.data, DataKind::kIdx);
  for (const auto& [args, message] : std::vector<std::pair<std::vector<const char*>, std::string>>{
           {{"--embedding-pool", "max"}, "--embedding-pool: 'max' is not one of sum, mean"},
           {{"--embedding-optimizer", "rmsprop"}, "--embedding-optimizer: 'rmsprop' is not one of sgd, adagrad, adam, ftrl"},
           {{"--embedding-tables", "each"}, "--embedding-tables: 'each' is not one of shared, per-field"},
           {{"--device", "cuda:x"}, "--device: 'cuda:x' is not one of auto, cpu, cuda, cuda:K"},
           {{"--device", "gpu"}, "--device: 'gpu' is not one of auto, cpu, cuda, cuda:K"}}) {
    try {
      parse(Role::kPs, args);
      ADD_FAILURE() << message << ": accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
}

// --check-config --json: each binary prints the resolved job as one JSON object on one line and
// exits 0 (exit 2 and the usual message for a bad job; --json alone is a usage error).
TEST(CheckConfigJsonTest, TheBinariesPrintTheResolvedJob) {
  const TempDir temp("check_json");
  const std::string& dir = temp.path;
  std::ofstream(dir + "/job.cfg") << "mode = allreduce\nnum-ps = 2\nnum-workers = 3\nembedding-dim = 8\n";
  const auto run = [&](const std::string& binary, std::vector<std::string> flags, const std::string& name) {
    flags.insert(flags.begin(), binary);
    const test::ExitStatus status = test::wait_for(test::spawn(flags, dir + "/" + name + ".log"), 30);
    return std::pair{status, test::read_file(dir + "/" + name + ".log")};
  };
  auto [ps, ps_out] = run(PSTRAIN_PS_BIN, {"--config", dir + "/job.cfg", "--index", "1", "--check-config", "--json"}, "ps");
  ASSERT_TRUE(ps.ok()) << ps_out;
  ASSERT_EQ(std::count(ps_out.begin(), ps_out.end(), '\n'), 1) << ps_out;
  const nlohmann::json p = nlohmann::json::parse(ps_out);
  EXPECT_EQ(p.at("role"), "ps");
  EXPECT_EQ(p.at("index"), 1);
  EXPECT_EQ(p.at("mode"), "allreduce");
  EXPECT_EQ(p.at("ps_mode"), "sync");
  EXPECT_EQ(p.at("hybrid"), true);
  EXPECT_EQ(p.at("num_ps"), 2);
  EXPECT_EQ(p.at("num_workers"), 3);
  EXPECT_EQ(p.at("table_shards"), 2);
  EXPECT_EQ(p.at("checkpoint_shards"), 3);
  EXPECT_EQ(p.at("tables"), nlohmann::json::array({"ids"}));
  EXPECT_EQ(p.at("worker_batches"), nlohmann::json::array({64, 64, 64}));
  auto [w, w_out] = run(PSTRAIN_WORKER_BIN, {"--ps-hosts", "127.0.0.1:1", "--mode", "ssp", "--device", "cpu", "--model",
                                             "dense 10", "--check-config", "--json"}, "w");
  ASSERT_TRUE(w.ok()) << w_out;
  const nlohmann::json j = nlohmann::json::parse(w_out);
  EXPECT_EQ(j.at("role"), "worker");
  EXPECT_EQ(j.at("mode"), "ssp");
  EXPECT_EQ(j.at("ps_mode"), "ssp");
  EXPECT_EQ(j.at("hybrid"), false);
  EXPECT_EQ(j.at("num_ps"), 1);
  EXPECT_EQ(j.at("device"), "cpu");
  EXPECT_EQ(j.at("data"), "idx");
  EXPECT_EQ(j.at("model"), "dense 10");
  auto [ring, ring_out] = run(PSTRAIN_WORKER_BIN, {"--mode", "allreduce", "--check-config", "--json"}, "ring");
  ASSERT_TRUE(ring.ok()) << ring_out;
  const nlohmann::json r = nlohmann::json::parse(ring_out);
  EXPECT_EQ(r.at("num_ps"), 0);
  EXPECT_TRUE(r.at("ps_mode").is_null());
  auto [bad, bad_out] = run(PSTRAIN_PS_BIN, {"--embedding-pool", "max", "--check-config", "--json"}, "bad");
  EXPECT_EQ(bad.code, 2) << bad_out;
  EXPECT_NE(bad_out.find("--embedding-pool: 'max' is not one of sum, mean"), std::string::npos) << bad_out;
  auto [alone, alone_out] = run(PSTRAIN_PS_BIN, {"--json"}, "alone");
  EXPECT_EQ(alone.code, 2) << alone_out;
  EXPECT_NE(alone_out.find("--json applies to --check-config"), std::string::npos) << alone_out;
}

}  // namespace
}  // namespace pstrain
