// CTR jobs end to end (docs/sparse.md, "Training a CTR model"): real PS and worker processes on
// Criteo-format data with --embedding-dim, the tables on the PS shards. The mirrored contract
// over dense and sparse parameters, for every table optimizer and shard count; checkpoints,
// resume on another shard count, kill -9 under launch.sh; admission, expiry, the memory bound;
// async and the AUC on the summary line.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "ps/sparse/embedding_table.h"
#include "shared/checkpoint/checkpoint.h"
#include "test_util/build_paths.h"
#include "test_util/ctr_data.h"
#include "test_util/idx_writer.h"
#include "test_util/launched.h"
#include "test_util/params.h"
#include "test_util/process.h"
#include "worker/data/criteo.h"
#include "worker/sparse/embedding_input.h"

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
    write_criteo(*dir_ + "/train-lists.tsv", kRecords, 0, true);
    write_criteo(*dir_ + "/test-lists.tsv", 80, 100000, true);
    setenv("PSTRAIN_BUILD_DIR", std::filesystem::path(PSTRAIN_PS_BIN).parent_path().c_str(), 1);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }

  // The job's flags: a CTR model of kDim-float rows over `batch`-record worker batches.
  static std::vector<std::string> flags(int batch, const std::string& table_optimizer, bool per_field,
                                        const std::string& table_lr, int steps, const std::string& cache) {
    return {"--train-data", *dir_ + "/train.tsv", "--test-data", *dir_ + "/test.tsv", "--cache-dir", cache,
            "--embedding-dim", std::to_string(kDim), "--embedding-tables", per_field ? "per-field" : "shared",
            "--embedding-optimizer", table_optimizer, "--embedding-lr", table_lr, "--model",
            "dense 16, relu, dense 2", "--optimizer", "sgd", "--lr", "0.1", "--batch-size", std::to_string(batch),
            "--steps", std::to_string(steps), "--epochs", "100", "--seed", "7", "--timeout", "30"};
  }

  // Trains `steps` steps of a CTR model and returns its dense parameters and its rows.
  static CtrRun train(int num_ps, int num_workers, int batch, const std::string& table_optimizer, bool per_field,
                      const std::vector<std::string>& more = {}, const std::string& table_lr = "0.1",
                      int steps = kSteps, bool expect_ok = true) {
    const std::string tag = table_optimizer + "-s" + std::to_string(num_ps) + "-n" + std::to_string(num_workers);
    const std::string dir = make_temp_dir("ctr-" + tag);
    Job job;
    job.num_ps = num_ps;
    job.num_workers = num_workers;
    job.dir = dir;
    job.args = flags(batch, table_optimizer, per_field, table_lr, steps, dir);
    job.args.insert(job.args.end(), {"--log-every", "5", "--save-params", dir + "/params"});
    for (const std::string& flag : more) {  // a flag of `more` replaces the default's value
      const auto at = std::find(job.args.begin(), job.args.end(), flag);
      if (flag.rfind("--", 0) == 0 && at != job.args.end()) job.args.erase(at, at + 2);
    }
    job.args.insert(job.args.end(), more.begin(), more.end());
    // With --global-batch or --worker-batch the micro-batch follows from --accum-steps.
    if (std::find(more.begin(), more.end(), "--global-batch") != more.end() ||
        std::find(more.begin(), more.end(), "--worker-batch") != more.end()) {
      const auto at = std::find(job.args.begin(), job.args.end(), "--batch-size");
      job.args.erase(at, at + 2);
    }
    const JobResult result = expect_ok ? run_job(job) : run_job_stopping_servers(job);
    EXPECT_EQ(result.ok(), expect_ok) << result.logs;
    CtrRun run;
    const bool lists = std::find(more.begin(), more.end(), lists_data()) != more.end();
    if (result.ok()) run = saved(dir + "/params", table_optimizer, per_field, lists);
    run.logs = result.logs;
    std::filesystem::remove_all(dir);
    return run;
  }

  // The training data whose last fields list several IDs (ctr_keys), and a job's flags for it.
  static std::string lists_data() { return *dir_ + "/train-lists.tsv"; }
  static std::vector<std::string> lists_flags(const std::string& pool) {
    return {"--train-data", lists_data(), "--test-data", *dir_ + "/test-lists.tsv", "--embedding-pool", pool};
  }

  // What a job saved with --save-params DIR: its dense parameters, and the row of every key the
  // training data (`lists`: lists_data()) has, in record, field and list order (repeats included).
  static CtrRun saved(const std::string& dir, const std::string& table_optimizer, bool per_field, bool lists = false) {
    CtrRun run;
    run.dense = load_saved_params(dir);
    std::vector<std::string> names;
    if (per_field) {
      for (int f = 1; f <= 26; ++f) names.push_back("C" + std::to_string(f));
    } else {
      names = {"ids"};
    }
    const auto tables = load_tables(dir, table_optimizer, names, kDim);
    for (const auto& [name, table] : tables) run.table_rows += table->stats().rows;
    for (int r = 0; r < kRecords; ++r) {
      for (int f = 0; f < 26; ++f) {
        for (const uint64_t key : ctr_keys(r, f, per_field, lists)) {
          std::vector<float> row(kDim);
          tables.at(per_field ? names[static_cast<size_t>(f)] : names[0])->lookup(&key, 1, row.data());
          run.rows.insert(run.rows.end(), row.begin(), row.end());
        }
      }
    }
    return run;
  }

  // launch/launch.sh running a CTR job (`steps` steps, adam tables, --save-params
  // DIR/NAME-params, log DIR/NAME.log) with the launcher's flags `counts` (--num-ps 2
  // --num-workers 3 unless given); `during` acts on it while it runs.
  // launch()'s `during` for the kill tests: once job `name` reaches step `at`, kill -9 its process
  // `victim` (ps1, w0, ...), whose pid goes to *killed.
  static std::function<void(pid_t, const std::string&)> kill_at_step(const std::string& name, const std::string& victim,
                                                                    int at, pid_t* killed) {
    return [=](pid_t launcher, const std::string& run_dir) {
      ASSERT_TRUE(wait_for_step(launcher, run_dir, at)) << read_file(*dir_ + "/" + name + ".log");
      *killed = pid_of(run_dir, victim);
      ASSERT_GT(*killed, 0);
      ASSERT_EQ(kill(*killed, SIGKILL), 0);
    };
  }
  static ExitStatus launch(const std::string& name, int steps, const std::vector<std::string>& counts,
                           const std::function<void(pid_t, const std::string&)>& during,
                           const std::vector<std::string>& job = {}) {
    std::vector<std::string> argv = {"/bin/bash", PSTRAIN_LAUNCH_SH, "--no-setup", "--run-dir", *dir_ + "/" + name};
    if (std::find(counts.begin(), counts.end(), "--num-ps") == counts.end()) {
      argv.insert(argv.end(), {"--num-ps", "2", "--num-workers", "3"});
    }
    argv.insert(argv.end(), counts.begin(), counts.end());
    argv.push_back("--");
    for (const std::string& f : flags(kBatch, "adam", false, "0.1", steps, *dir_)) argv.push_back(f);
    argv.insert(argv.end(), {"--log-every", "1", "--save-params", *dir_ + "/" + name + "-params"});
    argv.insert(argv.end(), job.begin(), job.end());
    const pid_t launcher = spawn(argv, *dir_ + "/" + name + ".log");
    if (during) during(launcher, *dir_ + "/" + name);
    return wait_for(launcher, 180);
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

// Gradient accumulation: 3 workers whose step of 8 records is 3 micro-batches (of 3, 3 and 2)
// on 2 shards equal one worker of batch 24, dense parameters and rows, for every table
// optimizer: a worker pulls the rows of its step's IDs once and pushes one gradient per ID summed
// over its micro-batches. One worker of 4 micro-batches of 6 equals it too.
TEST_F(CtrJobTest, GradientAccumulationKeepsTheMirroredContract) {
  for (const std::string optimizer : {"sgd", "adagrad", "adam", "ftrl"}) {
    const CtrRun reference = train(1, 1, 3 * kBatch, optimizer, false);
    ASSERT_FALSE(reference.rows.empty()) << optimizer;
    const CtrRun p = train(2, 3, kBatch, optimizer, false, {"--global-batch", "24", "--accum-steps", "3"});
    ASSERT_FALSE(p.rows.empty()) << optimizer << p.logs;
    EXPECT_NE(p.logs.find("gradient accumulation: 3 micro-batches of up to 3 = 8 samples a step"), std::string::npos)
        << p.logs;
    const double dense = relative_difference(reference.dense, p.dense);
    const double sparse = rows_difference(reference, p);
    EXPECT_LE(dense, 1e-5) << optimizer;
    EXPECT_LE(sparse, 1e-5) << optimizer;
    EXPECT_EQ(reference.table_rows, p.table_rows) << optimizer;
    std::printf("table optimizer %s, N=3 S=2 of 3 micro-batches vs N=1: dense %.3g, rows %.3g (max |difference| / "
                "max |value|)\n", optimizer.c_str(), dense, sparse);
    if (optimizer != "adam") continue;
    const CtrRun one = train(1, 1, 3 * kBatch, optimizer, false, {"--global-batch", "24", "--accum-steps", "4"});
    ASSERT_FALSE(one.rows.empty()) << one.logs;
    EXPECT_NE(one.logs.find("gradient accumulation: 4 micro-batches of up to 6 = 24 samples a step"), std::string::npos)
        << one.logs;
    const double one_dense = relative_difference(reference.dense, one.dense), one_rows = rows_difference(reference, one);
    EXPECT_LE(one_dense, 1e-5);
    EXPECT_LE(one_rows, 1e-5);
    std::printf("table optimizer adam, N=1 of 4 micro-batches vs N=1: dense %.3g, rows %.3g\n", one_dense, one_rows);
  }
}

// The same under a schedule (issue 44): cosine after 3 warm-up steps, Adam on the dense
// variables and on the tables (whose learning rate follows the same schedule), 3 workers of 2
// micro-batches and one worker of 4 against one worker of the whole batch of 24.
TEST_F(CtrJobTest, GradientAccumulationUnderWarmupAndCosineKeepsTheMirroredContract) {
  const std::vector<std::string> schedule = {"--optimizer", "adam", "--lr", "0.01", "--lr-schedule", "cosine",
                                             "--warmup-steps", "3"};
  const auto with = [&](std::vector<std::string> more) {
    more.insert(more.end(), schedule.begin(), schedule.end());
    return more;
  };
  const CtrRun reference = train(1, 1, 3 * kBatch, "adam", false, with({}));
  ASSERT_FALSE(reference.rows.empty()) << reference.logs;
  for (const auto& [workers, accum] : {std::pair{3, "2"}, std::pair{1, "4"}}) {
    const CtrRun p = train(2, workers, kBatch, "adam", false, with({"--global-batch", "24", "--accum-steps", accum}));
    ASSERT_FALSE(p.rows.empty()) << p.logs;
    EXPECT_NE(p.logs.find("gradient accumulation: "), std::string::npos) << p.logs;
    const double dense = relative_difference(reference.dense, p.dense), rows = rows_difference(reference, p);
    EXPECT_LE(dense, 1e-4) << workers << " workers, --accum-steps " << accum;
    EXPECT_LE(rows, 1e-4) << workers << " workers, --accum-steps " << accum;
    std::printf("adam, warm-up and cosine, N=%d S=2 of %s micro-batches vs N=1: dense %.3g, rows %.3g\n", workers,
                accum, dense, rows);
  }
}

// Fields listing several IDs (the last 6: 1 to 3 IDs, some repeated within a field) under mean
// pooling: 3 workers of batch 8 on 2 shards equal one worker of batch 24, dense parameters and
// every ID's row, for three table optimizers. Sum pooling of the same data trains other rows.
TEST_F(CtrJobTest, MultiValuedFieldsWithMeanPoolingKeepTheMirroredContract) {
  CtrRun adagrad_mean;
  for (const std::string optimizer : {"sgd", "adagrad", "ftrl"}) {
    const CtrRun reference = train(1, 1, 3 * kBatch, optimizer, false, lists_flags("mean"));
    ASSERT_FALSE(reference.rows.empty()) << optimizer << reference.logs;
    EXPECT_NE(reference.logs.find("mean pooling of a field's IDs"), std::string::npos) << reference.logs;
    EXPECT_GT(reference.rows.size(), static_cast<size_t>(kRecords * 26 * kDim));  // lists' extra IDs
    const CtrRun p = train(2, 3, kBatch, optimizer, false, lists_flags("mean"));
    const double dense = relative_difference(reference.dense, p.dense);
    const double sparse = rows_difference(reference, p);
    EXPECT_LE(dense, 1e-5) << optimizer;
    EXPECT_LE(sparse, 1e-5) << optimizer;
    EXPECT_EQ(reference.table_rows, p.table_rows) << optimizer;
    std::printf("lists, mean pooling, table optimizer %s, N=3 S=2 vs N=1: dense %.3g, rows %.3g, %zu rows\n",
                optimizer.c_str(), dense, sparse, p.table_rows);
    if (optimizer == "adagrad") adagrad_mean = reference;
  }
  const CtrRun sum = train(1, 1, 3 * kBatch, "adagrad", false, lists_flags("sum"));
  ASSERT_FALSE(sum.rows.empty()) << sum.logs;
  EXPECT_GT(rows_difference(adagrad_mean, sum), 1e-4) << "sum and mean pooling trained the same rows";
}

// Data of one ID per field trains to the same bits under either pool.
TEST_F(CtrJobTest, OneIdPerFieldTrainsTheSameBitsUnderSumAndMean) {
  const CtrRun sum = train(2, 2, kBatch, "adagrad", false);
  const CtrRun mean = train(2, 2, kBatch, "adagrad", false, {"--embedding-pool", "mean"});
  ASSERT_FALSE(mean.rows.empty()) << mean.logs;
  EXPECT_EQ(rows_difference(sum, mean), 0.0);
  EXPECT_TRUE(bit_identical(sum.dense, mean.dense));
}

// Backup workers with tables (docs/sparse.md, "Backup workers"): 3 workers on 2 shards with
// --backup-workers 1, each worker's pushes delayed at random (--push-jitter-ms: up to 4 ms, so
// the late worker changes from step to step; worker 2's up to 8 ms, the slowest). The job
// completes and the rows train, over TCP and over the same-host local channel (the dense pushes'
// headers there, the rows on ZeroMQ: in either order at the PS). On each shard the tables
// dropped as many pushes as the dense slice did: every step's tables took the same workers as
// its dense chunks (the exact sums: BackupSparseTest). Over the local channel too: a late
// worker's last SPARSE_PUSH (ZeroMQ) reaches the PS before its DONE (the local channel), which
// the PS acknowledges only once every message it counts is in (issue 50).
TEST_F(CtrJobTest, BackupWorkersDropTheSamePushesFromTablesAndDenseSlices) {
  constexpr int kBackupSteps = 100;
  // The figure after `label` on the shard's last line (-1: none).
  const auto counter = [](const std::string& log, const std::string& label) -> long {
    const size_t at = log.rfind(label);
    return at == std::string::npos ? -1 : std::stol(log.substr(at + label.size()));
  };
  const CtrRun untrained = train(2, 3, kBatch, "adagrad", false, {}, "1e-30", kBackupSteps);
  for (const bool local : {false, true}) {
    const TempDir dir("ctr-backup");
    Job job;
    job.num_ps = 2;
    job.num_workers = 3;
    job.dir = dir.path;
    job.ipc = local;
    job.args = flags(kBatch, "adagrad", false, "0.1", kBackupSteps, dir.path);
    job.args.insert(job.args.end(), {"--backup-workers", "1", "--log-every", "10", "--save-params", dir.path + "/params"});
    job.worker_args = {{0, {"--push-jitter-ms", "4"}}, {1, {"--push-jitter-ms", "4"}}, {2, {"--push-jitter-ms", "8"}}};
    const JobResult result = run_job(job);
    ASSERT_TRUE(result.ok()) << result.logs;
    const CtrRun run = saved(dir.path + "/params", "adagrad", false);
    EXPECT_GT(rows_difference(run, untrained), 1e-3) << "the rows did not move";
    for (int s = 0; s < 2; ++s) {
      const std::string log = read_file(dir.path + "/ps" + std::to_string(s) + ".log");
      EXPECT_NE(log.find("tables at version " + std::to_string(kBackupSteps)), std::string::npos) << log;
      const long dense = counter(log, "; late pushes dropped: "), sparse = counter(log, "; late sparse pushes dropped: ");
      EXPECT_GT(dense, 0) << log;
      EXPECT_EQ(dense, sparse) << log;
      std::printf("%s, ps%d: late pushes dropped in %d steps: dense %ld (first chunk), tables %ld\n",
                  local ? "local channel" : "tcp", s, kBackupSteps, dense, sparse);
    }
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

// The figure X of the first (or the `last`) "<what>: X" in a job's logs (0 without it).
long figure_after(const std::string& logs, const std::string& what, bool last = false) {
  const size_t at = last ? logs.rfind(what + ": ") : logs.find(what + ": ");
  return at == std::string::npos ? 0 : std::stol(logs.substr(at + what.size() + 2));
}

// The sparse messages in parts (docs/wire_protocol.md, "Sparse tables"): with --chunk-kib 1 every
// step's SPARSE_PUSH and SPARSE_PULL to a shard travel in many parts of about 1 KiB, which the PS
// and the workers put together again: the job ends with the dense parameters and rows of the
// same job in whole messages, bit for bit.
TEST_F(CtrJobTest, SparseMessagesInManyPartsGiveTheSameBits) {
  constexpr int kBigBatch = 64;  // about 14 KiB of gradients a push
  const CtrRun whole = train(2, 3, kBigBatch, "adam", false);
  const CtrRun parts = train(2, 3, kBigBatch, "adam", false, {"--chunk-kib", "1"});
  ASSERT_FALSE(parts.rows.empty()) << parts.logs;
  EXPECT_TRUE(bit_identical(whole.dense, parts.dense)) << relative_difference(whole.dense, parts.dense);
  EXPECT_EQ(rows_difference(whole, parts), 0.0);
  EXPECT_EQ(whole.table_rows, parts.table_rows);
  EXPECT_EQ(whole.logs.find("in parts"), std::string::npos);  // 1 MiB chunks: every message whole
  const long pushes = figure_after(parts.logs, "sparse pushes in parts");
  const long pulls = figure_after(parts.logs, "sparse pulls in parts");
  EXPECT_EQ(pushes, 3 * kSteps) << parts.logs;  // on ps0 (the first line): every worker's every push
  EXPECT_GE(pulls, 3 * kSteps) << parts.logs;   // and pull (the chief's evaluations' too)
  const size_t at = parts.logs.find("sparse pushes in parts: ");
  ASSERT_NE(at, std::string::npos);
  const long push_parts = std::stol(parts.logs.substr(parts.logs.find('(', at) + 1));
  EXPECT_GE(push_parts, 5 * pushes) << parts.logs;  // many parts each
  std::printf("--chunk-kib 1: %ld pushes in %ld parts, %ld pulls in parts; dense and rows bit-identical\n", pushes,
              push_parts, pulls);
}

// Pushes in parts count once their last part is in: with backup workers (a worker's push whose
// parts had begun when its step was applied without it is dropped and counted once, as its
// dense push is) and in async and ssp (each push applied at its last part), the jobs complete
// and train with --chunk-kib 1.
TEST_F(CtrJobTest, SparseMessagesInPartsUnderBackupWorkersAsyncAndSsp) {
  constexpr int kBigBatch = 64;
  constexpr int kBackupSteps = 40;
  const TempDir dir("ctr-backup-parts");
  Job job;
  job.num_ps = 2;
  job.num_workers = 3;
  job.dir = dir.path;
  job.args = flags(kBigBatch, "adagrad", false, "0.1", kBackupSteps, dir.path);
  job.args.insert(job.args.end(), {"--backup-workers", "1", "--chunk-kib", "1"});
  job.worker_args = {{0, {"--push-jitter-ms", "4"}}, {1, {"--push-jitter-ms", "4"}}, {2, {"--push-jitter-ms", "8"}}};
  const JobResult result = run_job(job);
  ASSERT_TRUE(result.ok()) << result.logs;
  for (int s = 0; s < 2; ++s) {
    const std::string log = read_file(dir.path + "/ps" + std::to_string(s) + ".log");
    EXPECT_NE(log.find("tables at version " + std::to_string(kBackupSteps)), std::string::npos) << log;
    EXPECT_GT(figure_after(log, "sparse pushes in parts", true), 0) << log;
    const long dense = figure_after(log, "; late pushes dropped", true);
    const long sparse = figure_after(log, "late sparse pushes dropped", true);
    EXPECT_GT(dense, 0) << log;
    EXPECT_EQ(dense, sparse) << log;
    std::printf("backup workers, parts, ps%d: late pushes dropped in %d steps: dense %ld, tables %ld\n", s,
                kBackupSteps, dense, sparse);
  }
  const CtrRun untrained = train(2, 2, kBigBatch, "adagrad", false, {}, "1e-30");
  for (const std::string mode : {"async", "ssp"}) {
    const CtrRun run = train(2, 2, kBigBatch, "adagrad", false, {"--mode", mode, "--chunk-kib", "1"});
    ASSERT_FALSE(run.rows.empty()) << mode << run.logs;
    EXPECT_GT(figure_after(run.logs, "sparse pushes in parts"), 0) << run.logs;
    EXPECT_GT(rows_difference(run, untrained), 1e-3) << mode;
  }
}

// Checkpoints hold the tables: a job stopped after 10 of 20 steps on 2 shards and resumed on 3
// ends with the uninterrupted job's dense parameters and rows, bit for bit.
TEST_F(CtrJobTest, ResumeOnAnotherShardCountGivesTheUninterruptedResult) {
  TempDir ckpt("ctr-ckpt");
  const std::vector<std::string> every = {"--checkpoint-dir", ckpt.path, "--checkpoint-every", "5"};
  const CtrRun uninterrupted = train(2, 2, kBatch, "adam", false);
  const CtrRun first = train(2, 2, kBatch, "adam", false, every, "0.1", 10);
  ASSERT_FALSE(first.rows.empty());
  std::vector<std::string> resume = every;
  resume.push_back("--resume");
  const CtrRun resumed = train(3, 2, kBatch, "adam", false, resume);
  ASSERT_FALSE(resumed.rows.empty()) << resumed.logs;
  EXPECT_NE(resumed.logs.find("--resume: from checkpoint"), std::string::npos) << resumed.logs;
  EXPECT_GT(rows_difference(uninterrupted, first), 1e-4);  // the first half is not the whole
  EXPECT_EQ(rows_difference(uninterrupted, resumed), 0.0);
  EXPECT_TRUE(bit_identical(uninterrupted.dense, resumed.dense)) << relative_difference(uninterrupted.dense, resumed.dense);
  EXPECT_EQ(uninterrupted.table_rows, resumed.table_rows);
}

// The issue-50 fault: one weight byte of a table flipped inside the newest checkpoint's
// shard1of2.ckpt, the file's trailing CRC-32 and its MANIFEST line recomputed, so that only the
// table's own CRC-32C catches it. --resume passes that checkpoint over naming the file and the
// version (before, every HELLO was refused and the job stopped), resumes from the one before and
// ends with the uninterrupted job's dense parameters and rows, bit for bit.
TEST_F(CtrJobTest, ResumePassesOverADamagedTableInAConsistentShardFile) {
  TempDir ckpt("ctr-ckpt-table");
  const std::vector<std::string> every = {"--checkpoint-dir", ckpt.path, "--checkpoint-every", "5"};
  const CtrRun uninterrupted = train(2, 2, kBatch, "adam", false);
  ASSERT_FALSE(train(2, 2, kBatch, "adam", false, every, "0.1", 10).rows.empty());
  const std::string v10 = checkpoint_version_dir(ckpt.path, 10), path = v10 + "/shard1of2.ckpt";
  std::string bytes = read_file(path);
  const size_t table = bytes.find("PSEMBTBL");
  ASSERT_NE(table, std::string::npos);
  const auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  // magic, format, id, dim, slots, name, optimizer, rows, sightings; a row's id, step, updates
  const size_t name_at = table + 8 + 4 + 4 + 8 + 4, optimizer_at = name_at + 4 + u32(name_at);
  const size_t weight = optimizer_at + 4 + u32(optimizer_at) + 8 + 8 + 3 * 8;
  ASSERT_LT(weight + 4, bytes.size() - 4);
  bytes[weight] = static_cast<char>(bytes[weight] ^ 0x01);  // the lowest mantissa bit: still finite
  const uint32_t crc = file_crc(bytes);
  std::memcpy(&bytes[bytes.size() - 4], &crc, 4);
  {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  CheckpointManifest m;
  std::string error;
  ASSERT_TRUE(decode_manifest(read_file(v10 + "/MANIFEST"), &m, &error)) << error;
  for (CheckpointManifest::File& f : m.shards) {
    if (f.name == "shard1of2.ckpt") f.crc = crc;
  }
  {
    std::ofstream(v10 + "/MANIFEST", std::ios::binary | std::ios::trunc) << encode_manifest(m);
  }
  std::vector<std::string> resume = every;
  resume.push_back("--resume");
  const CtrRun resumed = train(2, 2, kBatch, "adam", false, resume);
  ASSERT_FALSE(resumed.rows.empty()) << resumed.logs;
  for (const char* ps : {"ps0", "ps1"}) {
    EXPECT_NE(resumed.logs.find(std::string(ps) + ": --resume: skipping checkpoint " + v10 +
                                ": shard1of2.ckpt: embedding table 1 of 1 in it: checksum mismatch (corrupted)"),
              std::string::npos)
        << resumed.logs;
  }
  EXPECT_NE(resumed.logs.find("--resume: from checkpoint " + checkpoint_version_dir(ckpt.path, 5)), std::string::npos)
      << resumed.logs;
  EXPECT_EQ(rows_difference(uninterrupted, resumed), 0.0);
  EXPECT_TRUE(bit_identical(uninterrupted.dense, resumed.dense)) << relative_difference(uninterrupted.dense, resumed.dense);
  EXPECT_EQ(uninterrupted.table_rows, resumed.table_rows);
}

// A stopped job has no result (docs/checkpoints.md, "Stopping"): SIGTERM to the launcher of a
// checkpointing CTR job whose --save-params directory holds an earlier job's result leaves every
// file there as it was, its tables included (before, the PS shards wrote the stopped run's
// tables beside the earlier dense files: a model no run produced).
TEST_F(CtrJobTest, AStoppedJobLeavesTheSaveParamsDirectoryUntouched) {
  ASSERT_TRUE(launch("stop-earlier", kSteps, {}, nullptr).ok()) << read_file(*dir_ + "/stop-earlier.log");
  const std::string params = *dir_ + "/stopped-params";
  std::filesystem::copy(*dir_ + "/stop-earlier-params", params, std::filesystem::copy_options::recursive);
  std::map<std::string, std::string> before;
  for (const auto& e : std::filesystem::recursive_directory_iterator(params)) {
    if (e.is_regular_file()) before[e.path().string()] = read_file(e.path().string());
  }
  ASSERT_TRUE(before.count(params + "/embeddings/ids.shard1-of-2") == 1) << before.size();
  const std::string ckpt = *dir_ + "/stopped-ckpt";
  std::filesystem::create_directories(ckpt);
  // w2 paused while the launcher passes SIGTERM on, so that the job cannot end first.
  const auto stop = [&](pid_t launcher, const std::string& run_dir) {
    ASSERT_TRUE(wait_for_step(launcher, run_dir, 5)) << read_file(*dir_ + "/stopped.log");
    const pid_t w2 = pid_of(run_dir, "w2");
    ASSERT_GT(w2, 0);
    ASSERT_EQ(kill(w2, SIGSTOP), 0);
    const bool sent = kill(launcher, SIGTERM) == 0;
    const bool passed_on =
        sent && wait_for_text(*dir_ + "/stopped.log", "received SIGTERM; w0 writes a final checkpoint", 30);
    ASSERT_EQ(kill(w2, SIGCONT), 0);
    ASSERT_TRUE(passed_on) << read_file(*dir_ + "/stopped.log");
  };
  const ExitStatus status =
      launch("stopped", 600, {}, stop, {"--checkpoint-dir", ckpt, "--checkpoint-every", "100"});
  const std::string log = read_file(*dir_ + "/stopped.log");
  EXPECT_EQ(status.code, 143) << log;
  EXPECT_NE(log.find("stopped after the final checkpoint"), std::string::npos) << log;
  EXPECT_NE(log.find("ps1: the job stopped before its end: its tables are not written to " + params), std::string::npos)
      << log;
  std::map<std::string, std::string> after;
  for (const auto& e : std::filesystem::recursive_directory_iterator(params)) {
    if (e.is_regular_file()) after[e.path().string()] = read_file(e.path().string());
  }
  EXPECT_EQ(after.size(), before.size());
  for (const auto& [path, bytes] : before) EXPECT_TRUE(after[path] == bytes) << path << " changed";
}

// A checkpoint of a job without tables is refused by one with them, naming the difference.
TEST_F(CtrJobTest, ResumeRefusesACheckpointOfOtherEmbeddings) {
  TempDir ckpt("ctr-ckpt-other");
  const std::vector<std::string> every = {"--checkpoint-dir", ckpt.path, "--checkpoint-every", "5"};
  ASSERT_FALSE(train(1, 1, kBatch, "adagrad", false, every, "0.1", 10).rows.empty());
  std::vector<std::string> resume = every;
  resume.push_back("--resume");
  const CtrRun other = train(1, 1, kBatch, "sgd", false, resume, "0.1", kSteps, false);
  EXPECT_TRUE(other.rows.empty());
  EXPECT_NE(other.logs.find("embeddings dim 4 tables shared optimizer adagrad"), std::string::npos) << other.logs;
}

// The pool is in the fingerprint: a checkpoint of a mean-pooling job is refused by a sum-pooling
// one (the default), naming the difference.
TEST_F(CtrJobTest, ResumeRefusesACheckpointOfAnotherPool) {
  TempDir ckpt("ctr-ckpt-pool");
  std::vector<std::string> every = lists_flags("mean");
  every.insert(every.end(), {"--checkpoint-dir", ckpt.path, "--checkpoint-every", "5"});
  ASSERT_FALSE(train(1, 1, kBatch, "adagrad", false, every, "0.1", 10).rows.empty());
  std::vector<std::string> resume = lists_flags("sum");
  resume.insert(resume.end(), {"--checkpoint-dir", ckpt.path, "--checkpoint-every", "5", "--resume"});
  const CtrRun other = train(1, 1, kBatch, "adagrad", false, resume, "0.1", kSteps, false);
  EXPECT_TRUE(other.rows.empty());
  EXPECT_NE(other.logs.find("expiry 0 pool mean"), std::string::npos) << other.logs;
}

// kill -9 of a worker (four times), then of a PS shard, of a CTR job under launch.sh
// --max-restarts 1 (the PS's with checkpoints every 20 steps): the worker is replaced and redoes
// its step (the step whose rows a shard lacks, reading the rows as they were before it where a
// shard has them), the job restarts from its checkpoint, and every run ends with the
// uninterrupted job's parameters and rows, bit for bit.
TEST_F(CtrJobTest, KilledWorkerAndServerUnderTheLauncherLoseNothing) {
  constexpr int kJobSteps = 600;
  ASSERT_TRUE(launch("uninterrupted", kJobSteps, {}, nullptr).ok()) << read_file(*dir_ + "/uninterrupted.log");
  const CtrRun want = saved(*dir_ + "/uninterrupted-params", "adam", false);
  std::mt19937 rng(1);
  // Workers die at four random steps (each between a step's pushes to the shards, or after them,
  // or in its wait: wherever the signal lands), a PS at one.
  for (const std::string victim : {"w1", "w2", "w0", "w1", "ps1"}) {
    const int at = 40 + static_cast<int>(rng() % 100);
    const std::string name = "killed-" + victim + "-" + std::to_string(at);
    std::vector<std::string> job;
    if (victim == "ps1") {
      const std::string ckpt = *dir_ + "/ckpt-" + name;
      std::filesystem::create_directories(ckpt);
      job = {"--checkpoint-dir", ckpt, "--checkpoint-every", "20"};
    }
    pid_t killed = -1;
    const ExitStatus status = launch(name, kJobSteps, {"--max-restarts", "1"}, kill_at_step(name, victim, at, &killed), job);
    const std::string log = read_file(*dir_ + "/" + name + ".log");
    ASSERT_TRUE(status.ok()) << log;
    EXPECT_NE(log.find(victim + " (pid " + std::to_string(killed) + ") died: killed by signal 9"), std::string::npos)
        << log;
    const CtrRun got = saved(*dir_ + "/" + name + "-params", "adam", false);
    EXPECT_TRUE(bit_identical(want.dense, got.dense)) << victim << ": " << relative_difference(want.dense, got.dense);
    EXPECT_EQ(rows_difference(want, got), 0.0) << victim;
    EXPECT_EQ(want.table_rows, got.table_rows) << victim;
    std::printf("%s killed after step %d: dense %.3g, rows %.3g (max |difference| / max |value|)\n", victim.c_str(),
                at, relative_difference(want.dense, got.dense), rows_difference(want, got));
  }
}

// Admission and expiry: with --embedding-min-count 3 fewer rows are made than IDs are seen, with
// --embedding-expiry 4 rows unused for 4 steps are evicted; the PS's last line counts both. A
// --max-shard-mib too small for the rows stops the job naming the bound before memory runs out.
// A replacement redoes its step's pushes in parts from part 0 (its predecessor's parts, if it died
// among them, are dropped): with --chunk-kib 1 (a step's push to a shard in about three parts),
// workers killed at random steps lose nothing, and the job ends with the bits of the
// uninterrupted job in whole messages.
TEST_F(CtrJobTest, KilledWorkersWithPushesInPartsLoseNothing) {
  constexpr int kJobSteps = 600;
  ASSERT_TRUE(launch("whole", kJobSteps, {}, nullptr).ok()) << read_file(*dir_ + "/whole.log");
  const CtrRun want = saved(*dir_ + "/whole-params", "adam", false);
  std::mt19937 rng(2);
  for (const std::string victim : {"w1", "w0", "w2"}) {
    const int at = 40 + static_cast<int>(rng() % 100);
    const std::string name = "parts-killed-" + victim + "-" + std::to_string(at);
    pid_t killed = -1;
    const ExitStatus status = launch(name, kJobSteps, {"--max-restarts", "1"}, kill_at_step(name, victim, at, &killed),
                                     {"--chunk-kib", "1"});
    const std::string log = read_file(*dir_ + "/" + name + ".log");
    ASSERT_TRUE(status.ok()) << log;
    EXPECT_NE(log.find(victim + " (pid " + std::to_string(killed) + ") died: killed by signal 9"), std::string::npos)
        << log;
    EXPECT_NE(log.find("sparse pushes in parts"), std::string::npos) << log;
    const CtrRun got = saved(*dir_ + "/" + name + "-params", "adam", false);
    EXPECT_TRUE(bit_identical(want.dense, got.dense)) << victim << ": " << relative_difference(want.dense, got.dense);
    EXPECT_EQ(rows_difference(want, got), 0.0) << victim;
    EXPECT_EQ(want.table_rows, got.table_rows) << victim;
  }
}

TEST_F(CtrJobTest, AdmissionExpiryAndTheMemoryBound) {
  const CtrRun all = train(1, 1, kBatch, "adagrad", false);
  const CtrRun admitted = train(1, 1, kBatch, "adagrad", false, {"--embedding-min-count", "12"});
  ASSERT_FALSE(admitted.rows.empty());
  EXPECT_LT(admitted.table_rows, all.table_rows);
  EXPECT_GT(admitted.table_rows, 0u);
  std::printf("rows: %zu of all %zu with --embedding-min-count 12\n", admitted.table_rows, all.table_rows);
  const CtrRun expiring = train(1, 1, kBatch, "adagrad", false, {"--embedding-expiry", "4"});
  ASSERT_FALSE(expiring.rows.empty());
  EXPECT_LT(expiring.table_rows, all.table_rows);
  EXPECT_EQ(expiring.logs.find("evicted 0,"), std::string::npos) << expiring.logs;
  std::printf("rows: %zu of all %zu with --embedding-expiry 4\n", expiring.table_rows, all.table_rows);
  const CtrRun bounded = train(1, 1, kBatch, "adagrad", false, {"--max-shard-mib", "4", "--embedding-dim", "512", "--timeout", "3"},
                               "0.1", kSteps, false);
  EXPECT_NE(bounded.logs.find("over their bound of 0.7 MiB (--max-shard-mib, less the dense slice's state); "
                              "nothing was applied"),
            std::string::npos)
      << bounded.logs;
}

// Hybrid mode (--mode allreduce with tables): the dense parameters all-reduced among 3 workers,
// the tables on 2 PS shards; it equals the sync job (the same model on the same batches).
TEST_F(CtrJobTest, HybridModeEqualsSync) {
  const std::string log = *dir_ + "/hybrid.log";
  ASSERT_TRUE(launch("sync", kSteps, {}, nullptr).ok()) << read_file(*dir_ + "/sync.log");
  ASSERT_TRUE(launch("hybrid", kSteps, {}, nullptr, {"--mode", "allreduce"}).ok()) << read_file(log);
  EXPECT_NE(read_file(log).find("ring of 3 worker(s) ready"), std::string::npos) << read_file(log);
  EXPECT_NE(read_file(log).find("tables at version 20"), std::string::npos) << read_file(log);
  const CtrRun sync = saved(*dir_ + "/sync-params", "adam", false);
  const CtrRun hybrid = saved(*dir_ + "/hybrid-params", "adam", false);
  const double dense = relative_difference(sync.dense, hybrid.dense), rows = rows_difference(sync, hybrid);
  EXPECT_LE(dense, 1e-5);
  EXPECT_LE(rows, 1e-5);
  EXPECT_EQ(sync.table_rows, hybrid.table_rows);
  std::printf("hybrid vs sync, 2 shards, 3 workers: dense %.3g, rows %.3g (max |difference| / max |value|)\n", dense,
              rows);
}

// Hybrid mode's checkpoints: the chief's dense vector and every shard's tables of one step. A
// job stopped after 10 of 20 steps on 2 shards and resumed on 3 ends with the uninterrupted
// job's dense parameters and rows, bit for bit; so does one resumed from a directory whose newest
// checkpoint has a damaged table file (both sides pass over it and take step 5, not a mix).
TEST_F(CtrJobTest, HybridCheckpointsResumeOnAnotherShardCountWithNothingLost) {
  const std::string ckpt = *dir_ + "/hybrid-ckpt";
  // A constant schedule (launch.sh's default config has a cosine one): the 10-step job's first
  // half is the 20-step job's.
  const std::vector<std::string> every = {"--mode", "allreduce", "--lr-schedule", "constant", "--checkpoint-dir", ckpt,
                                          "--checkpoint-every", "5"};
  ASSERT_TRUE(launch("hybrid-whole", kSteps, {}, nullptr, {"--mode", "allreduce", "--lr-schedule", "constant"}).ok())
      << read_file(*dir_ + "/hybrid-whole.log");
  ASSERT_TRUE(launch("hybrid-first", 10, {}, nullptr, every).ok()) << read_file(*dir_ + "/hybrid-first.log");
  const std::string v10 = ckpt + "/v0000000010";
  for (const std::string file : {"shard0of3.ckpt", "shard1of3.ckpt", "shard2of3.ckpt", "MANIFEST"}) {
    EXPECT_TRUE(std::filesystem::exists(v10 + "/" + file)) << file;  // ps0's tables, ps1's, the dense vector
  }
  {  // pstrain-export of it: the tables --save-params wrote at the same step, byte for byte
    const std::string out = *dir_ + "/hybrid-exported", log_path = *dir_ + "/hybrid-export.log";
    ASSERT_TRUE(wait_for(spawn({PSTRAIN_EXPORT_BIN, ckpt, out}, log_path), 60).ok()) << read_file(log_path);
    EXPECT_NE(read_file(log_path).find("2 embedding table file(s)"), std::string::npos) << read_file(log_path);
    for (const char* name : {"ids.shard0-of-2", "ids.shard1-of-2"}) {
      const std::string a = read_file(out + "/embeddings/" + name);
      EXPECT_FALSE(a.empty()) << name;
      EXPECT_TRUE(a == read_file(*dir_ + "/hybrid-first-params/embeddings/" + name)) << name;
    }
  }
  const std::string damaged = *dir_ + "/hybrid-ckpt-damaged";
  std::filesystem::copy(ckpt, damaged, std::filesystem::copy_options::recursive);
  std::vector<std::string> resume = every;
  resume.push_back("--resume");
  ASSERT_TRUE(launch("hybrid-resumed", kSteps, {"--num-ps", "3", "--num-workers", "3"}, nullptr, resume).ok())
      << read_file(*dir_ + "/hybrid-resumed.log");
  const std::string log = read_file(*dir_ + "/hybrid-resumed.log");
  EXPECT_NE(log.find("--resume: from checkpoint " + v10), std::string::npos) << log;
  EXPECT_NE(log.find("resuming at step 10"), std::string::npos) << log;

  {  // a flipped byte in ps1's tables of step 10
    std::fstream f(damaged + "/v0000000010/shard1of3.ckpt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(100);
    f.write(&c, 1);
  }
  resume[5] = damaged;
  ASSERT_TRUE(launch("hybrid-damaged", kSteps, {}, nullptr, resume).ok()) << read_file(*dir_ + "/hybrid-damaged.log");
  const std::string damaged_log = read_file(*dir_ + "/hybrid-damaged.log");
  EXPECT_NE(damaged_log.find("--resume: from checkpoint " + damaged + "/v0000000005"), std::string::npos) << damaged_log;
  EXPECT_NE(damaged_log.find("w0: --resume: skipping checkpoint " + damaged + "/v0000000010: shard1of3.ckpt"),
            std::string::npos)
      << damaged_log;

  const CtrRun whole = saved(*dir_ + "/hybrid-whole-params", "adam", false);
  const CtrRun first = saved(*dir_ + "/hybrid-first-params", "adam", false);
  EXPECT_GT(rows_difference(whole, first), 1e-4);  // the first half is not the whole
  for (const std::string name : {"hybrid-resumed", "hybrid-damaged"}) {
    const CtrRun resumed = saved(*dir_ + "/" + name + "-params", "adam", false);
    EXPECT_TRUE(bit_identical(whole.dense, resumed.dense)) << name << ": " << relative_difference(whole.dense, resumed.dense);
    EXPECT_EQ(rows_difference(whole, resumed), 0.0) << name;
    EXPECT_EQ(whole.table_rows, resumed.table_rows) << name;
    std::printf("%s vs uninterrupted hybrid job: dense %.3g, rows %.3g (max |difference| / max |value|), %zu rows\n",
                name.c_str(), relative_difference(whole.dense, resumed.dense), rows_difference(whole, resumed),
                resumed.table_rows);
  }
}

// kill -9 of a worker, then of a PS shard, of a hybrid job under launch.sh --max-restarts 1 with
// checkpoints every 20 steps: the ring cannot take a replacement in, so either death restarts the
// whole job from its last complete checkpoint, and both runs end with the uninterrupted job's
// dense parameters and rows, bit for bit.
TEST_F(CtrJobTest, HybridKilledWorkerOrServerRestartsTheJobAndLosesNothing) {
  constexpr int kJobSteps = 300;
  ASSERT_TRUE(launch("hybrid-long", kJobSteps, {}, nullptr, {"--mode", "allreduce"}).ok())
      << read_file(*dir_ + "/hybrid-long.log");
  const CtrRun want = saved(*dir_ + "/hybrid-long-params", "adam", false);
  std::mt19937 rng(2);
  for (const std::string victim : {"w1", "ps1"}) {
    const int at = 30 + static_cast<int>(rng() % 60);
    const std::string name = "hybrid-killed-" + victim + "-" + std::to_string(at);
    const std::string ckpt = *dir_ + "/ckpt-" + name;
    std::filesystem::create_directories(ckpt);
    pid_t killed = -1;
    const ExitStatus status = launch(name, kJobSteps, {"--max-restarts", "1"}, kill_at_step(name, victim, at, &killed),
                                     {"--mode", "allreduce", "--checkpoint-dir", ckpt, "--checkpoint-every", "20"});
    const std::string log = read_file(*dir_ + "/" + name + ".log");
    ASSERT_TRUE(status.ok()) << log;
    EXPECT_NE(log.find(victim + " (pid " + std::to_string(killed) + ") died: killed by signal 9"), std::string::npos)
        << log;
    EXPECT_NE(log.find("restarting the whole job from its last complete checkpoint"), std::string::npos) << log;
    const CtrRun got = saved(*dir_ + "/" + name + "-params", "adam", false);
    EXPECT_TRUE(bit_identical(want.dense, got.dense)) << victim << ": " << relative_difference(want.dense, got.dense);
    EXPECT_EQ(rows_difference(want, got), 0.0) << victim;
    EXPECT_EQ(want.table_rows, got.table_rows) << victim;
    std::printf("hybrid, %s killed after step %d: dense %.3g, rows %.3g (max |difference| / max |value|)\n",
                victim.c_str(), at, relative_difference(want.dense, got.dense), rows_difference(want, got));
  }
}

// A model starting with the dot interaction ("dot 26 4": the 26 rows' 325 pairwise products):
// its input gradient reaches the tables (the rows move), and 3 workers of batch 8 on 2 shards
// still equal one worker of batch 24.
TEST_F(CtrJobTest, DotInteractionModelKeepsTheMirroredContract) {
  const std::vector<std::string> model = {"--model", "dot 26 4, dense 16, relu, dense 2"};
  const CtrRun reference = train(1, 1, 3 * kBatch, "adagrad", false, model);
  const CtrRun untrained = train(1, 1, 3 * kBatch, "adagrad", false, model, "1e-30");
  ASSERT_FALSE(reference.rows.empty()) << reference.logs;
  EXPECT_NE(reference.logs.find("dot 26 4 -> 442"), std::string::npos) << reference.logs;  // 13 + 104 + 325
  EXPECT_GT(rows_difference(reference, untrained), 1e-3) << "the rows did not move";
  const CtrRun p = train(2, 3, kBatch, "adagrad", false, model);
  EXPECT_LE(relative_difference(reference.dense, p.dense), 1e-5);
  EXPECT_LE(rows_difference(reference, p), 1e-5);
}

// A sigmoid output (--loss bce, one output: p(click)) with the tables written in the model
// ("embedding 4, ...", agreeing with the flags the helper gives): the rows move, 3 workers of batch
// 8 on 2 shards equal one worker of 24, and the chief reports the AUC, the log loss as the loss and
// the test accuracy, but no training accuracy (the steps count none for bce).
TEST_F(CtrJobTest, SigmoidOutputKeepsTheMirroredContract) {
  const std::vector<std::string> model = {"--model", "embedding 4, dense 16, relu, dense 1", "--loss", "bce"};
  const CtrRun reference = train(1, 1, 3 * kBatch, "adagrad", false, model);
  const CtrRun untrained = train(1, 1, 3 * kBatch, "adagrad", false, model, "1e-30");
  ASSERT_FALSE(reference.rows.empty()) << reference.logs;
  EXPECT_NE(reference.logs.find("dense 1 -> 1"), std::string::npos) << reference.logs;
  EXPECT_GT(rows_difference(reference, untrained), 1e-3) << "the rows did not move";
  const CtrRun p = train(2, 3, kBatch, "adagrad", false, model);
  EXPECT_LE(relative_difference(reference.dense, p.dense), 1e-5);
  EXPECT_LE(rows_difference(reference, p), 1e-5);
  std::smatch summary;
  ASSERT_TRUE(std::regex_search(p.logs, summary, std::regex("summary: [^\n]*"))) << p.logs;
  const std::string line = summary[0].str();
  EXPECT_EQ(line.find("train_accuracy="), std::string::npos) << line;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(line, m, std::regex("test_loss=([0-9.]+) test_accuracy=[0-9.]+ test_auc=[0-9.]+ "
                                                    "test_logloss=([0-9.]+)")))
      << line;
  EXPECT_EQ(m[1].str(), m[2].str()) << line;  // bce's loss is the log loss
}

// Fine-tuning: a job with --init-params DIR of a saved CTR model starts its tables from
// DIR/embeddings/ (saved by 1 shard, loaded by 2: re-sliced). With learning rates too small to
// move anything it ends with the saved dense parameters and rows, every row there; with the
// usual ones it trains on from them (not from fresh tables). Tables of another optimizer are
// refused naming the flag.
TEST_F(CtrJobTest, FineTuningStartsFromTheSavedTablesOnAnyShardCount) {
  const std::string dir = make_temp_dir("ctr-fine-tune");
  Job first;
  first.num_ps = 1;
  first.num_workers = 1;
  first.dir = dir + "/first";
  std::filesystem::create_directories(first.dir);
  first.args = flags(3 * kBatch, "adagrad", false, "0.1", kSteps, dir);
  first.args.insert(first.args.end(), {"--save-params", dir + "/first-params"});
  const JobResult result = run_job(first);
  ASSERT_TRUE(result.ok()) << result.logs;
  const CtrRun start = saved(dir + "/first-params", "adagrad", false);
  ASSERT_GT(start.table_rows, 0u);

  const std::vector<std::string> from = {"--init-params", dir + "/first-params"};
  std::vector<std::string> still = from;
  still.insert(still.end(), {"--lr", "1e-30"});
  const CtrRun kept = train(2, 2, kBatch, "adagrad", false, still, "1e-30", 5);
  ASSERT_FALSE(kept.rows.empty()) << kept.logs;
  EXPECT_NE(kept.logs.find("tables from " + dir + "/first-params/embeddings; tables at version 0: embedding rows"),
            std::string::npos)
      << kept.logs;
  EXPECT_EQ(relative_difference(start.dense, kept.dense), 0.0);
  EXPECT_EQ(rows_difference(start, kept), 0.0);
  EXPECT_EQ(kept.table_rows, start.table_rows);

  const CtrRun tuned = train(2, 2, kBatch, "adagrad", false, from, "0.1", 5);
  const CtrRun fresh = train(2, 2, kBatch, "adagrad", false, {}, "0.1", 5);
  ASSERT_FALSE(tuned.rows.empty()) << tuned.logs;
  ASSERT_FALSE(fresh.rows.empty()) << fresh.logs;
  EXPECT_GT(rows_difference(tuned, start), 1e-6) << "fine-tuning did not move the rows";
  EXPECT_GT(rows_difference(tuned, fresh), 1e-3) << "fine-tuning started from fresh tables";
  EXPECT_LT(rows_difference(tuned, start), rows_difference(fresh, start));

  const CtrRun other = train(2, 2, kBatch, "ftrl", false, from, "0.1", 5, /*expect_ok=*/false);
  EXPECT_NE(other.logs.find("were trained with --embedding-optimizer adagrad, this job's is ftrl"), std::string::npos)
      << other.logs;
  std::filesystem::remove_all(dir);
}

// The chief reports the test AUC and log loss; async and ssp train too: every worker's pushes
// reach the tables (2 workers x 20 steps applied one by one), and the rows move.
TEST_F(CtrJobTest, AsyncAndSspTrainAndTheSummaryHasTheAuc) {
  const CtrRun untrained = train(2, 2, kBatch, "adagrad", false, {}, "1e-30");
  for (const std::string mode : {"async", "ssp"}) {
    const CtrRun run = train(2, 2, kBatch, "adagrad", false, {"--mode", mode});
    ASSERT_FALSE(run.rows.empty()) << mode;
    EXPECT_NE(run.logs.find("test_auc="), std::string::npos) << run.logs;
    EXPECT_NE(run.logs.find("test_logloss="), std::string::npos) << run.logs;
    EXPECT_NE(run.logs.find("tables at version 40: embedding rows"), std::string::npos) << run.logs;
    EXPECT_GT(rows_difference(run, untrained), 1e-3) << mode;
  }
}

// Every message a worker sends before DONE is delivered or reported (issue 50): DONE counts the
// messages of each kind the worker sent the shard, and the shard acknowledges it only once they
// all arrived. Async, 2 workers x 20 steps on 2 shards: each worker's last SPARSE_PUSH (its 40th,
// to ps1) held back 3 s by the fault double, so DONE goes first: the tables still end at version
// 40 on both shards (before, ps1 acknowledged the DONEs, the workers closed their sockets, and the
// tables ended at 38 with exit 0). Dropped instead: the workers fail naming the push that did not
// arrive, and ps1's stall line names it too.
TEST_F(CtrJobTest, ALastSparsePushHeldBackOrLostIsDeliveredOrReported) {
  const CtrRun held =
      train(2, 2, kBatch, "adagrad", false, {"--mode", "async", "--inject-faults", "delay:SPARSE_PUSH:40:3"});
  EXPECT_EQ(count_of(held.logs, "fault injected: delay SPARSE_PUSH #40"), 2u) << held.logs;
  EXPECT_EQ(count_of(held.logs, "tables at version 40: embedding rows"), 2u) << held.logs;
  EXPECT_NE(held.logs.find("ps1: the DONE of w0 waits for 1 SPARSE_PUSH (19 of 20 arrived)"), std::string::npos)
      << held.logs;
  EXPECT_EQ(count_of(held.logs, "ps1: every message the DONE of w"), 2u) << held.logs;

  const CtrRun lost = train(2, 2, kBatch, "adagrad", false,
                            {"--mode", "async", "--inject-faults", "drop:SPARSE_PUSH:40", "--timeout", "3",
                             "--stall-report", "1"},
                            "0.1", kSteps, /*expect_ok=*/false);
  EXPECT_EQ(count_of(lost.logs, "timed out after 3 s waiting for DONE from ps1"), 2u) << lost.logs;
  EXPECT_NE(lost.logs.find("; ps1: the DONE of w1 waits for 1 SPARSE_PUSH (19 of 20 arrived)"), std::string::npos)
      << lost.logs;
  EXPECT_NE(lost.logs.find("ps1: stall: the DONE of w0 waits for 1 SPARSE_PUSH (19 of 20 arrived); the DONE of w1"),
            std::string::npos)
      << lost.logs;
  EXPECT_EQ(lost.logs.find("tables at version 38"), std::string::npos) << lost.logs;  // never a silent end
}

// DLRM (issue 32): a bottom MLP over the 13 dense features whose output joins the 26 rows as a
// 27th vector of the dot interaction, then the top MLP, with a sigmoid output. The chief's model
// line shows the block; the rows move; 3 workers of batch 8 on 2 shards equal one of 24.
TEST_F(CtrJobTest, DlrmBottomMlpModelKeepsTheMirroredContract) {
  const std::vector<std::string> model = {
      "--model", "embedding 4, bottom 13(dense 8, relu, dense 4), dot 27 4, dense 16, relu, dense 1", "--loss", "bce"};
  const CtrRun reference = train(1, 1, 3 * kBatch, "adagrad", false, model);
  const CtrRun untrained = train(1, 1, 3 * kBatch, "adagrad", false, model, "1e-30");
  ASSERT_FALSE(reference.rows.empty()) << reference.logs;
  // 4 made + 104 passed on = 108 = 27 x 4; then 351 pairs.
  EXPECT_NE(reference.logs.find("117 -> bottom 13(dense 8 -> 8 -> relu -> dense 4 -> 4), the other 104 passed on -> "
                                "108 -> dot 27 4 -> 459"),
            std::string::npos)
      << reference.logs;
  EXPECT_GT(rows_difference(reference, untrained), 1e-3) << "the rows did not move";
  const CtrRun p = train(2, 3, kBatch, "adagrad", false, model);
  const double dense = relative_difference(reference.dense, p.dense), rows = rows_difference(reference, p);
  RecordProperty("dense_relative_difference", dense);
  RecordProperty("rows_relative_difference", rows);
  EXPECT_LE(dense, 1e-5);
  EXPECT_LE(rows, 1e-5);
}

}  // namespace
}  // namespace pstrain::test
