#include "worker/options_from_job.h"

#include <cstdlib>
#include <numeric>

#include "shared/config/cluster_env.h"
#include "shared/config/feature_schema.h"
#include "shared/config/job_topology.h"
#include "shared/config/part_options.h"
#include "shared/train/row_init.h"

namespace pstrain {

BackendOptions backend_options(const JobOptions& o) {
  BackendOptions b;
  const JobChoices c = parse_job_choices(o);
  b.device = c.device;
  b.device_index = c.device_index;
  b.threads = o.threads;
  b.local_rank = o.local_rank;
  b.gpu_memory_limit_mib = o.gpu_memory_limit_mib;
  return b;
}

DataOptions data_options(const JobOptions& o) {
  DataOptions d;
  d.data_dir = o.data_dir;
  d.cache_dir = o.cache_dir;
  d.train_data = o.train_data;
  d.test_data = o.test_data;
  d.scale = o.scale;
  d.label_column = o.label_column;
  d.data_format = o.schema.empty() ? o.data_format : "schema";
  d.schema = o.schema;
  d.skip_bad_lines = o.skip_bad_lines;
  d.classes = o.classes;
  d.evaluate = o.evaluate || !o.predict.empty();
  d.loss = o.loss;
  return d;
}

PsClientOptions ps_client_options(const JobOptions& o) {
  PsClientOptions c;
  c.index = o.index;
  c.num_workers = o.num_workers;
  c.num_ps = o.num_ps;
  c.mode = job_topology(o).ps_mode;  // hybrid mode: the tables' steps are sync steps
  c.backup_workers = o.backup_workers;
  const std::vector<int> shares = worker_shares(o);
  c.samples_per_step = std::accumulate(shares.begin(), shares.end(), uint64_t{0},
                                       [](uint64_t sum, int b) { return sum + static_cast<uint64_t>(b); });
  c.timeout_s = o.timeout_s;
  c.start_timeout_s = o.start_timeout_s;
  c.shared_memory = o.shared_memory;
  c.row_dim = static_cast<uint32_t>(o.embedding_dim);
  return c;
}

ExchangeOptions exchange_options(const JobOptions& o) {
  ExchangeOptions e;
  e.index = o.index;
  e.mode = o.mode;
  e.staleness = o.staleness;
  e.backup_workers = o.backup_workers;
  e.optimizer = o.optimizer;
  e.checkpoint = checkpoint_options(o);
  e.client = ps_client_options(o);
  return e;
}

EmbeddingSetup embedding_setup(const JobOptions& o) {
  EmbeddingSetup e;
  e.dim = static_cast<uint32_t>(o.embedding_dim);
  const JobTopology topology = job_topology(o);
  const JobChoices& c = topology.choices;
  e.per_field_tables = c.embedding_tables == EmbeddingTables::kPerField;
  e.tables = topology.tables;
  e.init = row_init_name(row_init_for(c.embedding_optimizer));  // as the PS makes its tables
  e.seed = o.seed;
  e.min_count = o.embedding_min_count;
  e.optimizer = table_optimizer_name(c.embedding_optimizer);
  e.num_ps = o.num_ps;
  e.pool = c.embedding_pool;
  if (!o.schema.empty()) e.schema = load_feature_schema(o.schema).canonical();
  return e;
}

EvaluateOptions evaluate_options(const JobOptions& o) {
  EvaluateOptions e;
  e.init_params = o.init_params;
  e.model_given = !o.model.empty() || o.hidden_given;
  e.model = o.model;
  e.hidden = o.hidden;
  e.data = data_options(o);
  e.backend = backend_options(o);
  e.embedding_dim = o.embedding_dim;
  const EmbeddingSetup tables = embedding_setup(o);
  e.per_field_tables = tables.per_field_tables;
  e.pool = tables.pool;
  return e;
}

namespace {

// --metrics-file or --tensorboard-dir (`flag_value`); by default RUNDIR/`in_run_dir` for a
// process launch.sh started on its own host (PSTRAIN_RUN_DIR), none otherwise; "none" turns it off.
std::string chief_output_of(const std::string& flag_value, const char* in_run_dir) {
  if (flag_value == "none") return "";
  if (!flag_value.empty()) return flag_value;
  const char* run_dir = std::getenv("PSTRAIN_RUN_DIR");
  return run_dir != nullptr && *run_dir != '\0' ? std::string(run_dir) + "/" + in_run_dir : std::string();
}

}  // namespace

PredictOptions predict_options(const JobOptions& o) {
  PredictOptions p;
  p.model = evaluate_options(o);
  p.data = p.model.data;
  p.data.test_data = o.predict;
  p.data.predict = true;
  p.output = o.predictions;
  return p;
}

TrainOptions train_options(const JobOptions& o) {
  TrainOptions t;
  t.index = o.index;
  t.num_workers = o.num_workers;
  t.worker_batches = worker_shares(o);
  t.micro_batch = micro_batch(o, t.worker_batches[static_cast<size_t>(o.index)]);
  t.batch_auto = o.batch_auto;
  t.model = o.model;
  t.hidden = o.hidden;
  t.recompute = o.recompute;
  t.batchnorm_global = o.batchnorm_global && (o.mode == Mode::kSync || o.mode == Mode::kAllreduce);
  t.label_smoothing = static_cast<float>(o.label_smoothing);
  t.huber_delta = static_cast<float>(o.huber_delta);
  t.embeddings = embedding_setup(o);
  t.epochs = o.epochs;
  t.steps = o.steps;
  t.seed = o.seed;
  t.shuffle = o.shuffle;
  t.augment.flip = o.augment_flip;
  t.augment.shift = o.augment_shift;
  t.augment.seed = o.seed;
  t.prefetch = o.prefetch;
  t.bind_cpu = o.bind_cpu;
  t.slowdown = o.slowdown;
  t.init_params = o.init_params;
  t.model_given = !o.model.empty() || o.hidden_given;
  t.save_params = o.save_params;
  t.metrics_file = chief_output_of(o.metrics_file, "metrics.jsonl");
  t.tensorboard_dir = chief_output_of(o.tensorboard_dir, "tensorboard");
  t.data = data_options(o);
  t.backend = backend_options(o);
  t.checkpoint = checkpoint_options(o);
  t.checkpoint_shards = job_topology(o).checkpoint_shards;
  t.evaluation = EvaluationOptions{o.index, o.num_workers, o.mode, o.backup_workers};
  t.progress = ProgressOptions{o.mode, o.num_workers, o.num_ps, o.epochs, o.log_every, o.optimizer, o.loss};
  t.placement = [o](const std::string& device) { return describe_placement(o, device); };
  return t;
}

}  // namespace pstrain
