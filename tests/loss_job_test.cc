// Jobs of real processes with the losses of float targets (--loss mse | huber | bce; docs/models.md,
// "Losses"): synthetic problems generated here and learned through pstrain-ps and pstrain-worker
// (a linear regression with Gaussian noise to its noise floor, a multi-label problem well above
// chance), the mirrored contract for mse and bce, and targets that do not fit refused with exit 2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "test_util/build_paths.h"
#include "test_util/errors.h"
#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"
#include "worker/data/npy_format.h"

namespace pstrain::test {
namespace {

// A summary line's "key=value" as a number (NaN when absent).
double summary_value(const std::string& logs, const std::string& key) {
  const size_t line = logs.rfind("summary: ");
  if (line == std::string::npos) return NAN;
  const size_t at = logs.find(" " + key + "=", line);
  if (at == std::string::npos || at > logs.find('\n', line)) return NAN;
  return std::stod(logs.substr(at + key.size() + 2));
}

struct Problem {
  std::vector<float> x, y;  // records x features, records x width
  size_t records = 0, features = 0, width = 0;
};

// y = x W + b + sigma * noise, x ~ N(0, 1).
Problem linear_regression(size_t records, size_t features, size_t width, double sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 1);
  std::mt19937 weights_rng(99);  // the same W for the training and the test set
  std::vector<float> w(features * width), b(width);
  for (float& v : w) v = normal(weights_rng);
  for (float& v : b) v = normal(weights_rng);
  Problem p{{}, {}, records, features, width};
  for (size_t r = 0; r < records; ++r) {
    for (size_t f = 0; f < features; ++f) p.x.push_back(normal(rng));
    for (size_t k = 0; k < width; ++k) {
      double v = b[k] + sigma * normal(rng);
      for (size_t f = 0; f < features; ++f) v += p.x[r * features + f] * w[f * width + k];
      p.y.push_back(static_cast<float>(v));
    }
  }
  return p;
}

// Label k is 1 where x . w_k + 0.3 noise > 0.
Problem multi_label(size_t records, size_t features, size_t width, uint32_t seed) {
  Problem p = linear_regression(records, features, width, 0.3, seed);
  for (float& v : p.y) v = v > 0 ? 1.0f : 0.0f;
  return p;
}

void write(const Problem& p, const std::string& stem) {
  write_npy(stem + "_x.npy", {p.records, p.features}, p.x.data());
  if (p.width == 1) {
    write_npy(stem + "_y.npy", {p.records}, p.y.data());
  } else {
    write_npy(stem + "_y.npy", {p.records, p.width}, p.y.data());
  }
}

std::vector<std::string> data_args(const std::string& dir) {
  return {"--train-data", dir + "/train_x.npy," + dir + "/train_y.npy", "--test-data",
          dir + "/test_x.npy," + dir + "/test_y.npy", "--cache-dir", dir};
}

JobResult run(const std::string& dir, std::vector<std::string> args, int workers = 1, int shards = 1) {
  Job job;
  job.num_ps = shards;
  job.num_workers = workers;
  job.dir = dir;
  job.timeout_s = 60;
  job.args = data_args(dir);
  job.args.insert(job.args.end(), args.begin(), args.end());
  job.args.insert(job.args.end(), {"--seed", "7", "--timeout", "30", "--log-every", "1000"});
  return run_job(job);
}

// A linear model learns y = x W + b + noise down to the noise: test MSE within 10% of sigma^2
// (its expectation is sigma^2 (1 + D / N) for the least-squares fit), with mse and with huber
// (whose delta 1 holds every error of noise 0.2 in its quadratic part).
TEST(LossJobTest, RegressionLearnsALinearProblemToItsNoiseFloor) {
  const TempDir dir("loss-regression");
  const double sigma = 0.2;
  write(linear_regression(2000, 8, 1, sigma, 1), dir.path + "/train");
  write(linear_regression(1000, 8, 1, sigma, 2), dir.path + "/test");
  for (const char* loss : {"mse", "huber"}) {
    const std::string tensorboard = dir.path + "/tb-" + loss;
    const JobResult r = run(dir.path, {"--loss", loss, "--model", "dense 1", "--batch-size", "50", "--epochs", "8",
                                       "--optimizer", "sgd", "--lr", "0.05", "--lr-schedule", "cosine",
                                       "--tensorboard-dir", tensorboard});
    ASSERT_TRUE(r.ok()) << r.logs;
    const double rmse = summary_value(r.logs, "test_rmse"), r2 = summary_value(r.logs, "test_r2");
    std::printf("--loss %s: test RMSE %.4f (MSE %.5f against sigma^2 %.5f), MAE %.4f, R^2 %.4f\n", loss, rmse,
                rmse * rmse, sigma * sigma, summary_value(r.logs, "test_mae"), r2);
    EXPECT_NEAR(rmse * rmse, sigma * sigma, 0.1 * sigma * sigma) << loss << "\n" << r.logs;
    EXPECT_GT(r2, 0.99) << loss;
    EXPECT_TRUE(std::isnan(summary_value(r.logs, "test_accuracy"))) << "no accuracy for " << loss;
    EXPECT_CONTAINS(r.logs, " rmse ");  // the epoch lines
    std::string events;  // the scalars' tags in the event file
    for (const auto& entry : std::filesystem::recursive_directory_iterator(tensorboard)) {  // DIR/chief, DIR/w0
      if (entry.is_regular_file()) events += read_file(entry.path().string());
    }
    for (const char* tag : {"test/rmse", "test/mae", "test/r2"}) EXPECT_NE(events.find(tag), std::string::npos) << tag;
  }
}

// 5 labels of 10 features: exact match far above the best constant prediction's.
TEST(LossJobTest, MultiLabelBceLearnsWellAboveChance) {
  const TempDir dir("loss-bce");
  const Problem test = multi_label(1000, 10, 5, 2);
  write(multi_label(3000, 10, 5, 1), dir.path + "/train");
  write(test, dir.path + "/test");
  double chance = 1;  // predicting each label's majority value
  for (size_t k = 0; k < test.width; ++k) {
    double ones = 0;
    for (size_t r = 0; r < test.records; ++r) ones += test.y[r * test.width + k];
    chance *= std::max(ones, test.records - ones) / test.records;
  }
  const JobResult r = run(dir.path, {"--loss", "bce", "--model", "dense 32, relu, dense 5", "--batch-size", "64",
                                     "--epochs", "5", "--optimizer", "adam", "--lr", "0.01",
                                     "--metrics-file", dir.path + "/metrics.jsonl"});
  ASSERT_TRUE(r.ok()) << r.logs;
  const double exact = summary_value(r.logs, "test_exact_match"), per_label = summary_value(r.logs, "test_label_accuracy");
  std::printf("--loss bce: exact match %.4f (chance %.4f), per-label accuracy %.4f\n", exact, chance, per_label);
  EXPECT_GT(exact, 3 * chance) << r.logs;
  EXPECT_GT(per_label, 0.85);
  const std::string metrics = read_file(dir.path + "/metrics.jsonl");
  EXPECT_CONTAINS(metrics, "\"test_exact_match\":");
  EXPECT_CONTAINS(metrics, "\"test_label_accuracy\":");
  EXPECT_EQ(metrics.find("\"test_accuracy\""), std::string::npos) << metrics;
}

// The mirrored contract with float targets: 3 workers of batch 8 on 2 PS shards, and one worker
// accumulating 3 micro-batches of 8, end with the parameters of one worker of batch 24, for mse
// (2 targets) and bce (3 labels), sgd and adam.
TEST(LossJobTest, MseAndBceKeepTheMirroredContract) {
  const TempDir dir("loss-mirrored");
  for (const char* loss : {"mse", "bce"}) {
    const bool bce = std::strcmp(loss, "bce") == 0;
    write(bce ? multi_label(300, 6, 3, 1) : linear_regression(300, 6, 2, 0.1, 1), dir.path + "/train");
    write(bce ? multi_label(100, 6, 3, 2) : linear_regression(100, 6, 2, 0.1, 2), dir.path + "/test");
    for (const char* optimizer : {"sgd", "adam"}) {
      const auto train = [&](int workers, int shards, int batch, const std::string& tag,
                             const std::vector<std::string>& more = {}) {
        const std::string out = dir.path + "/" + loss + optimizer + tag;
        std::vector<std::string> args = {"--loss", loss, "--model", bce ? "dense 16, tanh, dense 3" : "dense 16, tanh, dense 2",
                                         "--batch-size", std::to_string(batch), "--steps", "20", "--epochs", "5",
                                         "--optimizer", optimizer, "--lr", optimizer[0] == 'a' ? "0.01" : "0.05",
                                         "--save-params", out};
        args.insert(args.end(), more.begin(), more.end());
        const JobResult r = run(dir.path, args, workers, shards);
        EXPECT_TRUE(r.ok()) << r.logs;
        return load_saved_params(out);
      };
      const SavedParams one = train(1, 1, 24, "one");
      const double rel = relative_difference(one, train(3, 2, 8, "three"));
      std::printf("--loss %s %s: 3 workers on 2 shards vs one: max |difference| / max |parameter| = %.3g\n", loss,
                  optimizer, rel);
      EXPECT_LE(rel, 1e-5) << loss << " " << optimizer;
      // One worker accumulating 3 micro-batches of 8 (each micro-batch's targets uploaded in turn).
      const double accumulated = relative_difference(one, train(1, 1, 8, "accum", {"--accum-steps", "3"}));
      EXPECT_LE(accumulated, 1e-5) << loss << " " << optimizer << " with --accum-steps 3";
      EXPECT_GT(relative_difference(one, train(1, 1, 16, "other")), 1e-3)
          << "the check can fail: another batch gives other parameters";
    }
  }
}

// A model saved by a --loss mse job: model.json records the loss; --evaluate repeats the chief's
// figures and --predict writes the raw outputs, with no --loss given (model.json's); a job of
// another loss refuses it for --init-params.
TEST(LossJobTest, SavedRegressionModelEvaluatesAndPredictsWithItsLoss) {
  const TempDir dir("loss-saved");
  write(linear_regression(400, 5, 2, 0.1, 1), dir.path + "/train");
  const Problem test = linear_regression(150, 5, 2, 0.1, 2);
  write(test, dir.path + "/test");
  const std::string params = dir.path + "/params";
  const JobResult r = run(dir.path, {"--loss", "mse", "--model", "dense 8, tanh, dense 2", "--batch-size", "20",
                                     "--epochs", "2", "--optimizer", "adam", "--lr", "0.01", "--save-params", params});
  ASSERT_TRUE(r.ok()) << r.logs;
  EXPECT_CONTAINS(read_file(params + "/model.json"), "\"loss\": \"mse\"");
  const double rmse = summary_value(r.logs, "test_rmse");

  const auto worker = [&](std::vector<std::string> args, const std::string& name) {
    args.insert(args.begin(), {PSTRAIN_WORKER_BIN, "--init-params", params, "--cache-dir", dir.path});
    const ExitStatus status = wait_for(spawn(args, dir.path + "/" + name + ".log"), 60);
    return std::make_pair(status, read_file(dir.path + "/" + name + ".log"));
  };
  const std::string test_data = dir.path + "/test_x.npy," + dir.path + "/test_y.npy";
  const auto [evaluated, evaluate_log] = worker({"--evaluate", "--test-data", test_data}, "evaluate");
  EXPECT_TRUE(evaluated.ok()) << evaluate_log;
  const size_t at = evaluate_log.find("evaluation: test_loss=");
  ASSERT_NE(at, std::string::npos) << evaluate_log;
  EXPECT_CONTAINS(evaluate_log.substr(at), "test_rmse=" + std::to_string(rmse).substr(0, 6));

  const auto [predicted, predict_log] =
      worker({"--predict", test_data, "--predictions", dir.path + "/p.npy"}, "predict");
  EXPECT_TRUE(predicted.ok()) << predict_log;
  EXPECT_CONTAINS(predict_log, "predictions: 150 records x 2 outputs written to " + dir.path + "/p.npy");
  std::vector<size_t> shape;
  const std::vector<float> p = read_npy(dir.path + "/p.npy", &shape);
  ASSERT_EQ(shape, (std::vector<size_t>{150, 2}));
  double sq = 0;
  for (size_t i = 0; i < p.size(); ++i) sq += (p[i] - test.y[i]) * (p[i] - test.y[i]);
  EXPECT_NEAR(std::sqrt(sq / p.size()), rmse, 1e-4);  // the summary's 4 decimals

  const auto [refused, refused_log] =
      worker({"--index", "0", "--num-workers", "1", "--ps-hosts", "127.0.0.1:1", "--batch-size", "20",
              "--train-data", dir.path + "/train_x.npy," + dir.path + "/train_y.npy", "--test-data", test_data,
              "--loss", "huber"},
             "refused");
  EXPECT_EQ(refused.code, 2) << refused_log;
  EXPECT_CONTAINS(refused_log, "--init-params " + params + ": its model was trained with --loss mse (" + params +
                                   "/model.json), but this job's is --loss huber");
}

// CSV targets: two columns named by --label-column, between the features.
TEST(LossJobTest, CsvTargetColumnsTrainARegression) {
  const TempDir dir("loss-csv");
  for (const auto& [name, seed, records] : {std::tuple{"train", 1u, 600}, std::tuple{"test", 2u, 200}}) {
    const Problem p = linear_regression(static_cast<size_t>(records), 3, 2, 0.1, seed);
    std::ofstream out(dir.path + "/" + name + ".csv");
    out << "a,y0,b,y1,c\n";
    for (size_t r = 0; r < p.records; ++r) {
      out << p.x[r * 3] << "," << p.y[r * 2] << "," << p.x[r * 3 + 1] << "," << p.y[r * 2 + 1] << ","
          << p.x[r * 3 + 2] << "\n";
    }
  }
  Job job;
  job.dir = dir.path;
  job.args = {"--train-data", dir.path + "/train.csv", "--test-data", dir.path + "/test.csv", "--label-column",
              "y0,y1", "--cache-dir", dir.path, "--loss", "mse", "--model", "dense 2", "--batch-size", "20",
              "--epochs", "6", "--optimizer", "sgd", "--lr", "0.05", "--lr-schedule", "cosine", "--timeout", "30"};
  const JobResult r = run_job(job);
  ASSERT_TRUE(r.ok()) << r.logs;
  EXPECT_CONTAINS(r.logs, "model: 3 -> dense 2 -> 2");  // 5 columns less 2 targets
  const double rmse = summary_value(r.logs, "test_rmse");
  std::printf("CSV targets: test RMSE %.4f (sigma 0.1)\n", rmse);
  EXPECT_NEAR(rmse, 0.1, 0.01) << r.logs;
}

struct Refusal {
  ExitStatus status;
  std::string log;
};

// One worker that stops before it needs a PS.
Refusal worker_refusal(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {PSTRAIN_WORKER_BIN, "--index", "0", "--num-workers", "1",
                                   "--ps-hosts", "127.0.0.1:1", "--timeout", "5", "--batch-size", "10"};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string log = dir + "/refused.log";
  Refusal r{wait_for(spawn(argv, log), 30), ""};
  r.log = read_file(log);
  return r;
}

TEST(LossJobTest, TargetsThatDoNotFitAreUsageErrorsNamingTheFile) {
  const TempDir dir("loss-refusals");
  write(multi_label(50, 4, 3, 1), dir.path + "/train");
  write(multi_label(20, 4, 3, 2), dir.path + "/test");
  const std::string y = dir.path + "/train_y.npy";
  std::vector<std::string> args = data_args(dir.path);

  // 3 targets, a model of 2 outputs.
  args.insert(args.end(), {"--loss", "mse", "--model", "dense 8, relu, dense 2"});
  Refusal r = worker_refusal(dir.path, args);
  EXPECT_EQ(r.status.code, 2) << r.log;
  EXPECT_CONTAINS(r.log, "--model: the last layer 'dense 2' gives 2 outputs per sample, but the targets of " + y +
                             " (shape (50, 3)) are 3 wide (end the list with dense 3)");

  // bce takes 0/1 only.
  Problem soft = multi_label(50, 4, 3, 1);
  soft.y[7] = 0.5f;
  write(soft, dir.path + "/train");
  args = data_args(dir.path);
  args.insert(args.end(), {"--loss", "bce", "--model", "dense 3"});
  r = worker_refusal(dir.path, args);
  EXPECT_EQ(r.status.code, 2) << r.log;
  EXPECT_CONTAINS(r.log, y + ": target 0.5 of record 2 (value 1 of its 3) is not 0 or 1 (--loss bce takes "
                             "multi-label 0/1 targets)");

  // IDX data have class labels only; the CTR path trains with softmax or bce (one output), not a regression.
  r = worker_refusal(dir.path, {"--data-dir", dir.path, "--loss", "mse"});
  EXPECT_EQ(r.status.code, 2) << r.log;
  EXPECT_CONTAINS(r.log, "--loss mse needs float targets");
  EXPECT_CONTAINS(usage_error_of({"--loss", "mse", "--embedding-dim", "8", "--train-data", "a.tsv", "--test-data",
                                  "b.tsv"}),
                  "--embedding-dim: CTR models train with --loss softmax (2 outputs) or bce (1 output, p(click)), not "
                  "--loss mse");
  EXPECT_CONTAINS(usage_error_of({"--loss", "mse", "--huber-delta", "0"}), "--huber-delta must be a positive number");
  EXPECT_CONTAINS(usage_error_of({"--loss", "l1"}), "--loss: 'l1' is not one of softmax, bce, mse, huber");
  EXPECT_CONTAINS(usage_error_of({"--loss", "mse", "--evaluate", "--init-params", "/p"}),
                  "--evaluate takes the loss from --init-params' model.json: drop --loss mse");
}

}  // namespace
}  // namespace pstrain::test
