// The chief's metrics file (worker/report/metrics_file.h, docs/operations.md "Metrics file"): a real
// 3-worker job writes one JSON object per progress line, per epoch's evaluation and for the
// summary, whose figures are the ones those log lines print (here rounded as they are); a
// 2-shard job's records hold each shard's apply time and socket bytes, near what its slice
// makes them over TCP, the headers alone through shared memory; a path that cannot be written stops the job before its first step, naming the path.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "shared/train/layout.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) records.push_back(nlohmann::json::parse(line));  // throws if not JSON
  return records;
}

std::vector<nlohmann::json> of_kind(const std::vector<nlohmann::json>& records, const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& r : records) {
    if (r.at("kind") == kind) out.push_back(r);
  }
  return out;
}

// `value` as the log lines print it: 4 decimals.
std::string four(double value) {
  std::ostringstream os;
  os << std::fixed;
  os.precision(4);
  os << value;
  return os.str();
}

Job job_in(const TempDir& dir, const TempDir& data) {
  Job job;
  job.num_workers = 3;
  job.dir = dir.path;
  job.args = {"--data-dir", data.path, "--cache-dir", dir.path, "--hidden", "16", "--epochs", "2", "--batch-size",
              "8", "--optimizer", "adam", "--lr", "0.01", "--log-every", "3", "--device", "cpu"};
  return job;
}

TEST(MetricsFileTest, EveryProgressLineEpochAndTheSummaryAsJsonWithTheFiguresTheLogPrints) {
  TempDir data("metrics-data"), dir("metrics");
  write_synthetic_mnist(data.path, "train", 240, 8, 8, 61, false);
  write_synthetic_mnist(data.path, "t10k", 40, 8, 8, 62, false);
  Job job = job_in(dir, data);
  const std::string path = dir.path + "/out/metrics.jsonl";  // its directory is made
  job.args.insert(job.args.end(), {"--metrics-file", path});
  const JobResult result = run_job(job);
  ASSERT_TRUE(result.ok()) << result.logs;
  const std::vector<nlohmann::json> records = read_lines(path);

  // Progress: "epoch 1/2 step 3/10 (global 3) loss 2.2816 acc 0.1250 samples/s ..."
  const std::regex progress_line(R"(epoch (\d+)/2 step (\d+)/(\d+) \(global (\d+)\) loss ([0-9.]+) acc ([0-9.]+))");
  std::vector<std::smatch> lines;
  for (auto it = std::sregex_iterator(result.logs.begin(), result.logs.end(), progress_line);
       it != std::sregex_iterator(); ++it) {
    lines.push_back(*it);
  }
  const std::vector<nlohmann::json> progress = of_kind(records, "progress");
  ASSERT_EQ(progress.size(), lines.size()) << result.logs;
  ASSERT_GE(progress.size(), 6u);  // 10 steps an epoch: steps 3, 6, 9, 10 of each
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json& r = progress[i];
    EXPECT_EQ(r.at("epoch").get<int>(), std::stoi(lines[i][1])) << r;
    EXPECT_EQ(r.at("epoch_step").get<int>(), std::stoi(lines[i][2])) << r;
    EXPECT_EQ(r.at("step").get<int>(), std::stoi(lines[i][4])) << r;
    EXPECT_EQ(four(r.at("loss").get<double>()), lines[i][5].str()) << r;
    EXPECT_EQ(four(r.at("accuracy").get<double>()), lines[i][6].str()) << r;
    EXPECT_GT(r.at("samples_per_s").get<double>(), 0) << r;
    EXPECT_DOUBLE_EQ(r.at("lr").get<double>(), 0.01) << r;  // --lr 0.01, the constant schedule
    for (const char* part : {"step_ms", "compute_ms", "push_ms", "wait_ms", "pull_ms"}) {
      if (r.at("step").get<int>() > 3) {
        EXPECT_TRUE(r.at("breakdown").contains(part)) << part << " in " << r;
      }
    }
  }

  // Epochs: "epoch 1 done: train loss 2.1 acc 0.2; test loss 2.0 acc 0.3 (...)"
  const std::regex epoch_line(
      R"(epoch (\d+) done: train loss ([0-9.]+) acc ([0-9.]+); test loss ([0-9.]+) acc ([0-9.]+))");
  const std::vector<nlohmann::json> epochs = of_kind(records, "epoch");
  ASSERT_EQ(epochs.size(), 2u) << result.logs;
  size_t e = 0;
  for (auto it = std::sregex_iterator(result.logs.begin(), result.logs.end(), epoch_line);
       it != std::sregex_iterator(); ++it, ++e) {
    ASSERT_LT(e, epochs.size());
    const nlohmann::json& r = epochs[e];
    EXPECT_EQ(r.at("epoch").get<int>(), std::stoi((*it)[1])) << r;
    EXPECT_EQ(four(r.at("train_loss").get<double>()), (*it)[2].str()) << r;
    EXPECT_EQ(four(r.at("train_accuracy").get<double>()), (*it)[3].str()) << r;
    EXPECT_EQ(four(r.at("test_loss").get<double>()), (*it)[4].str()) << r;
    EXPECT_EQ(four(r.at("test_accuracy").get<double>()), (*it)[5].str()) << r;
    EXPECT_EQ(r.at("test_samples").get<int>(), 40) << r;
  }
  EXPECT_EQ(e, 2u);

  // The summary, last: "summary: mode=sync workers=3 ps=1 steps=20 ... test_accuracy=0.4500 | ..."
  const std::vector<nlohmann::json> summary = of_kind(records, "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(records.back(), summary[0]);
  const nlohmann::json& s = summary[0];
  std::smatch m;
  ASSERT_TRUE(std::regex_search(result.logs, m,
                                std::regex(R"(summary: mode=sync workers=3 ps=1 steps=(\d+) .* train_loss=([0-9.]+) )"
                                           R"(train_accuracy=([0-9.]+) test_loss=([0-9.]+) test_accuracy=([0-9.]+))")))
      << result.logs;
  EXPECT_EQ(s.at("mode"), "sync");
  EXPECT_EQ(s.at("workers").get<int>(), 3);
  EXPECT_EQ(s.at("steps").get<int>(), std::stoi(m[1]));
  EXPECT_EQ(four(s.at("train_loss").get<double>()), m[2].str());
  EXPECT_EQ(four(s.at("train_accuracy").get<double>()), m[3].str());
  EXPECT_EQ(four(s.at("test_loss").get<double>()), m[4].str());
  EXPECT_EQ(four(s.at("test_accuracy").get<double>()), m[5].str());
  // Time runs forward through the file.
  for (size_t i = 1; i < records.size(); ++i) {
    EXPECT_GE(records[i].at("time_s").get<double>(), records[i - 1].at("time_s").get<double>());
  }
}

// A job that ends within an epoch (--steps here; a stop alike) evaluates after its last step, and
// that epoch is marked partial in the log line and the record, not passed off as a whole one.
TEST(MetricsFileTest, TheEpochAJobEndsWithinIsMarkedPartial) {
  TempDir data("metrics-data"), dir("metrics");
  write_synthetic_mnist(data.path, "train", 240, 8, 8, 61, false);
  write_synthetic_mnist(data.path, "t10k", 40, 8, 8, 62, false);
  Job job = job_in(dir, data);
  job.num_workers = 1;
  const std::string path = dir.path + "/metrics.jsonl";
  for (size_t i = 0; i + 1 < job.args.size(); ++i) {
    if (job.args[i] == "--batch-size") job.args[i + 1] = "24";  // 10 steps an epoch
  }
  job.args.insert(job.args.end(), {"--metrics-file", path, "--steps", "14"});
  const JobResult result = run_job(job);
  ASSERT_TRUE(result.ok()) << result.logs;
  const std::vector<nlohmann::json> epochs = of_kind(read_lines(path), "epoch");
  ASSERT_EQ(epochs.size(), 2u) << result.logs;
  EXPECT_FALSE(epochs[0].contains("partial")) << epochs[0];
  EXPECT_EQ(epochs[0].at("step").get<int>(), 10);
  EXPECT_EQ(epochs[1].at("epoch").get<int>(), 2);
  EXPECT_EQ(epochs[1].at("step").get<int>(), 14);
  EXPECT_TRUE(epochs[1].at("partial").get<bool>()) << epochs[1];
  EXPECT_EQ(epochs[1].at("epoch_steps").get<int>(), 4) << epochs[1];
  EXPECT_TRUE(std::regex_search(result.logs, std::regex(R"(epoch 2 done: .* \(partial epoch: 4 of 10 steps; evaluated in )")))
      << result.logs;
  EXPECT_FALSE(std::regex_search(result.logs, std::regex(R"(epoch 1 done: .*partial)"))) << result.logs;
}

// Over TCP (no shared memory), a sync step brings shard s N pushes of its slice and sends N
// copies of it back, each with a header of a few hundred bytes: per step, within a factor of 2
// of N x slice x 4 bytes each way (the first record also holds the HELLOs and the chief's INIT).
TEST(MetricsFileTest, EachPsShardsApplyTimeAndSocketBytesPerStepInEveryProgressRecord) {
  TempDir data("metrics-data"), dir("metrics");
  write_synthetic_mnist(data.path, "train", 240, 8, 8, 61, false);
  write_synthetic_mnist(data.path, "t10k", 40, 8, 8, 62, false);
  Job job = job_in(dir, data);
  job.num_ps = 2;
  const std::string path = dir.path + "/metrics.jsonl";
  job.args.insert(job.args.end(), {"--metrics-file", path, "--shared-memory", "off"});
  const JobResult result = run_job(job);
  ASSERT_TRUE(result.ok()) << result.logs;
  const std::vector<nlohmann::json> progress = of_kind(read_lines(path), "progress");
  ASSERT_GE(progress.size(), 6u);

  const std::vector<Slice> slices = balance_slices(64 * 16 + 16 + 16 * 10 + 10, 2);  // 8x8 -> 16 -> 10
  constexpr double kMiB = 1024.0 * 1024.0;
  double applied_ms[2] = {0, 0};
  int64_t previous_step = 0;
  for (const nlohmann::json& r : progress) {
    ASSERT_TRUE(r.contains("ps")) << r;
    ASSERT_EQ(r.at("ps").size(), 2u) << r;
    const int64_t steps = r.at("step").get<int64_t>() - previous_step;
    previous_step = r.at("step").get<int64_t>();
    for (size_t s = 0; s < 2; ++s) {
      const nlohmann::json& f = r.at("ps").at("ps" + std::to_string(s));
      const double volume = 3.0 * static_cast<double>(slices[s].length) * sizeof(float);  // N x slice
      EXPECT_GE(f.at("in_mib").get<double>() * kMiB, volume) << "ps" << s << " in " << r;
      EXPECT_LE(f.at("in_mib").get<double>() * kMiB, 2 * volume) << "ps" << s << " in " << r;
      EXPECT_GE(f.at("out_mib").get<double>() * kMiB, volume) << "ps" << s << " in " << r;
      EXPECT_LE(f.at("out_mib").get<double>() * kMiB, 2 * volume) << "ps" << s << " in " << r;
      EXPECT_GE(f.at("apply_ms").get<double>(), 0) << r;
      EXPECT_LT(f.at("apply_ms").get<double>(), r.at("ms_per_step").get<double>()) << "within the step: " << r;
      applied_ms[s] += f.at("apply_ms").get<double>() * static_cast<double>(steps);
    }
  }
  EXPECT_GT(applied_ms[0], 0);
  EXPECT_GT(applied_ms[1], 0);
  // The progress lines say it in short: "; ps apply 0.00 ms max (ps1), in 0.01 MiB, out 0.01 MiB per step".
  const std::regex ps_part(R"(; ps apply [0-9.]+ ms max \(ps[01]\), in [0-9.]+ MiB, out [0-9.]+ MiB per step)");
  EXPECT_EQ(static_cast<size_t>(std::distance(std::sregex_iterator(result.logs.begin(), result.logs.end(), ps_part),
                                              std::sregex_iterator())),
            progress.size())
      << result.logs;
}

// On one host (the PS reached at ipc://@NAME, --shared-memory auto) the gradients and parameters
// go through shared memory, which no socket carries: the shards' bytes are the headers alone.
TEST(MetricsFileTest, PayloadsInSharedMemoryAreNotSocketBytes) {
  TempDir data("metrics-data"), dir("metrics");
  write_synthetic_mnist(data.path, "train", 240, 8, 8, 61, false);
  write_synthetic_mnist(data.path, "t10k", 40, 8, 8, 62, false);
  Job job = job_in(dir, data);
  job.num_ps = 2;
  job.ipc = true;
  const std::string path = dir.path + "/metrics.jsonl";
  job.args.insert(job.args.end(), {"--metrics-file", path});
  const JobResult result = run_job(job);
  ASSERT_TRUE(result.ok()) << result.logs;
  const std::vector<nlohmann::json> progress = of_kind(read_lines(path), "progress");
  ASSERT_GE(progress.size(), 6u);
  const std::vector<Slice> slices = balance_slices(64 * 16 + 16 + 16 * 10 + 10, 2);
  for (size_t i = 1; i < progress.size(); ++i) {  // the first holds the INIT, a payload frame
    for (size_t s = 0; s < 2; ++s) {
      const nlohmann::json& f = progress[i].at("ps").at("ps" + std::to_string(s));
      const double volume = 3.0 * static_cast<double>(slices[s].length) * sizeof(float);
      EXPECT_GT(f.at("in_mib").get<double>(), 0) << progress[i];
      EXPECT_LT(f.at("in_mib").get<double>() * 1024 * 1024, volume / 2) << progress[i];
      EXPECT_LT(f.at("out_mib").get<double>() * 1024 * 1024, volume / 2) << progress[i];
    }
  }
}

TEST(MetricsFileTest, AnUnwritablePathStopsTheJobBeforeItsFirstStepNamingIt) {
  TempDir data("metrics-data"), dir("metrics");
  write_synthetic_mnist(data.path, "train", 240, 8, 8, 61, false);
  write_synthetic_mnist(data.path, "t10k", 40, 8, 8, 62, false);
  Job job = job_in(dir, data);
  job.args.insert(job.args.end(), {"--metrics-file", "/proc/pstrain-no-such/metrics.jsonl", "--timeout", "2"});
  const JobResult result = run_job_stopping_servers(job);
  EXPECT_FALSE(result.ok());
  EXPECT_NE(result.logs.find("--metrics-file: cannot create directory /proc/pstrain-no-such: "), std::string::npos)
      << result.logs;
  EXPECT_EQ(result.logs.find("epoch 1/2 step"), std::string::npos) << "a step ran:\n" << result.logs;
}

}  // namespace
}  // namespace pstrain::test
