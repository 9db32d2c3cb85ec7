#include "shared/config/job_topology.h"

#include <nlohmann/json.hpp>

#include "shared/config/data_files.h"
#include "shared/util/error.h"

namespace pstrain {
namespace {

// The value of `text` among `choices`, else a UsageError with `message`.
template <typename T>
T pick(const std::string& text, const std::vector<std::pair<const char*, T>>& choices, const std::string& message) {
  for (const auto& [name, value] : choices) {
    if (text == name) return value;
  }
  throw UsageError(message);
}

DataKind data_kind(const JobOptions& o) {
  const std::string format = o.schema.empty() ? o.data_format : "schema";
  for (const auto& [value, flag] : {std::pair{o.train_data, "--train-data"}, std::pair{o.test_data, "--test-data"},
                                    std::pair{o.predict, "--predict"}}) {
    if (value.empty()) continue;
    return parse_data_files(value, flag, format).format;
  }
  return DataKind::kIdx;  // --data-dir's IDX files
}

}  // namespace

JobChoices parse_job_choices(const JobOptions& o) {
  JobChoices c;
  c.embedding_tables = pick<EmbeddingTables>(
      o.embedding_tables, {{"shared", EmbeddingTables::kShared}, {"per-field", EmbeddingTables::kPerField}},
      "--embedding-tables: '" + o.embedding_tables + "' is not one of shared, per-field");
  c.embedding_optimizer = pick<TableOptimizer>(
      o.embedding_optimizer,
      {{"sgd", TableOptimizer::kSgd}, {"adagrad", TableOptimizer::kAdagrad}, {"adam", TableOptimizer::kAdam},
       {"ftrl", TableOptimizer::kFtrl}},
      "--embedding-optimizer: '" + o.embedding_optimizer + "' is not one of sgd, adagrad, adam, ftrl");
  c.embedding_pool = pick<EmbeddingPool>(o.embedding_pool, {{"sum", EmbeddingPool::kSum}, {"mean", EmbeddingPool::kMean}},
                                         "--embedding-pool: '" + o.embedding_pool + "' is not one of sum, mean");
  const std::string bad_device = "--device: '" + o.device + "' is not one of auto, cpu, cuda, cuda:K";
  if (o.device.rfind("cuda:", 0) == 0) {
    const std::string k = o.device.substr(5);
    if (k.empty() || k.size() > 4 || k.find_first_not_of("0123456789") != std::string::npos) throw UsageError(bad_device);
    c.device = DeviceKind::kCuda;
    c.device_index = std::stoi(k);
  } else {
    c.device = pick<DeviceKind>(o.device, {{"auto", DeviceKind::kAuto}, {"cpu", DeviceKind::kCpu}, {"cuda", DeviceKind::kCuda}},
                                bad_device);
  }
  c.data = data_kind(o);
  return c;
}

JobTopology job_topology(const JobOptions& o) {
  JobTopology t;
  t.role = o.origin.role;
  t.index = o.index;
  t.mode = o.mode;
  t.hybrid = o.mode == Mode::kAllreduce && o.embedding_dim > 0;
  t.has_ps = o.mode != Mode::kAllreduce || t.hybrid;
  t.ps_mode = t.hybrid ? Mode::kSync : o.mode;
  t.num_workers = o.num_workers;
  t.num_ps = t.has_ps ? o.num_ps : 0;
  t.tables = embedding_table_names(o);
  t.table_shards = t.hybrid ? o.num_ps : 0;
  t.checkpoint_shards = o.mode == Mode::kAllreduce ? 1 + t.table_shards : o.num_ps;
  t.choices = parse_job_choices(o);
  return t;
}

std::string job_json(const JobOptions& o, const JobTopology& t) {
  const JobChoices& c = t.choices;
  nlohmann::ordered_json j;
  j["role"] = t.role == Role::kPs ? "ps" : "worker";
  j["index"] = t.index;
  j["mode"] = mode_name(t.mode);
  j["ps_mode"] = t.has_ps ? nlohmann::ordered_json(mode_name(t.ps_mode)) : nlohmann::ordered_json();
  j["hybrid"] = t.hybrid;
  j["num_workers"] = t.num_workers;
  j["num_ps"] = t.num_ps;
  j["table_shards"] = t.table_shards;
  j["checkpoint_shards"] = t.checkpoint_shards;
  j["tables"] = t.tables;
  j["embedding_dim"] = o.embedding_dim;
  j["embedding_tables"] = embedding_tables_name(c.embedding_tables);
  j["embedding_pool"] = embedding_pool_name(c.embedding_pool);
  j["embedding_optimizer"] = table_optimizer_name(c.embedding_optimizer);
  j["data"] = data_kind_name(c.data);
  j["model"] = o.model;
  j["hidden"] = o.hidden;
  j["loss"] = loss_name(o.loss);
  j["optimizer"] = optimizer_kind_name(o.optimizer.kind);
  j["device"] = device_kind_name(c.device);
  j["device_index"] = c.device_index;
  // What launch.sh plans with besides the shape: the batches, the checkpoints, the addresses.
  j["worker_batches"] = worker_shares(o);
  j["batch_size"] = o.batch_size;
  j["batch_auto"] = o.batch_auto;
  j["global_batch"] = o.global_batch;
  j["accum_steps"] = o.accum_steps;
  j["checkpoint_dir"] = o.checkpoint_dir;
  j["metrics_file"] = o.metrics_file;
  j["bind"] = o.bind;
  j["bind_cpu"] = o.bind_cpu;
  j["curve"] = o.curve;
  j["insecure"] = o.insecure;
  j["timeout_s"] = o.timeout_s;
  j["start_timeout_s"] = o.start_timeout_s;
  return j.dump();
}

}  // namespace pstrain
