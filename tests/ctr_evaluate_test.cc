// --evaluate and --predict of a CTR model (docs/sparse.md, docs/models.md): a real job (2 PS
// shards, 2 workers) saves its dense parameters, model.json and the shards' tables with
// --save-params DIR; a worker with no PS then repeats the chief's final test figures from DIR,
// and --predict writes probabilities whose AUC is the evaluation's. Bad directories and data are
// refused naming the file, with docs/errors.md's exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "shared/util/file_util.h"
#include "test_util/build_paths.h"
#include "test_util/ctr_data.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"
#include "worker/data/npy_format.h"
#include "worker/report/auc.h"
#include "worker/report/progress.h"

namespace pstrain::test {
namespace {

class CtrEvaluateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(make_temp_dir("ctr-evaluate"));
    write_criteo(*dir_ + "/train.tsv", 240, 0);
    write_criteo(*dir_ + "/test.tsv", 80, 100000);
    write_criteo(*dir_ + "/train-lists.tsv", 240, 0, true);
    write_criteo(*dir_ + "/test-lists.tsv", 80, 100000, true);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }

  // Trains a CTR job of 2 shards and 2 workers with `more` flags, saving to DIR/NAME-params;
  // returns the chief's log.
  static std::string train(const std::string& name, const std::vector<std::string>& more) {
    Job job;
    job.num_ps = 2;
    job.num_workers = 2;
    job.dir = *dir_ + "/" + name;
    std::filesystem::create_directories(job.dir);
    job.args = {"--train-data", *dir_ + "/train.tsv", "--test-data", *dir_ + "/test.tsv", "--cache-dir", *dir_,
                "--embedding-dim", "4", "--model", "dense 16, relu, dense 2", "--optimizer", "sgd", "--lr", "0.1",
                "--batch-size", "8", "--steps", "150", "--epochs", "100", "--seed", "7", "--timeout", "30",
                "--save-params", params(name)};
    for (const std::string& flag : more) {  // a flag of `more` replaces the default's value
      const auto at = std::find(job.args.begin(), job.args.end(), flag);
      if (flag.rfind("--", 0) == 0 && at != job.args.end()) job.args.erase(at, at + 2);
    }
    // A model that names its tables ("embedding 4 ..., <layers>") replaces --embedding-dim too:
    // the entry alone sets the tables.
    const auto model = std::find(more.begin(), more.end(), "--model");
    if (model != more.end() && model + 1 != more.end() && (model + 1)->rfind("embedding", 0) == 0) {
      const auto at = std::find(job.args.begin(), job.args.end(), "--embedding-dim");
      if (at != job.args.end()) job.args.erase(at, at + 2);
    }
    job.args.insert(job.args.end(), more.begin(), more.end());
    const JobResult result = run_job(job);
    EXPECT_TRUE(result.ok()) << result.logs;
    return read_file(job.dir + "/w0.log");
  }
  static std::string params(const std::string& name) { return *dir_ + "/" + name + "-params"; }

  // pstrain-worker with `args` (no PS); its exit status and log.
  static ExitStatus worker(const std::vector<std::string>& args, std::string* log) {
    std::vector<std::string> argv = {PSTRAIN_WORKER_BIN, "--cache-dir", *dir_};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string path = *dir_ + "/worker.log";
    const ExitStatus status = wait_for(spawn(argv, path), 60);
    *log = read_file(path);
    return status;
  }
  static ExitStatus evaluate(const std::string& params_dir, const std::vector<std::string>& more, std::string* log) {
    std::vector<std::string> args = {"--evaluate", "--init-params", params_dir, "--test-data", *dir_ + "/test.tsv"};
    args.insert(args.end(), more.begin(), more.end());
    return worker(args, log);
  }

  static std::string* dir_;
};
std::string* CtrEvaluateTest::dir_ = nullptr;

std::string field(const std::string& log, const std::string& name) {
  std::smatch m;
  return std::regex_search(log, m, std::regex(name + "=([0-9.]+)")) ? m[1].str() : "none";
}

// The labels of a Criteo file: each line's first column.
std::vector<int32_t> criteo_labels(const std::string& path) {
  std::ifstream in(path);
  std::vector<int32_t> labels;
  std::string line;
  while (std::getline(in, line)) labels.push_back(line[0] == '1' ? 1 : 0);
  return labels;
}

// The chief's summary line and --evaluate agree to every printed digit; --predict's p(click)
// column has the evaluation's AUC (and its arg-max the evaluation's accuracy), as .npy and .csv.
void expect_the_chiefs_figures(const std::string& chief, const std::string& log) {
  for (const char* name : {"test_loss", "test_accuracy", "test_auc", "test_logloss"}) {
    EXPECT_EQ(field(log, name), field(chief, name)) << name << "\n" << log << chief;
    EXPECT_NE(field(log, name), "none") << name << "\n" << log;
  }
  std::cout << "chief:    test_loss=" << field(chief, "test_loss") << " test_accuracy=" << field(chief, "test_accuracy")
            << " test_auc=" << field(chief, "test_auc") << " test_logloss=" << field(chief, "test_logloss") << "\n"
            << "evaluate: test_loss=" << field(log, "test_loss") << " test_accuracy=" << field(log, "test_accuracy")
            << " test_auc=" << field(log, "test_auc") << " test_logloss=" << field(log, "test_logloss") << std::endl;
}

TEST_F(CtrEvaluateTest, EvaluateRepeatsTheChiefsFiguresAndPredictHasItsAuc) {
  const std::string chief = train("shared", {});
  const std::string saved = params("shared");
  const std::string model = read_file(saved + "/model.json");
  EXPECT_NE(model.find("\"version\": 2"), std::string::npos) << model;
  EXPECT_NE(model.find("\"key\": \"mix_id(raw ^ mix_id(field + 1))\""), std::string::npos) << model;
  EXPECT_NE(model.find("\"num_ps\": 2"), std::string::npos) << model;
  std::string log;
  ASSERT_TRUE(evaluate(saved, {}, &log).ok()) << log;  // no --model, no --embedding-dim: model.json's
  expect_the_chiefs_figures(chief, log);
  EXPECT_NE(log.find("records=80"), std::string::npos) << log;

  const std::vector<int32_t> labels = criteo_labels(*dir_ + "/test.tsv");
  for (const std::string& out : {*dir_ + "/p.npy", *dir_ + "/p.csv"}) {
    std::string predicted;
    ASSERT_TRUE(worker({"--init-params", saved, "--predict", *dir_ + "/test.tsv", "--predictions", out}, &predicted).ok())
        << predicted;
    std::vector<float> clicks;
    if (out.back() == 'y') {
      std::vector<size_t> shape;
      const std::vector<float> p = read_npy(out, &shape);
      ASSERT_EQ(shape, (std::vector<size_t>{80, 2}));
      for (size_t r = 0; r < 80; ++r) {
        EXPECT_NEAR(p[2 * r] + p[2 * r + 1], 1.0f, 1e-6f);
        clicks.push_back(p[2 * r + 1]);
      }
    } else {
      std::istringstream csv(read_file(out));
      std::string line;
      std::getline(csv, line);
      EXPECT_EQ(line, "p0,p1");
      while (std::getline(csv, line)) clicks.push_back(std::stof(line.substr(line.find(',') + 1)));
    }
    ASSERT_EQ(clicks.size(), labels.size());
    const double auc = exact_auc(clicks.data(), labels.data(), labels.size());
    EXPECT_EQ(fixed(auc, 4), field(log, "test_auc")) << predicted;
    EXPECT_NE(predicted.find("auc " + fixed(auc, 4)), std::string::npos) << predicted;
    std::cout << out << ": AUC of p(click) " << auc << std::endl;
  }
}

// A CTR model of one output trained with --loss bce, its tables written in the model: model.json
// says bce, per-field tables of 4 and a spec without the entry; --evaluate repeats the chief's
// figures and --predict writes one column, p(click) = sigmoid(output), whose AUC is the
// evaluation's and whose p >= 0.5 gives its accuracy.
TEST_F(CtrEvaluateTest, ASigmoidOutputEvaluatesAndPredictsItsClicks) {
  const std::string chief =
      train("sigmoid", {"--model", "embedding 4 tables=per-field, dense 16, relu, dense 1", "--loss", "bce"});
  const std::string saved = params("sigmoid");
  const std::string model = read_file(saved + "/model.json");
  EXPECT_NE(model.find("\"loss\": \"bce\""), std::string::npos) << model;
  EXPECT_NE(model.find("\"tables\": \"per-field\""), std::string::npos) << model;
  EXPECT_NE(model.find("\"dim\": 4"), std::string::npos) << model;
  EXPECT_EQ(model.find("embedding 4"), std::string::npos) << model;
  EXPECT_NE(chief.find("dense 1 -> 1"), std::string::npos) << chief;
  std::string log;
  ASSERT_TRUE(evaluate(saved, {}, &log).ok()) << log;
  expect_the_chiefs_figures(chief, log);

  const std::string out = *dir_ + "/sigmoid.csv";
  std::string predicted;
  ASSERT_TRUE(worker({"--init-params", saved, "--predict", *dir_ + "/test.tsv", "--predictions", out}, &predicted).ok())
      << predicted;
  EXPECT_NE(predicted.find("80 records x 1 p(click)"), std::string::npos) << predicted;
  std::istringstream csv(read_file(out));
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "p0");
  std::vector<float> clicks;
  while (std::getline(csv, line)) clicks.push_back(std::stof(line));
  const std::vector<int32_t> labels = criteo_labels(*dir_ + "/test.tsv");
  ASSERT_EQ(clicks.size(), labels.size());
  size_t right = 0;
  for (size_t r = 0; r < clicks.size(); ++r) {
    EXPECT_TRUE(clicks[r] > 0 && clicks[r] < 1) << r << ": " << clicks[r];
    right += (clicks[r] >= 0.5f) == (labels[r] == 1);
  }
  EXPECT_EQ(fixed(exact_auc(clicks.data(), labels.data(), labels.size()), 4), field(log, "test_auc")) << predicted;
  EXPECT_EQ(fixed(static_cast<double>(right) / static_cast<double>(labels.size()), 4), field(log, "test_accuracy"));
}

// pstrain-export of a CTR job's last checkpoint carries its tables: the files --save-params
// wrote at the same step, byte for byte, and --evaluate of the export repeats the chief.
TEST_F(CtrEvaluateTest, ExportedCheckpointCarriesTheTables) {
  const std::string ckpt = *dir_ + "/export-ckpt", out = *dir_ + "/exported";
  const std::string chief = train("export", {"--checkpoint-dir", ckpt, "--checkpoint-every", "150"});
  const std::string log_path = *dir_ + "/export.log";
  const ExitStatus exported = wait_for(spawn({PSTRAIN_EXPORT_BIN, ckpt, out}, log_path), 60);
  ASSERT_TRUE(exported.ok()) << read_file(log_path);
  EXPECT_NE(read_file(log_path).find("2 embedding table file(s)"), std::string::npos) << read_file(log_path);
  for (const char* name : {"ids.shard0-of-2", "ids.shard1-of-2"}) {
    const std::string a = read_file(out + "/embeddings/" + name), b = read_file(params("export") + "/embeddings/" + name);
    EXPECT_FALSE(a.empty()) << name;
    EXPECT_TRUE(a == b) << name << ": the checkpoint's table differs from --save-params'";
  }
  std::string log;
  ASSERT_TRUE(evaluate(out, {}, &log).ok()) << log;
  expect_the_chiefs_figures(chief, log);
}

// Per-field tables, FTRL (rows start at zero) and admission at the second sighting:
// model.json says so, and the evaluation still repeats the chief.
// Criteo's 39 columns without the label (Kaggle's test.txt, production rows): --predict writes
// the scores of the same rows with labels, digit for digit; --evaluate refuses the file.
TEST_F(CtrEvaluateTest, PredictScoresRowsWithoutTheLabelColumn) {
  train("unlabelled", {"--steps", "40"});
  std::ifstream in(*dir_ + "/test.tsv");
  std::string line, stripped;
  while (std::getline(in, line)) stripped += line.substr(line.find('\t') + 1) + "\n";
  write_file_atomically(*dir_ + "/test-39.txt", stripped);
  std::string log;
  ASSERT_TRUE(worker({"--init-params", params("unlabelled"), "--predict", *dir_ + "/test.tsv", "--predictions",
                      *dir_ + "/with.csv"},
                     &log)
                  .ok())
      << log;
  ASSERT_TRUE(worker({"--init-params", params("unlabelled"), "--predict", *dir_ + "/test-39.txt", "--predictions",
                      *dir_ + "/without.csv"},
                     &log)
                  .ok())
      << log;
  EXPECT_NE(log.find("predictions: 80 records x 2 classes written to " + *dir_ +
                     "/without.csv (the input has no labels: no accuracy)"),
            std::string::npos)
      << log;
  EXPECT_EQ(read_file(*dir_ + "/without.csv"), read_file(*dir_ + "/with.csv"));
  const ExitStatus refused =
      worker({"--evaluate", "--init-params", params("unlabelled"), "--test-data", *dir_ + "/test-39.txt"}, &log);
  EXPECT_EQ(refused.code, 1) << log;
  EXPECT_NE(log.find("--test-data " + *dir_ + "/test-39.txt: has no label column (39 fields, Criteo's without the "
                     "label): such a file can be scored"),
            std::string::npos)
      << log;
}

TEST_F(CtrEvaluateTest, PerFieldTablesWithAdmissionRepeatTheChiefsFigures) {
  const std::string chief = train("per-field", {"--embedding-tables", "per-field", "--embedding-optimizer", "ftrl",
                                                "--embedding-min-count", "2"});
  const std::string model = read_file(params("per-field") + "/model.json");
  EXPECT_NE(model.find("\"init\": \"zeros\""), std::string::npos) << model;
  EXPECT_NE(model.find("\"min_count\": 2"), std::string::npos) << model;
  std::string log;
  ASSERT_TRUE(evaluate(params("per-field"), {"--embedding-dim", "4", "--embedding-tables", "per-field"}, &log).ok())
      << log;
  expect_the_chiefs_figures(chief, log);
}

// Fields listing several IDs, pooled by their mean: model.json says "pool": "mean", --evaluate
// and --predict (with no flag but --init-params) repeat the chief, and so does pstrain-export of
// its checkpoint; --embedding-pool sum with --embedding-dim is refused. A model.json without
// "pool" (written before pooling) is sum's: the same directory then evaluates to other figures,
// those of sum pooling.
TEST_F(CtrEvaluateTest, MultiValuedFieldsWithMeanPoolingRepeatTheChiefsFigures) {
  const std::string test = *dir_ + "/test-lists.tsv";
  const std::string ckpt = *dir_ + "/lists-ckpt", exported = *dir_ + "/lists-exported";
  const std::string chief = train("lists", {"--train-data", *dir_ + "/train-lists.tsv", "--test-data", test,
                                            "--embedding-pool", "mean", "--checkpoint-dir", ckpt,
                                            "--checkpoint-every", "150"});
  const std::string saved = params("lists");
  const std::string model = read_file(saved + "/model.json");
  EXPECT_NE(model.find("\"pool\": \"mean\""), std::string::npos) << model;
  std::string log;
  ASSERT_TRUE(worker({"--evaluate", "--init-params", saved, "--test-data", test}, &log).ok()) << log;
  expect_the_chiefs_figures(chief, log);
  const std::string export_log = *dir_ + "/lists-export.log";
  ASSERT_TRUE(wait_for(spawn({PSTRAIN_EXPORT_BIN, ckpt, exported}, export_log), 60).ok()) << read_file(export_log);
  EXPECT_NE(read_file(exported + "/model.json").find("\"pool\": \"mean\""), std::string::npos);
  std::string exported_log;
  ASSERT_TRUE(worker({"--evaluate", "--init-params", exported, "--test-data", test}, &exported_log).ok()) << exported_log;
  expect_the_chiefs_figures(chief, exported_log);
  std::string predicted;
  ASSERT_TRUE(worker({"--init-params", saved, "--predict", test, "--predictions", *dir_ + "/lists.npy"}, &predicted).ok())
      << predicted;
  EXPECT_NE(predicted.find("auc " + field(log, "test_auc") + ")"), std::string::npos) << predicted << log;

  ExitStatus status = worker({"--evaluate", "--init-params", saved, "--test-data", test, "--embedding-dim", "4",
                              "--embedding-pool", "sum"}, &log);
  EXPECT_EQ(status.code, 2) << log;
  EXPECT_NE(log.find("its fields' IDs are pooled by mean (" + saved + "/model.json), but --embedding-pool is sum"),
            std::string::npos)
      << log;

  std::string without = model;
  const size_t at = without.find("\"pool\": \"mean\",");
  ASSERT_NE(at, std::string::npos) << model;
  without.erase(at, std::string("\"pool\": \"mean\",").size());
  write_file_atomically(saved + "/model.json", without);
  ASSERT_TRUE(worker({"--evaluate", "--init-params", saved, "--test-data", test, "--embedding-dim", "4",
                      "--embedding-pool", "sum"}, &log).ok())
      << log;
  EXPECT_NE(field(log, "test_loss"), field(chief, "test_loss")) << log;
}

// A directory without embeddings/, a damaged table file, a flag or data that is not the saved
// setup: a clear error naming the file or flag; exit 1 for files and data, 2 for flags.
TEST_F(CtrEvaluateTest, BadDirectoriesAndDataAreRefusedNamingTheFile) {
  train("bad", {});
  const std::string saved = params("bad");
  std::string log;
  ExitStatus status = evaluate(saved, {"--embedding-dim", "8"}, &log);
  EXPECT_EQ(status.code, 2) << log;
  EXPECT_NE(log.find("--init-params " + saved + ": its embedding rows have dim 4 (" + saved +
                     "/model.json), but --embedding-dim is 8"),
            std::string::npos)
      << log;
  status = evaluate(saved, {"--embedding-dim", "4", "--embedding-tables", "per-field"}, &log);
  EXPECT_EQ(status.code, 2) << log;
  EXPECT_NE(log.find("its embedding tables are shared (" + saved + "/model.json), but --embedding-tables is per-field"),
            std::string::npos)
      << log;

  // No --test-data: not --data-dir's images (they have no fields), but a usage error saying what to give.
  status = worker({"--evaluate", "--init-params", saved}, &log);
  EXPECT_EQ(status.code, 2) << log;
  EXPECT_NE(log.find("--init-params " + saved + " is a click-through-rate model (model.json's embeddings): --evaluate "
                     "needs its test records, --test-data FILE (Criteo TSV, or the file a --schema reads)"),
            std::string::npos)
      << log;

  const std::string csv = *dir_ + "/dense.csv";  // data without categorical fields
  write_file_atomically(csv, "a,b,label\n0.5,1,0\n2,0.25,1\n");
  status = worker({"--evaluate", "--init-params", saved, "--test-data", csv}, &log);
  EXPECT_EQ(status.code, 1) << log;
  EXPECT_NE(log.find("the model takes records of 13 dense features and 26 categorical fields (" + saved +
                     "/model.json's embeddings), but the data's records (" + csv + ") have 2 and 0"),
            std::string::npos)
      << log;

  const std::string file = saved + "/embeddings/ids.shard1-of-2";
  std::string bytes = read_file(file);
  const std::string good = bytes;
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
  write_file_atomically(file, bytes);
  status = evaluate(saved, {}, &log);
  EXPECT_EQ(status.code, 1) << log;
  EXPECT_NE(log.find("E pstrain-worker: " + file + ": checksum mismatch (corrupted)"), std::string::npos) << log;
  write_file_atomically(file, good);
  EXPECT_TRUE(evaluate(saved, {}, &log).ok()) << log;

  std::filesystem::remove_all(saved + "/embeddings");
  status = worker({"--init-params", saved, "--predict", *dir_ + "/test.tsv", "--predictions", *dir_ + "/q.npy"}, &log);
  EXPECT_EQ(status.code, 1) << log;
  EXPECT_NE(log.find(saved + "/model.json describes embedding tables, but there is no " + saved + "/embeddings/"),
            std::string::npos)
      << log;
  EXPECT_FALSE(std::filesystem::exists(*dir_ + "/q.npy"));
}

}  // namespace
}  // namespace pstrain::test
