// Options of a training job. Both binaries (pstrain-ps, pstrain-worker) accept the same flags
// and config files, so launch/launch.sh can hand every process the same job description; each
// process uses the part it needs. Boost.Program_options stays in options.cc. JobOptions is seen
// only by shared/config/ and the mains: each part takes its own small options struct, which the
// mains fill from this one through the converters (shared/config/part_options.h for the parts in
// shared/, ps/options_from_job.h, worker/options_from_job.h; docs/architecture.md, "Options: one
// struct per part"). Every field's comment gives its default.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "shared/config/data_files.h"
#include "shared/util/modes.h"
#include "shared/train/optimizer.h"  // OptimizerOptions

namespace pstrain {

enum class Role { kPs, kWorker };

struct HostPort {
  std::string host;
  int port = 0;
};

// Where a process's place in the cluster came from (docs/cluster.md, "Roles from the
// environment"): "flag", "TF_CONFIG", "Slurm", "Open MPI", "config" or "default".
struct ClusterOrigin {
  Role role = Role::kWorker;    // what this process runs as (--role auto may pick the other binary)
  bool evaluator = false;       // TF_CONFIG's task is an evaluator: this process has nothing to do
  std::string role_from = "default", index_from = "default", counts_from = "default";
  std::string peers_from = "default", local_rank_from = "default";
};

struct JobOptions {
  // Cluster.
  Mode mode = Mode::kSync;      // sync (PS barrier per step) | async | ssp | allreduce (no PS on the data path)
  int staleness = 2;            // ssp: a worker may run this many steps ahead of the slowest (0 = sync)
  int backup_workers = 0;       // sync: a step is applied once N - backup_workers workers pushed it
  CollectiveKind collective = CollectiveKind::kRing;  // allreduce: ring (ZeroMQ, host buffers) | nccl (GPU buffers)
  bool shared_memory = true;    // --shared-memory auto: same-host peers use shared memory | off
  std::string coordinator;      // allreduce: host:port of worker 0's rendezvous (worker 0 may use port 0)
  int num_workers = 1;          // N
  int num_ps = 1;               // S
  int index = 0;                // this process's index among its role
  std::vector<std::string> ps_hosts;  // workers: each PS shard's "host:port" or "ipc://NAME", in shard order
  std::string bind = "127.0.0.1";  // PS: address to bind (loopback by default)
  int port = 0;                 // PS: port to bind, 0 = any free port
  std::string ipc;              // PS: also listen on ipc://ipc (same-host workers); empty = TCP only
  std::string port_file;        // PS, and worker 0 in allreduce: write the bound "host:port" here
  double timeout_s = 60;        // deadline of any blocking network wait
  double stall_report_s = 10;   // PS: report a barrier stalled longer than this
  int chunk_kib = 1024;         // PS: largest message payload; slices are sent in chunks of this
  std::string role;             // empty: this binary's role | auto: the environment's | ps | worker
  int local_rank = -1;          // selects the GPU under --device auto; -1: Slurm/Open MPI's, else index
  int base_port = 29500;        // Slurm/Open MPI: PS s listens on base_port + s, allreduce's rendezvous on base_port
  double start_timeout_s = 0;   // how long peers may take to come up at start; 0 = timeout_s
  ClusterOrigin origin;         // filled by parse_job_options, not a flag
  bool data_elsewhere = false;  // not a flag: a worker whose model and data are its caller's (the
                                // Python package): the data flags' checks do not apply
  int64_t max_shard_mib = 0;    // PS: bound on the shard's state (0 = its share of the host)
  int shards_on_host = 0;       // PS: the job's PS shards sharing this host's memory (0 = num_ps)
  bool allow_rejoin = false;    // PS: a worker's HELLO from a new peer replaces it (launch.sh --max-restarts)
  bool check_config = false;    // only parse and check the options, say so and exit (launch.sh --dry-run)
  bool check_config_json = false;  // --check-config --json: say so as the resolved job (shared/config/job_topology.h)
  bool print_kernels = false;   // --kernels: print what the arithmetic runs on and exit

  // Security (docs/security.md): CURVE on every socket when any address is not loopback.
  bool curve = false;           // CURVE also on loopback
  bool insecure = false;        // CURVE off, even off loopback (a warning)
  std::string curve_key_file;   // the job's key file (else $PSTRAIN_CURVE_KEY_FILE / $PSTRAIN_CURVE_SECRET_KEY)

  // Checkpoints (docs/checkpoints.md).
  std::string checkpoint_dir;   // where shard files and manifests go; empty = no checkpoints
  int64_t checkpoint_every = 0; // chief: checkpoint every this many steps (0 = not by steps)
  double checkpoint_secs = 0;   // chief: and when this many seconds passed since the last (0 = not by time)
  int keep_checkpoints = 3;     // chief: complete checkpoints kept (older ones are removed)
  bool resume = false;          // start from the newest usable checkpoint in checkpoint_dir
  bool resume_auto = false;     // --resume auto: ... when the directory holds a complete one, else fresh
  std::vector<std::string> resume_allow;  // fingerprint keys (or "all") a resumed checkpoint may differ in
  OnError checkpoint_errors = OnError::kStop;  // PS: a failed write stops the job | warn and go on

  // Model and data.
  std::vector<int> hidden = {256, 128};  // hidden layer widths of the MLP
  bool hidden_given = false;    // --hidden was given (command line or config file), not its default
  std::string data_dir;         // IDX files; default $FASHION_MNIST_DIR or Debian's package dir
  std::string cache_dir;        // uncompressed data cache; default $XDG_CACHE_HOME/pstrain
  std::string model;            // layer list (docs/models.md); empty: the MLP of `hidden`
  bool recompute = false;       // keep only block inputs in forward, recompute the rest in backward
  bool batchnorm_global = true;  // --batchnorm-stats: global (sync, allreduce) | local (false)
  double label_smoothing = 0;   // training's target: (1 - e) onehot + e / classes
  Loss loss = Loss::kSoftmax;   // softmax cross-entropy over labels | bce | mse | huber over float targets
  double huber_delta = 1.0;     // --loss huber: quadratic within delta of the target, linear beyond
  std::string train_data;       // FEATURES,LABELS (.npy or IDX) or one .csv; empty: data_dir's IDX
  std::string test_data;        // the same for the test set
  double scale = 0;             // uint8 features are multiplied by this (0: 1/255)
  std::string label_column;     // CSV: the label's column, by header name or 0-based index ("": last)
  std::string data_format = "auto";  // auto (by extension) | criteo (--train-data/--test-data are Criteo TSV)
  std::string schema;           // --schema: a JSON feature schema or the preset "criteo" (shared/config/feature_schema.h)
  bool skip_bad_lines = false;  // Criteo, --schema: skip and count lines that do not parse (else exit 1 naming the line)
  int classes = 0;              // number of classes (0: from the training labels; 10 for IDX)
  std::string init_params;      // start from DIR/<variable>.npy (shapes checked against the model)
  bool evaluate = false;        // worker: evaluate --init-params on the test data, no training, no PS
  std::string predict;          // worker: class probabilities of --init-params' model for these records ("": none)
  std::string predictions;      // --predict's output: OUT.npy or OUT.csv
  std::string device = "auto";  // auto | cpu | cuda | cuda:K (auto: GPU index mod count if any)
  double gpu_memory_limit_mib = 0;  // refuse to start if the GPU memory plan exceeds this (0 = none);
                                    // --batch-size auto: the micro-batch's plan fits it (also on the CPU)
  int prefetch = 4;             // batches queued ahead of the trainer
  int threads = 1;              // BLAS threads per worker
  int bind_cpu = -1;            // worker: its training thread runs on this CPU only (-1: anywhere)

  // Training.
  int batch_size = 64;          // micro-batch: samples a worker computes at once (see worker_shares)
  bool batch_auto = false;      // --batch-size auto: the largest micro-batch whose memory plan fits
  bool batch_size_given = false;  // --batch-size was given (not its default)
  std::vector<int> worker_batch;  // samples per step of each worker (empty: from the other flags)
  int64_t global_batch = 0;     // samples per global step, split evenly over the workers (0: unset)
  int accum_steps = 1;          // micro-batches per step (gradient accumulation)
  double slowdown = 1;          // debugging: this worker's compute takes this many times as long
  double push_jitter_ms = 0;    // debugging: a random sleep of up to this long before each push
  std::string inject_faults;    // testing: faults on the messages this process sends (shared/net/fault_endpoint.h)
  int epochs = 10;              // passes over the training set
  int64_t steps = 0;            // stop after this many global steps (0 = no limit)
  uint64_t seed = 42;           // initialisation and shuffling seed (same on every process)
  bool shuffle = true;          // reshuffle every epoch
  bool augment_flip = false;    // training images mirrored left-right, half of them (worker/data/augment.h)
  int augment_shift = 0;        // ... and moved by up to this many pixels each way
  OptimizerOptions optimizer;
  int log_every = 100;          // chief: progress line every this many steps
  std::string save_params;      // chief: write every variable as DIR/<name>.npy at the end
  std::string metrics_file;     // chief: JSON Lines of the progress ("": RUNDIR/metrics.jsonl under launch.sh; "none")
  std::string tensorboard_dir;  // chief: TensorBoard event files ("": RUNDIR/tensorboard under launch.sh; "none")

  // Embedding tables on the PS shards (docs/sparse.md).
  int embedding_dim = 0;         // floats per row; > 0: Criteo data's categorical fields are embedded (0: none)
  std::string embedding_tables = "shared";       // shared: one table for every field | per-field: C1..C26
  std::string embedding_optimizer = "adagrad";   // the tables' optimizer: sgd | adagrad | adam (lazy) | ftrl
  double embedding_lr = 0;       // the tables' learning rate (0: --lr), on --lr-schedule
  int64_t embedding_min_count = 1;  // an ID gets a row at its K-th sighting (reads as zeros until then)
  int64_t embedding_expiry = 0;  // rows unused this many steps are dropped (0: never)
  std::string embedding_pool = "sum";  // a field listing several IDs: sum | mean of their rows
};

// The embedding tables of a job with --embedding-dim, in table-id order: "ids" (shared), or
// "C1".."C26" (per-field, Criteo's categorical fields). Empty without --embedding-dim.
std::vector<std::string> embedding_table_names(const JobOptions& o);

// Samples each worker contributes to one global step, in worker order (docs/operations.md,
// "Batch sizes"): --worker-batch, else --global-batch split evenly (the first G mod N workers
// take one more), else accum_steps * batch_size each. The same on every process of a job.
std::vector<int> worker_shares(const JobOptions& o);
// The micro-batch a worker with `share` samples a step computes at once, unless --batch-size
// auto (which the worker decides from its memory plan): with --worker-batch or --global-batch,
// ceil(share / accum_steps); else batch_size.
int micro_batch(const JobOptions& o, int share);

using EnvMap = std::map<std::string, std::string>;

// Which options the command line and the config file gave (their long names).
struct GivenOptions {
  std::set<std::string> command_line, config;
};

// Parses argv for the given role. Returns nullopt after printing --help; throws pstrain::Error
// with a readable message for bad flags or values. Cluster fields the command line does not give
// come from `env` (TF_CONFIG, Slurm, Open MPI; shared/config/cluster_env.h), then the config file.
// Defined in shared/config/job_config.cc, which joins the two (this file knows no environment).
std::optional<JobOptions> parse_job_options(Role role, int argc, const char* const* argv, const EnvMap& env);
// The same with this process's environment.
std::optional<JobOptions> parse_job_options(Role role, int argc, const char* const* argv);

// parse_job_options' parts: the flags and the config file alone (nullopt after --help), and,
// once the environment has had its say, the defaults that follow from other fields and every
// check (throws pstrain::UsageError).
std::optional<JobOptions> parse_flags(Role role, int argc, const char* const* argv, GivenOptions* given);
void finish_job_options(JobOptions* o);

// "host:port" -> HostPort; throws pstrain::UsageError. Port 0 ("any free port") only if allowed.
HostPort parse_host_port(const std::string& text, bool allow_port_zero = false);

}  // namespace pstrain
