// What a CTR job (--embedding-dim, docs/sparse.md) refuses, with the message it gives: bad values
// of the embedding flags and what is not built for tables yet, at the command line (exit 2).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util/errors.h"

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
  // Gradient accumulation and backup workers are built for tables (docs/sparse.md).
  EXPECT_TRUE(parse_worker_flags({"--train-data", "train.tsv", "--test-data", "test.tsv", "--embedding-dim", "4",
                                  "--num-workers", "3", "--backup-workers", "1", "--accum-steps", "2"}));
  EXPECT_TRUE(parse_worker_flags({"--train-data", "train.tsv", "--test-data", "test.tsv", "--embedding-dim", "4",
                                  "--global-batch", "24", "--batch-size", "auto"}));
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

// A --batch-size beside --worker-batch / --global-batch cannot be given: the micro-batch follows
// from --accum-steps (which tables now take, as dense jobs do).
TEST(CtrOptionsTest, ABatchSizeBesideTheSharesIsAUsageError) {
  const std::string why =
      "with --worker-batch or --global-batch, --batch-size takes only 'auto' (the micro-batch follows from "
      "--accum-steps)";
  EXPECT_EQ(ctr_usage_error({"--batch-size", "4", "--worker-batch", "8"}), why);
  EXPECT_EQ(ctr_usage_error({"--batch-size", "4", "--global-batch", "8"}), why);
}

TEST(CtrOptionsTest, DataWithoutCategoricalFieldsIsRefused) {
  const std::string criteo =
      "--embedding-dim: embedding tables need categorical fields: Criteo data (--train-data / --test-data FILE.tsv, or "
      "--data-format criteo) or --schema's categorical columns";
  EXPECT_EQ(usage_error_of({"--embedding-dim", "4"}), criteo);  // the default: MNIST's IDX files
  EXPECT_EQ(usage_error_of({"--data-dir", "/tmp/mnist", "--embedding-dim", "4"}), criteo);
  EXPECT_EQ(usage_error_of({"--train-data", "a.csv", "--test-data", "b.csv", "--embedding-dim", "4"}), criteo);
  EXPECT_EQ(usage_error_of({"--train-data", "x.npy,y.npy", "--test-data", "tx.npy,ty.npy", "--embedding-dim", "4"}), criteo);
  EXPECT_TRUE(parse_worker_flags({"--train-data", "a.dat", "--test-data", "b.dat", "--data-format", "criteo",
                                  "--embedding-dim", "4"}));
}

}  // namespace
}  // namespace pstrain::test
