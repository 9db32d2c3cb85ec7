// CTR jobs end to end (docs/sparse.md, "Training a CTR model"): real PS and worker processes on
// Criteo-format data with --embedding-dim, the tables on the PS shards. The mirrored contract
// over dense and sparse parameters, for every table optimizer and shard count; async. The
// refusals of what is not built yet: tests/ctr_options_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util/ctr_data.h"
#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

constexpr int kBatch = 8;
constexpr int kSteps = 20;
constexpr int kRecords = 240;
constexpr int kDim = 4;

struct CtrRun {
  SavedParams dense;
  std::vector<float> rows;  // every key of the training data, in a fixed order: its row
  size_t table_rows = 0;    // rows the tables hold
  std::string logs;
};

class CtrJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(make_temp_dir("ctr-job"));
    write_criteo(*dir_ + "/train.tsv", kRecords, 0);
    write_criteo(*dir_ + "/test.tsv", 80, 100000);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }

  // Trains kSteps steps of a CTR model and returns its dense parameters and its rows.
  static CtrRun train(int num_ps, int num_workers, int batch, const std::string& table_optimizer, bool per_field,
                      const std::vector<std::string>& more = {}, const std::string& table_lr = "0.1") {
    const std::string tag = table_optimizer + "-s" + std::to_string(num_ps) + "-n" + std::to_string(num_workers);
    const std::string dir = make_temp_dir("ctr-" + tag);
    Job job;
    job.num_ps = num_ps;
    job.num_workers = num_workers;
    job.dir = dir;
    job.args = {"--train-data", *dir_ + "/train.tsv", "--test-data", *dir_ + "/test.tsv", "--cache-dir", dir,
                "--embedding-dim", std::to_string(kDim), "--embedding-tables", per_field ? "per-field" : "shared",
                "--embedding-optimizer", table_optimizer, "--embedding-lr", table_lr, "--model",
                "dense 16, relu, dense 2", "--optimizer", "sgd", "--lr", "0.1", "--batch-size", std::to_string(batch),
                "--steps", std::to_string(kSteps), "--epochs", "5", "--seed", "7", "--log-every", "5",
                "--timeout", "30", "--save-params", dir + "/params"};
    job.args.insert(job.args.end(), more.begin(), more.end());
    const JobResult result = run_job(job);
    EXPECT_TRUE(result.ok()) << result.logs;
    CtrRun run;
    run.logs = result.logs;
    if (!result.ok()) return run;
    run.dense = load_saved_params(dir + "/params");
    std::vector<std::string> names;
    if (per_field) {
      for (int f = 1; f <= 26; ++f) names.push_back("C" + std::to_string(f));
    } else {
      names = {"ids"};
    }
    const auto tables = load_tables(dir + "/params", table_optimizer, names, kDim);
    for (const auto& [name, table] : tables) run.table_rows += table->stats().rows;
    // Every key the training data has, in record and field order (repeats included).
    for (int r = 0; r < kRecords; ++r) {
      for (int f = 0; f < 26; ++f) {
        const uint64_t key = ctr_key(r, f, per_field);
        std::vector<float> row(kDim);
        tables.at(per_field ? names[static_cast<size_t>(f)] : names[0])->lookup(&key, 1, row.data());
        run.rows.insert(run.rows.end(), row.begin(), row.end());
      }
    }
    std::filesystem::remove_all(dir);
    return run;
  }

  static double rows_difference(const CtrRun& a, const CtrRun& b) {
    EXPECT_EQ(a.rows.size(), b.rows.size());
    double diff = 0, scale = 0;
    for (size_t i = 0; i < a.rows.size() && i < b.rows.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(a.rows[i] - b.rows[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(a.rows[i])));
    }
    return diff / std::max(scale, 1e-30);
  }

  static std::string* dir_;
};
std::string* CtrJobTest::dir_ = nullptr;

// N = 3 workers of batch 8 on S shards equal one worker of batch 24, dense and sparse parameters,
// for every table optimizer; the rows moved (they are not their initial values).
TEST_F(CtrJobTest, MirroredContractForEveryTableOptimizer) {
  for (const std::string optimizer : {"sgd", "adagrad", "adam", "ftrl"}) {
    const CtrRun reference = train(1, 1, 3 * kBatch, optimizer, false);
    const CtrRun untrained = train(1, 1, 3 * kBatch, optimizer, false, {}, "1e-30");
    ASSERT_FALSE(reference.rows.empty()) << optimizer;
    EXPECT_GT(rows_difference(reference, untrained), 1e-3) << optimizer << ": the rows did not move";
    EXPECT_GT(reference.table_rows, 26u * 4) << optimizer;
    const CtrRun p = train(2, 3, kBatch, optimizer, false);
    const double dense = relative_difference(reference.dense, p.dense);
    const double sparse = rows_difference(reference, p);
    EXPECT_LE(dense, 1e-5) << optimizer;
    EXPECT_LE(sparse, 1e-5) << optimizer;
    EXPECT_EQ(reference.table_rows, p.table_rows) << optimizer;
    std::printf("table optimizer %s, N=3 S=2 vs N=1: dense %.3g, rows %.3g (max |difference| / max |value|), %zu rows\n",
                optimizer.c_str(), dense, sparse, p.table_rows);
  }
}

// The shard count does not change the result: 1, 2 and 3 shards, per-field tables.
TEST_F(CtrJobTest, ShardCountDoesNotChangeTheResult) {
  const CtrRun one = train(1, 3, kBatch, "adagrad", true);
  for (int shards : {2, 3}) {
    const CtrRun p = train(shards, 3, kBatch, "adagrad", true);
    EXPECT_LE(relative_difference(one.dense, p.dense), 1e-6) << shards;
    EXPECT_LE(rows_difference(one, p), 1e-6) << shards;
    EXPECT_EQ(one.table_rows, p.table_rows) << shards;
  }
}

// The chief reports the test AUC and log loss; async trains too.
TEST_F(CtrJobTest, AsyncTrainsAndTheSummaryHasTheAuc) {
  const CtrRun run = train(2, 2, kBatch, "adagrad", false, {"--mode", "async"});
  EXPECT_NE(run.logs.find("test_auc="), std::string::npos) << run.logs;
  EXPECT_NE(run.logs.find("test_logloss="), std::string::npos) << run.logs;
  EXPECT_NE(run.logs.find("embedding rows"), std::string::npos) << run.logs;
}

}  // namespace
}  // namespace pstrain::test
