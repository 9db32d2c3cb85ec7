// What a CTR job (--embedding-dim, docs/sparse.md) refuses, with the message it gives: bad values
// of the embedding flags and what is not built for tables yet, at the command line (exit 2), and
// gradient accumulation, which the worker finds when it plans its batch, before any network.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util/ctr_data.h"
#include "test_util/errors.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

// A worker's flags of a CTR job on Criteo files, plus `more`: the UsageError's message.
std::string ctr_usage_error(std::vector<const char*> more) {
  std::vector<const char*> args = {"--train-data", "train.tsv", "--test-data", "test.tsv", "--embedding-dim", "4"};
  args.insert(args.end(), more.begin(), more.end());
  return usage_error_of(args);
}

TEST(CtrOptionsTest, AValidCtrCommandLineParses) {
  const auto o = parse_worker_flags({"--train-data", "train.tsv", "--test-data", "test.tsv", "--embedding-dim", "4",
                                     "--embedding-tables", "per-field", "--embedding-optimizer", "ftrl",
                                     "--embedding-lr", "0.05", "--embedding-min-count", "3", "--embedding-expiry", "100"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->embedding_dim, 4);
  EXPECT_EQ(embedding_table_names(*o).size(), 26u);
}

TEST(CtrOptionsTest, BadEmbeddingValuesAreUsageErrors) {
  const std::string dim = "--embedding-dim must be in [0, 4096]";
  EXPECT_EQ(usage_error_of({"--train-data", "a.tsv", "--test-data", "b.tsv", "--embedding-dim=-1"}), dim);
  EXPECT_EQ(usage_error_of({"--train-data", "a.tsv", "--test-data", "b.tsv", "--embedding-dim", "5000"}), dim);
  EXPECT_EQ(ctr_usage_error({"--embedding-tables", "foo"}), "--embedding-tables: 'foo' is not one of shared, per-field");
  EXPECT_EQ(ctr_usage_error({"--embedding-optimizer", "foo"}),
            "--embedding-optimizer: 'foo' is not one of sgd, adagrad, adam, ftrl");
  EXPECT_EQ(ctr_usage_error({"--embedding-lr=-1"}), "--embedding-lr must be a number >= 0 (0: --lr)");
  EXPECT_EQ(ctr_usage_error({"--embedding-lr", "nan"}), "--embedding-lr must be a number >= 0 (0: --lr)");
  EXPECT_EQ(ctr_usage_error({"--embedding-min-count", "0"}), "--embedding-min-count must be in [1, 2^31)");
  EXPECT_EQ(ctr_usage_error({"--embedding-min-count", "2147483648"}), "--embedding-min-count must be in [1, 2^31)");
  EXPECT_EQ(ctr_usage_error({"--embedding-expiry=-1"}), "--embedding-expiry must not be negative");
}

TEST(CtrOptionsTest, WhatTablesDoNotSupportYetIsRefused) {
  const std::string why = "--embedding-dim: embedding tables ";
  EXPECT_EQ(ctr_usage_error({"--num-workers", "2", "--backup-workers", "1"}),
            why + "do not work with --backup-workers yet");
}

// Hybrid mode (--mode allreduce with tables) checkpoints, resumes and may be restarted (--allow-rejoin).
TEST(CtrOptionsTest, HybridJobsTakeCheckpointsAndResume) {
  EXPECT_TRUE(parse_worker_flags({"--train-data", "a.tsv", "--test-data", "b.tsv", "--embedding-dim", "4", "--mode",
                                  "allreduce", "--checkpoint-dir", "/tmp/ckpt", "--resume", "--allow-rejoin"}));
}

// --evaluate and --predict of a CTR model need no PS (the rows come from --init-params'
// embeddings/); --embedding-dim may be given, model.json's then being checked against it.
TEST(CtrOptionsTest, EvaluateAndPredictOfACtrModelAreAccepted) {
  EXPECT_TRUE(parse_worker_flags({"--evaluate", "--init-params", "/tmp/model", "--test-data", "b.tsv"}));
  EXPECT_TRUE(parse_worker_flags({"--evaluate", "--init-params", "/tmp/model", "--test-data", "b.tsv",
                                  "--embedding-dim", "4"}));
  EXPECT_TRUE(parse_worker_flags({"--predict", "more.tsv", "--predictions", "p.npy", "--init-params", "/tmp/model",
                                  "--embedding-dim", "4"}));
}

TEST(CtrOptionsTest, DataWithoutCategoricalFieldsIsRefused) {
  const std::string criteo =
      "--embedding-dim: embedding tables need Criteo data (--train-data / --test-data FILE.tsv, or --data-format criteo)";
  EXPECT_EQ(usage_error_of({"--embedding-dim", "4"}), criteo);  // the default: MNIST's IDX files
  EXPECT_EQ(usage_error_of({"--data-dir", "/tmp/mnist", "--embedding-dim", "4"}), criteo);
  EXPECT_EQ(usage_error_of({"--train-data", "a.csv", "--test-data", "b.csv", "--embedding-dim", "4"}), criteo);
  EXPECT_EQ(usage_error_of({"--train-data", "x.npy,y.npy", "--test-data", "tx.npy,ty.npy", "--embedding-dim", "4"}), criteo);
  EXPECT_TRUE(parse_worker_flags({"--train-data", "a.dat", "--test-data", "b.dat", "--data-format", "criteo",
                                  "--embedding-dim", "4"}));
}

// Gradient accumulation with tables: the worker exits 2 naming --embedding-dim as soon as its
// batch plan needs more than one micro-batch, before it contacts a PS (none listens here).
TEST(CtrOptionsTest, AWorkerShareThatNeedsAccumulationIsAUsageError) {
  const TempDir dir("ctr-options");
  write_criteo(dir.path + "/train.tsv", 48, 0);
  write_criteo(dir.path + "/test.tsv", 8, 1000);
  const std::string nobody = "127.0.0.1:" + std::to_string(free_tcp_ports(1).at(0));
  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::string accumulation = "--embedding-dim: gradient accumulation (";
  const std::vector<Case> cases = {
      {{"--batch-size", "4", "--accum-steps", "2"},
       accumulation + "2 micro-batches a step) is not built for embedding tables yet: drop --accum-steps, so that one "
                      "micro-batch holds this worker's 8 samples a step"},
      {{"--global-batch", "16", "--accum-steps", "2"},
       accumulation + "2 micro-batches a step) is not built for embedding tables yet: drop --accum-steps, so that one "
                      "micro-batch holds this worker's 16 samples a step"},
      {{"--worker-batch", "12", "--accum-steps", "3"},
       accumulation + "3 micro-batches a step) is not built for embedding tables yet: drop --accum-steps, so that one "
                      "micro-batch holds this worker's 12 samples a step"},
      // A --batch-size below the --worker-batch / --global-batch share cannot be given at all.
      {{"--batch-size", "4", "--worker-batch", "8"},
       "with --worker-batch or --global-batch, --batch-size takes only 'auto' (the micro-batch follows from "
       "--accum-steps)"},
      {{"--batch-size", "4", "--global-batch", "8"},
       "with --worker-batch or --global-batch, --batch-size takes only 'auto' (the micro-batch follows from "
       "--accum-steps)"},
  };
  Job job;
  job.dir = dir.path;
  job.args = {"--train-data", dir.path + "/train.tsv", "--test-data", dir.path + "/test.tsv", "--cache-dir", dir.path,
              "--embedding-dim", "4", "--model", "dense 8, relu, dense 2", "--steps", "2", "--timeout", "5",
              "--start-timeout", "5"};
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string log = dir.path + "/w" + std::to_string(i) + ".log";
    const pid_t pid = spawn(worker_argv(job, 0, [&] {
                              std::vector<std::string> extra = {"--ps-hosts", nobody};
                              extra.insert(extra.end(), cases[i].flags.begin(), cases[i].flags.end());
                              return extra;
                            }()),
                            log);
    const ExitStatus status = wait_for(pid, 30);
    const std::string text = read_file(log);
    EXPECT_EQ(status.code, 2) << cases[i].message << "\n" << text;
    EXPECT_CONTAINS(text, "pstrain-worker: " + cases[i].message + " (see --help)");
  }
}

}  // namespace
}  // namespace pstrain::test
