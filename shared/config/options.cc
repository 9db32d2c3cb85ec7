#include "shared/config/options.h"

#include <boost/program_options.hpp>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "shared/config/data_files.h"
#include "shared/config/feature_schema.h"
#include "shared/config/job_topology.h"
#include "shared/config/model_embedding.h"
#include "shared/net/zmq_util.h"  // kMaxIpcName
#include "shared/util/error.h"
#include "shared/util/text.h"

namespace pstrain {
namespace po = boost::program_options;
namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, sep)) {
    if (!item.empty()) parts.push_back(item);
  }
  return parts;
}

int parse_int(const std::string& text, const std::string& what) {
  size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) throw UsageError(what + ": '" + text + "' is not an integer");
  return value;
}

struct TextOptions {  // flags parsed from text after Boost.Program_options has stored them
  std::string hidden, ps_hosts, shuffle, batch_size, worker_batch, resume_allow, resume = "off";
  std::string mode = "sync", collective = "ring", shared_memory = "auto", checkpoint_errors = "stop";
  std::string loss = "softmax", optimizer = "adam", lr_schedule = "constant";
  std::string batchnorm_stats = "global";
  std::string augment_flip = "false";
};

po::options_description describe(JobOptions& o, TextOptions& t) {
  po::options_description cluster("Cluster");
  cluster.add_options()
      ("mode", po::value(&t.mode)->default_value(t.mode), "sync (parameter servers, barrier per step: N workers equal one process on the concatenated batch) | async (the PS applies each worker's gradient as it arrives; pulls get the newest parameters) | ssp (stale synchronous: a worker may run --staleness steps ahead of the slowest) | allreduce (workers sum gradients among themselves and apply the optimizer locally; no PS, except with --embedding-dim: hybrid mode, the tables on the PS shards)")
      ("staleness", po::value(&o.staleness)->default_value(o.staleness), "ssp: how many steps a worker may run ahead of the slowest one (0 = exactly sync)")
      ("backup-workers", po::value(&o.backup_workers)->default_value(o.backup_workers), "sync: apply a step once N - this many workers pushed it (TensorFlow's replicas_to_aggregate = N - b); later pushes for it are dropped and counted, so a stalled worker does not stop the job")
      ("collective", po::value(&t.collective)->default_value(t.collective), "allreduce: ring (over ZeroMQ on host buffers; works without a GPU) | nccl (GPU buffers)")
      ("shared-memory", po::value(&t.shared_memory)->default_value(t.shared_memory), "auto: peers on the same host move gradients and parameters through shared-memory segments in /dev/shm instead of the sockets (a worker and each PS shard on its host; the all-reduce ring when every rank is on one host); a worker's headers to a PS reached at ipc://@NAME then skip ZeroMQ's I/O threads too (a local socket, @NAME.local); peers elsewhere, or a /dev/shm too small, use the sockets | off: always the sockets (docs/wire_protocol.md, docs/collective.md)")
      ("coordinator", po::value(&o.coordinator), "allreduce: host:port where worker 0 listens for the rendezvous (worker 0 may give port 0 and report the bound address with --port-file)")
      ("num-workers", po::value(&o.num_workers)->default_value(o.num_workers), "number of workers N")
      ("num-ps", po::value(&o.num_ps)->default_value(o.num_ps), "number of parameter-server shards S")
      ("index", po::value(&o.index)->default_value(o.index), "index of this process within its role (0-based)")
      ("role", po::value(&o.role), "auto | ps | worker: what this process runs as (default: this binary's role; TF_CONFIG, Slurm or Open MPI saying otherwise is an error). auto: the environment's role, switching to the other binary (found beside this one, same arguments) when needed, so every rank can run one command (docs/cluster.md)")
      ("local-rank", po::value(&o.local_rank), "this process's rank among the job's processes on its host; --device auto takes GPU (local rank mod visible GPUs) (default: SLURM_LOCALID or OMPI_COMM_WORLD_LOCAL_RANK, else --index)")
      ("base-port", po::value(&o.base_port)->default_value(o.base_port), "under Slurm or Open MPI: PS s listens on base-port + s on its rank's host; in allreduce mode the rendezvous is on base-port on rank 0's host")
      ("start-timeout", po::value(&o.start_timeout_s)->default_value(o.start_timeout_s), "seconds a worker waits at start for the PS shards (allreduce: the rendezvous) to come up, logging 'waiting for ps<s> at host:port'; 0 = --timeout")
      ("ps-hosts", po::value(&t.ps_hosts), "worker: every PS shard's host:port, or ipc://NAME for a shard on this host started with --ipc NAME; comma-separated, in shard order")
      ("bind", po::value(&o.bind)->default_value(o.bind), "PS: address to bind (loopback by default; 0.0.0.0 = all interfaces)")
      ("port", po::value(&o.port)->default_value(o.port), "PS: port to bind; 0 picks a free port")
      ("ipc", po::value(&o.ipc), "PS: also listen on the Unix-domain socket ipc://NAME, for workers on the same host (less CPU per byte than TCP loopback); NAME is a path (refused while another server listens on it; a stale file is replaced), or @name in Linux's abstract namespace (no file)")
      ("port-file", po::value(&o.port_file), "PS (and worker 0 in allreduce mode): once bound, write host:port to this file")
      ("timeout", po::value(&o.timeout_s)->default_value(o.timeout_s), "seconds any blocking network wait may take before the process fails")
      ("stall-report", po::value(&o.stall_report_s)->default_value(o.stall_report_s), "PS: seconds a barrier may wait before the missing workers are reported")
      ("chunk-kib", po::value(&o.chunk_kib)->default_value(o.chunk_kib), "PS: KiB per message; a slice travels as chunks of this size, each applied and sent back as soon as all workers pushed it")
      ("curve", po::bool_switch(&o.curve), "encrypt and authenticate every connection with the job's CURVE key also on loopback (it is on by default whenever an address is not loopback; docs/security.md)")
      ("insecure", po::bool_switch(&o.insecure), "no CURVE, even off loopback (warns): anyone who reaches the ports can join the job")
      ("curve-key-file", po::value(&o.curve_key_file), "the job's key file (mode 0600; made by pstrain-keygen; default $PSTRAIN_CURVE_KEY_FILE, or the secret key in $PSTRAIN_CURVE_SECRET_KEY)")
      ("allow-rejoin", po::bool_switch(&o.allow_rejoin), "PS: accept a worker's HELLO from a new peer as the replacement of that worker (it redoes the step its predecessor left; launch.sh --max-restarts passes this); costs one copy of the slice per step, kept for such a replacement")
      ("max-shard-mib", po::value(&o.max_shard_mib)->default_value(o.max_shard_mib), "PS: the MiB this shard may hold: a model whose slice (with its gradient sum and optimizer state) needs more is refused at the first HELLO, and a step whose new embedding rows would take the tables past what the slice leaves stops the PS naming it (0 = this host's memory less 1/8, shared among --shards-on-host, less a save's 16 bytes an embedding row; the PS logs the figure)")
      ("shards-on-host", po::value(&o.shards_on_host)->default_value(o.shards_on_host), "PS: the job's PS shards on this host, which share its memory for --max-shard-mib's default (0 = --num-ps: all of them; launch.sh passes its placement's count)");
  po::options_description model("Model and data");
  model.add_options()
      ("hidden", po::value(&t.hidden)->default_value("256,128"), "hidden layer widths of the MLP, comma-separated (empty: softmax regression)")
      ("data-dir", po::value(&o.data_dir), "directory of {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (default: $FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)")
      ("cache-dir", po::value(&o.cache_dir), "where gzip inputs are decompressed and CSV and Criteo files parsed once, each into a file named after its source's path, size and mtime (default: $XDG_CACHE_HOME/pstrain or ~/.cache/pstrain)")
      ("model", po::value(&o.model), "the model as a layer list, e.g. \"conv 32 3 pad=1, relu, maxpool 2, flatten, dense 128, relu, dropout 0.25, dense 10\"; residual(<layers>) is a block whose input is added to its output (projected where the shapes differ), e.g. \"conv 32 3 pad=1, relu, residual(conv 32 3 pad=1, relu, conv 32 3 pad=1), relu, globalavgpool, dense 10\"; bottom K(<layers>) runs its layers on the first K values and passes the rest on (DLRM's bottom MLP), e.g. \"embedding 8, bottom 13(dense 64, relu, dense 8), dot 27 8, dense 256, relu, dense 1\"; a CTR model on Criteo data may begin with its embedding tables, \"embedding D [tables=shared|per-field] [pool=sum|mean]\" (the same as --embedding-dim D --embedding-tables ... --embedding-pool ...), e.g. \"embedding 8, dense 256, relu, dense 1\" with --loss bce (docs/models.md; default: the MLP of --hidden)")
      ("label-smoothing", po::value(&o.label_smoothing)->default_value(o.label_smoothing), "training's cross-entropy against (1 - E) x the one-hot label + E / classes (PyTorch's CrossEntropyLoss(label_smoothing=E)); the test loss stays the plain one; in [0, 1)")
      ("loss", po::value(&t.loss)->default_value(t.loss), "what the model's last layer's K outputs are trained against (docs/models.md, \"Losses\"): softmax (cross-entropy over class labels; test accuracy) | bce (binary cross-entropy with logits, K independent 0/1 labels per record: multi-label; test per-label accuracy and exact match; on Criteo data a CTR model of one output, p(click) = sigmoid, the clicks its targets; test AUC, log loss and accuracy) | mse | huber (regression against K float targets; test RMSE, MAE, R^2); each a sample's mean over its K outputs, as PyTorch's reduction='mean'. Other than softmax, the targets come from --train-data/--test-data's second .npy file, of shape (N,) or (N, K), or the CSV columns of --label-column (docs/data.md, \"Targets\")")
      ("huber-delta", po::value(&o.huber_delta)->default_value(o.huber_delta), "--loss huber: 0.5 d^2 where |d| <= delta, else delta (|d| - delta/2), d the output's error (PyTorch's HuberLoss(delta)); positive")
      ("batchnorm-stats", po::value(&t.batchnorm_stats)->default_value(t.batchnorm_stats), "batchnorm layers' batch statistics in --mode sync and allreduce: global (each step's sums combined across the workers, so N workers equal one process on the concatenated batch; not with --accum-steps or --backup-workers) | local (each worker's own batch, as TensorFlow's MirroredStrategy: breaks that contract). async and ssp always use local statistics (docs/models.md)")
      ("recompute", po::bool_switch(&o.recompute), "activation recomputation: keep only the inputs of layer blocks during forward and recompute the rest during backward (less memory, more compute; the same parameters)")
      ("train-data", po::value(&o.train_data), "training data: FEATURES,LABELS (two .npy files: float32 or uint8 features of shape (N, ...), integer labels of shape (N,); or two IDX files), one FILE.csv (features and a label column) or one Criteo TSV file FILE.tsv or FILE.txt (label, 13 integer and 26 hex categorical fields; see --data-format); gzip allowed; needs --test-data (docs/data.md; default: the IDX files in --data-dir). With --loss bce|mse|huber LABELS.npy holds float targets of shape (N,) or (N, K), and a CSV file's --label-column the target columns (docs/data.md, \"Targets\")")
      ("test-data", po::value(&o.test_data), "test data, in the same forms as --train-data; its records must have the training records' shape and its labels be below the training set's classes (default: the IDX files in --data-dir)")
      ("scale", po::value(&o.scale)->default_value(o.scale), "uint8 features (.npy and IDX) are multiplied by this (0: 1/255); float32 and CSV features are used as they are")
      ("label-column", po::value(&o.label_column), "CSV: the label's column, by header name or 0-based index, a name first (default: the last column); the other columns are the features. With --loss bce|mse|huber: the target columns, comma-separated (e.g. y1,y2 or 4,5), in the order the model's outputs take them")
      ("data-format", po::value(&o.data_format)->default_value(o.data_format), "auto: --train-data / --test-data's format from their extensions (.npy pairs, IDX pairs, .csv, Criteo .tsv/.txt, each optionally .gz); criteo: each is one Criteo TSV file whatever its name (docs/data.md, \"Criteo (CTR) data\")")
      ("schema", po::value(&o.schema), "a CTR data set's columns: FILE.json (\"delimiter\": tab | comma, \"header\": true | false, \"columns\": each {\"name\", \"type\"}: label (0/1, optional in a file to --predict), numeric (\"transform\": none | log1p, \"integer\"), categorical (\"ids\": string | int | hex, hashed to 64-bit IDs; \"separator\": a multi-valued column, pooled by --embedding-pool), ignore) or the preset criteo (Criteo's 40 columns, the same bits as the Criteo reader). --train-data, --test-data and --predict are then each one TSV or CSV file, plain or gzip, or one Parquet file (a build with Parquet), whatever its name (docs/data.md, \"Feature schema\", \"Parquet\")")
      ("skip-bad-lines", po::bool_switch(&o.skip_bad_lines), "Criteo data or --schema: leave out the lines that do not parse and log how many (default: such a line stops the worker with exit 1, naming the file and line)")
      ("classes", po::value(&o.classes)->default_value(o.classes), "number of classes; every training and test label must be in [0, classes) (0: the largest training label + 1, at least 2; 10 for IDX)")
      ("init-params", po::value(&o.init_params), "start from the variables in DIR/<name>.npy (as --save-params writes them): fine-tuning, --evaluate or --predict; the model is DIR/model.json's unless --model/--hidden is given, which must then agree with it. A CTR model's tables start as DIR/embeddings/' rows on the PS shards (docs/sparse.md, \"Fine-tuning\")")
      ("evaluate", po::bool_switch(&o.evaluate), "worker: evaluate --init-params on --test-data (or --data-dir's test set), print loss and accuracy (a model trained with --loss bce|mse|huber: its figures against the data's targets, the loss being model.json's; a CTR model, trained with --embedding-dim: also the AUC and log loss, its rows read from DIR/embeddings/ as model.json describes them), and exit; needs no PS")
      ("predict", po::value(&o.predict), "worker: write the class probabilities (softmax) of --init-params' model for every record of INPUT (any form --test-data takes, labels included: they give the accuracy it prints) to --predictions, and exit; needs no PS. A model trained with --loss mse|huber writes its raw outputs, one with bce each label's sigmoid probability (the loss being model.json's; INPUT then has its targets). A CTR model (--embedding-dim) takes Criteo INPUT and writes p(no click), p(click) (one of one output, --loss bce: p(click)), its rows read from DIR/embeddings/")
      ("predictions", po::value(&o.predictions), "with --predict: the output file, OUT.npy (float32, shape (records, classes)) or OUT.csv (header p0,p1,..., or y0,y1,... for a regression's outputs; a row per record)")
      ("device", po::value(&o.device)->default_value(o.device), "auto | cpu | cuda | cuda:K; auto uses GPU (local rank mod GPU count, see --local-rank) when one is present, else the CPU")
      ("gpu-memory-limit", po::value(&o.gpu_memory_limit_mib)->default_value(o.gpu_memory_limit_mib), "MiB (fractions allowed): refuse to start when this worker's GPU memory plan exceeds it (0 = no limit); its own allocations never exceed the plan (the CUDA context and NCCL's buffers are outside it). With --batch-size auto the micro-batch is chosen to fit it, on the CPU too (then it bounds the same plan in host memory)")
      ("prefetch", po::value(&o.prefetch)->default_value(o.prefetch), "batches read ahead of the trainer")
      ("threads", po::value(&o.threads)->default_value(o.threads), "CPU threads per worker (--device cpu): its products, convolutions and element-wise layers split over them; results equal one thread's within rounding, and the same on every run")
      ("bind-cpu", po::value(&o.bind_cpu)->default_value(o.bind_cpu), "run this worker's training thread and its data reader on this CPU only (ZeroMQ's threads and --threads' helpers stay free); -1: no binding. launch.sh sets it when every worker has a CPU of its own (launch.sh --cpu-bind; docs/operations.md)");
  po::options_description train("Training");
  train.add_options()
      ("batch-size", po::value(&t.batch_size)->default_value("64"), "samples a worker computes at once (its micro-batch); a step is --accum-steps of them, so the global batch is N * accum-steps * batch-size. auto (with --global-batch or --worker-batch): the largest micro-batch whose memory plan fits --gpu-memory-limit (or the GPU's free memory), with as many micro-batches as keep the global batch")
      ("accum-steps", po::value(&o.accum_steps)->default_value(o.accum_steps), "micro-batches a worker accumulates before it pushes its gradient (gradient accumulation; the same result as one batch of that many samples)")
      ("worker-batch", po::value(&t.worker_batch), "samples per step of each worker, comma-separated, e.g. 64,32,96 for GPUs of different sizes: the PS weights each push by its samples, so sync mode still equals one process on their sum (the same list on every process; micro-batches of ceil(b / accum-steps))")
      ("global-batch", po::value(&o.global_batch)->default_value(o.global_batch), "samples per global step, split evenly over the workers (0: N * accum-steps * batch-size)")
      ("slowdown", po::value(&o.slowdown)->default_value(o.slowdown), "debugging: make this worker's compute take this many times as long (>= 1), to study stragglers (bench/stragglers)")
      ("push-jitter-ms", po::value(&o.push_jitter_ms)->default_value(o.push_jitter_ms), "debugging: sleep a random time of up to this many milliseconds before each gradient push, so the PS receives the workers' pushes in varying order (sync results do not change: the tests check they stay bit-identical)")
      ("inject-faults", po::value(&o.inject_faults), "testing: faults on the messages this process sends to its peers (PS or workers), KIND:OP[:N[:SECONDS]] comma-separated, KIND drop | delay | duplicate | reorder | truncate | corrupt, OP PUSH | PULL | PARAMS | ..., N the nth such message (docs/operations.md, \"Faults\")")
      ("epochs", po::value(&o.epochs)->default_value(o.epochs), "passes over the training set")
      ("steps", po::value(&o.steps)->default_value(o.steps), "stop after this many global steps (0 = run all epochs)")
      ("seed", po::value(&o.seed)->default_value(o.seed), "seed of initialisation and shuffling (the same on every process)")
      ("shuffle", po::value(&t.shuffle)->default_value("true"), "reshuffle the training set every epoch: true|false")
      ("augment-flip", po::value(&t.augment_flip)->default_value("false")->implicit_value("true"), "image data: mirror each training image left-right with probability 1/2, drawn per (--seed, epoch, record), so N workers still equal one process (docs/models.md, \"Augmentation\"); test data are never augmented. Written --augment-flip alone; --augment-flip=false (with the =) turns off a config file's")
      ("augment-shift", po::value(&o.augment_shift)->default_value(o.augment_shift), "image data: move each training image by a random (dx, dy) in [-K, K]^2 pixels, 0 filling what moves in, drawn per (--seed, epoch, record); 0: none")
      ("optimizer", po::value(&t.optimizer)->default_value(t.optimizer), "sgd | momentum | adam | adamw (applied on the PS; adamw is Adam, whose --weight-decay is decoupled as AdamW's: give it, e.g. 0.01, PyTorch's AdamW default)")
      ("lr", po::value(&o.optimizer.lr)->default_value(o.optimizer.lr), "learning rate")
      ("momentum", po::value(&o.optimizer.momentum)->default_value(o.optimizer.momentum), "momentum coefficient (--optimizer momentum)")
      ("beta1", po::value(&o.optimizer.beta1)->default_value(o.optimizer.beta1), "Adam first-moment decay")
      ("beta2", po::value(&o.optimizer.beta2)->default_value(o.optimizer.beta2), "Adam second-moment decay")
      ("epsilon", po::value(&o.optimizer.epsilon)->default_value(o.optimizer.epsilon), "Adam epsilon")
      ("lr-schedule", po::value(&t.lr_schedule)->default_value(t.lr_schedule), "constant | cosine | step | cosine-restarts, after --warmup-steps: cosine decays the learning rate to 0 over the job's steps; step multiplies it by --lr-decay-rate every --lr-decay-steps steps; cosine-restarts decays it to 0 over a cycle of --lr-decay-steps steps, then starts again, each cycle --lr-cycle-mult times as long as the one before (SGDR)")
      ("warmup-steps", po::value(&o.optimizer.warmup_steps)->default_value(o.optimizer.warmup_steps), "raise the learning rate linearly from lr/W to lr over the first W steps, then follow --lr-schedule over the rest")
      ("lr-decay-steps", po::value(&o.optimizer.decay_steps)->default_value(o.optimizer.decay_steps), "--lr-schedule step: steps between decays; cosine-restarts: the first cycle's length (both need it)")
      ("lr-decay-rate", po::value(&o.optimizer.decay_rate)->default_value(o.optimizer.decay_rate), "--lr-schedule step: the factor applied at each decay, in (0, 1]")
      ("lr-cycle-mult", po::value(&o.optimizer.cycle_mult)->default_value(o.optimizer.cycle_mult), "--lr-schedule cosine-restarts: each cycle is this many times as long as the one before (>= 1)")
      ("clip-norm", po::value(&o.optimizer.clip_norm)->default_value(o.optimizer.clip_norm), "scale each step's mean gradient down to this global norm where it is longer (0: no clipping; PyTorch's clip_grad_norm_): the norm of the whole gradient, over every PS shard, summed exactly so that the shard count never changes a bit; sync and allreduce modes")
      ("weight-decay", po::value(&o.optimizer.weight_decay)->default_value(o.optimizer.weight_decay), "decoupled weight decay per step, scaled by lr")
      ("log-every", po::value(&o.log_every)->default_value(o.log_every), "chief: print a progress line (loss, accuracy, samples/s and where the step time went, see docs/operations.md) every this many steps and at each epoch's end")
      ("save-params", po::value(&o.save_params), "chief: at the end write every variable as DIR/<name>.npy (float32, C order) and DIR/model.json; with --embedding-dim each PS shard also writes its rows of every table to DIR/embeddings/<table>.shard<s>-of-<S> (docs/sparse.md)")
      ("metrics-file", po::value(&o.metrics_file), "chief: write a JSON object per progress line, per epoch's evaluation and for the summary to PATH, as the run goes (JSON Lines; docs/operations.md, \"Metrics file\"); default under launch.sh: RUNDIR/metrics.jsonl; none: no file")
      ("tensorboard-dir", po::value(&o.tensorboard_dir), "chief: write the same figures as TensorBoard scalars (train/loss, test/accuracy, step_ms/compute, ps0/apply_ms, ...) to an event file in DIR, as the run goes; every worker also writes its own step breakdown to DIR/w<i> (so DIR must be writable on every worker's host); view them with `tensorboard --logdir DIR` (docs/operations.md, \"TensorBoard\"); default under launch.sh: RUNDIR/tensorboard; none: no event file");
  po::options_description emb("Embedding tables on the PS (docs/sparse.md)");
  emb.add_options()
      ("embedding-dim", po::value(&o.embedding_dim)->default_value(o.embedding_dim), "floats per embedding row: with Criteo data, each categorical field's ID becomes a row of a table kept on the PS shards (sharded by the ID's hash, rows made on first use); the model's input is the 13 dense features followed by the 26 rows (or begin --model with 'embedding D': docs/models.md). 0: no embeddings (the categorical fields are not used). --evaluate and --predict take it from --init-params' model.json (given, it must agree)")
      ("embedding-tables", po::value(&o.embedding_tables)->default_value(o.embedding_tables), "shared: one table for all fields (an ID is hashed with its field) | per-field: one table per field, C1..C26")
      ("embedding-optimizer", po::value(&o.embedding_optimizer)->default_value(o.embedding_optimizer), "the tables' optimizer, applied on the PS to the rows a step touched: sgd | adagrad | adam (lazy: a row's moments and bias correction advance only when it is touched) | ftrl (FTRL-Proximal)")
      ("embedding-lr", po::value(&o.embedding_lr)->default_value(o.embedding_lr), "the tables' learning rate, on --lr-schedule (0: --lr)")
      ("embedding-min-count", po::value(&o.embedding_min_count)->default_value(o.embedding_min_count), "an ID gets its row at its K-th sighting (a step in which any worker used it); until then it reads as zeros and its gradients are dropped: rare IDs take no memory")
      ("embedding-expiry", po::value(&o.embedding_expiry)->default_value(o.embedding_expiry), "steps: rows (and sightings) unused this long are dropped, freeing their memory (0: never)")
      ("embedding-pool", po::value(&o.embedding_pool)->default_value(o.embedding_pool), "a categorical field that lists several IDs (\"a,b,c\" in Criteo data, docs/data.md) is one row of the model's input: sum (the sum of its IDs' rows) | mean (their mean); a field of one ID is its row either way, so data of one ID per field trains to the same bits under both. Each ID's row gets the field's gradient (sum) or the field's gradient over the field's count (mean). Recorded in the checkpoint fingerprint and in model.json (\"pool\"): --evaluate, --predict and pstrain-export use the saved one (given with --embedding-dim, it must agree)");
  po::options_description ckpt("Checkpoints (docs/checkpoints.md)");
  ckpt.add_options()
      ("checkpoint-dir", po::value(&o.checkpoint_dir), "directory for checkpoints: each PS shard writes its slice and optimizer state (and its embedding tables) there, the chief a manifest once all shards wrote (allreduce: the chief writes the whole vector; hybrid mode: the chief the dense vector, each PS shard its tables) (use a filesystem every host shares); the chief locks it while the job runs, so a second job there is refused at once (docs/operations.md, \"One job per directory\")")
      ("checkpoint-every", po::value(&o.checkpoint_every)->default_value(o.checkpoint_every), "checkpoint every this many steps (0 = not by steps)")
      ("checkpoint-secs", po::value(&o.checkpoint_secs)->default_value(o.checkpoint_secs), "also checkpoint when this many seconds passed since the last one (0 = not by time)")
      ("keep-checkpoints", po::value(&o.keep_checkpoints)->default_value(o.keep_checkpoints), "complete checkpoints to keep; older ones are removed")
      ("resume", po::value(&t.resume)->implicit_value("on"), "start from the newest usable checkpoint in --checkpoint-dir (a truncated, corrupted, incomplete or other job's checkpoint is named in the log and the one before it is used). --resume=auto: the same where the directory holds a complete checkpoint, else start fresh (for Slurm --requeue and Kubernetes restarts: one command for the first start and every restart). A resumed job may run more (or fewer) steps than the one that saved: the learning-rate schedule is recomputed over the new length")
      ("resume-allow", po::value(&t.resume_allow), "--resume: accept a checkpoint whose job differs from this one in these keys of its fingerprint, comma-separated (mode, model, optimizer, lr, lr-schedule, warmup-steps, lr-decay-steps, lr-decay-rate, lr-cycle-mult, label-smoothing, clip-norm, loss, embeddings, augment, momentum, beta1, beta2, epsilon, weight-decay, seed, shuffle, data, num-workers, worker-batches; or all); each accepted difference is logged. Without it another job's checkpoint is refused, naming what differs (docs/checkpoints.md)")
      ("checkpoint-errors", po::value(&t.checkpoint_errors)->default_value(t.checkpoint_errors), "PS: when a checkpoint cannot be written (disk full, no permission): stop (the job ends with the error; earlier checkpoints stay intact) | warn (log it every time and go on)");
  po::options_description all;
  all.add(cluster).add(model).add(train).add(emb).add(ckpt);
  return all;
}

// The value named `text` among `choices` (in their order in the message); a UsageError naming
// `flag` otherwise ("--mode: 'x' is not one of sync, async, ssp, allreduce").
template <typename T>
T choose(const std::string& flag, const std::string& text, const std::vector<std::pair<const char*, T>>& choices) {
  std::string names;
  std::vector<std::string> all;
  for (const auto& [name, value] : choices) {
    if (text == name) return value;
    names += (names.empty() ? "" : ", ") + std::string(name);
    all.push_back(name);
  }
  throw UsageError(flag + ": '" + text + "' is not one of " + names + did_you_mean(text, all));
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool parse_bool(const std::string& text, const std::string& what) {
  if (text == "true" || text == "1" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "0" || text == "no" || text == "off") return false;
  throw UsageError(what + ": '" + text + "' is not true or false");
}

void validate(const JobOptions& o, Role role) {
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw UsageError(message);
  };
  require(o.staleness >= 0, "--staleness must not be negative");
  require(o.backup_workers >= 0 && o.backup_workers < o.num_workers,
          "--backup-workers must be in [0, N-1] = [0, " + std::to_string(o.num_workers - 1) + "]");
  const bool sync_or_allreduce = o.mode == Mode::kSync || o.mode == Mode::kAllreduce;
  require(o.backup_workers == 0 || o.mode == Mode::kSync, "--backup-workers applies to --mode sync only");
  require(sync_or_allreduce || !o.allow_rejoin,
          std::string("--allow-rejoin (launch.sh --max-restarts) works in sync and allreduce modes only, not --mode ") +
              mode_name(o.mode));
  require(o.backup_workers == 0 || !o.allow_rejoin, "--allow-rejoin (launch.sh --max-restarts) and --backup-workers do not combine yet");
  require(sync_or_allreduce || o.checkpoint_dir.empty(), std::string("--checkpoint-dir works in sync and allreduce "
                                                                     "modes only, not --mode ") +
                                                             mode_name(o.mode) + " (docs/checkpoints.md)");
  require(o.backup_workers == 0 || o.checkpoint_dir.empty(), "--checkpoint-dir and --backup-workers do not combine yet");
  require(o.num_workers >= 1, "--num-workers must be at least 1");
  require(o.num_ps >= 1, "--num-ps must be at least 1");
  const int count = role == Role::kPs ? o.num_ps : o.num_workers;
  require(o.index >= 0 && o.index < count,
          "--index " + std::to_string(o.index) + " is outside [0, " + std::to_string(count) + ")");
  require(o.port >= 0 && o.port <= 65535, "--port must be in [0, 65535]");
  require(o.ipc.size() <= kMaxIpcName, "--ipc: the name may have at most " + std::to_string(kMaxIpcName) + " characters");
  require(o.timeout_s > 0, "--timeout must be positive");
  require(o.stall_report_s > 0, "--stall-report must be positive");
  require(o.chunk_kib >= 1 && o.chunk_kib <= (1 << 20), "--chunk-kib must be in [1, 1048576]");
  require(o.base_port >= 1 && o.base_port + std::max(o.num_ps, 1) - 1 <= 65535,
          "--base-port: base-port + s must be a port in [1, 65535] for every PS s");
  require(o.start_timeout_s >= 0, "--start-timeout must not be negative");
  require(o.local_rank >= 0, "--local-rank must not be negative");
  require(o.bind_cpu >= -1, "--bind-cpu must be a CPU number, or -1 for no binding");
  require(o.max_shard_mib >= 0, "--max-shard-mib must not be negative");
  require(o.shards_on_host >= 0, "--shards-on-host must not be negative");
  require(!(o.curve && o.insecure), "--curve and --insecure contradict each other");
  require(o.checkpoint_every >= 0, "--checkpoint-every must not be negative");
  require(o.checkpoint_secs >= 0 && std::isfinite(o.checkpoint_secs), "--checkpoint-secs must not be negative");
  require(o.keep_checkpoints >= 1, "--keep-checkpoints must be at least 1");
  require(!o.resume || !o.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");

  require(o.batch_size >= 1, "--batch-size must be at least 1 (or auto)");
  require(o.accum_steps >= 1, "--accum-steps must be at least 1");
  require(static_cast<int64_t>(o.accum_steps) * o.batch_size <= (int64_t{1} << 30),
          "--accum-steps x --batch-size is too large");
  require(o.global_batch >= 0, "--global-batch must not be negative");
  require(o.worker_batch.empty() || static_cast<int>(o.worker_batch.size()) == o.num_workers,
          "--worker-batch gives " + std::to_string(o.worker_batch.size()) + " batch sizes for " +
              std::to_string(o.num_workers) + " workers");
  for (int b : o.worker_batch) require(b >= 1, "--worker-batch: every batch size must be at least 1");
  require(o.worker_batch.empty() || o.global_batch == 0, "give --worker-batch or --global-batch, not both");
  require(o.global_batch == 0 || o.global_batch >= o.num_workers,
          "--global-batch " + std::to_string(o.global_batch) + " is smaller than the " + std::to_string(o.num_workers) +
              " workers");
  require(o.global_batch <= (int64_t{1} << 30), "--global-batch is too large");
  require(!o.batch_auto || !o.worker_batch.empty() || o.global_batch > 0,
          "--batch-size auto needs the batch to keep: give --global-batch or --worker-batch");
  require((o.worker_batch.empty() && o.global_batch == 0) || !o.batch_size_given || o.batch_auto,
          "with --worker-batch or --global-batch, --batch-size takes only 'auto' (the micro-batch follows from "
          "--accum-steps)");
  require(std::isfinite(o.slowdown) && o.slowdown >= 1, "--slowdown must be a number >= 1");
  require(std::isfinite(o.push_jitter_ms) && o.push_jitter_ms >= 0 && o.push_jitter_ms <= 60000,
          "--push-jitter-ms must be a number from 0 to 60000");
  require(o.epochs >= 1, "--epochs must be at least 1");
  require(o.steps >= 0, "--steps must not be negative");
  require(o.prefetch >= 1, "--prefetch must be at least 1");
  require(std::isfinite(o.gpu_memory_limit_mib) && o.gpu_memory_limit_mib >= 0 && o.gpu_memory_limit_mib < 1e9,
          "--gpu-memory-limit must be a number of MiB >= 0");
  require(o.threads >= 1, "--threads must be at least 1");
  require(std::isfinite(o.scale) && o.scale >= 0, "--scale must be a number >= 0");
  require(o.classes >= 0 && o.classes != 1 && o.classes <= (1 << 24), "--classes must be 0 (from the data) or in [2, 2^24]");
  require(!o.evaluate || !o.init_params.empty(), "--evaluate needs --init-params DIR (the model to evaluate)");
  require(o.predict.empty() || !o.init_params.empty(), "--predict needs --init-params DIR (the model to predict with)");
  require(o.predict.empty() || !o.evaluate, "--predict and --evaluate are separate runs: give one of them");
  require(o.predict.empty() == o.predictions.empty(),
          o.predict.empty() ? "--predictions needs --predict INPUT (the records to predict)"
                            : "--predict needs --predictions OUT (OUT.npy or OUT.csv)");
  require(o.predictions.empty() || ends_with(o.predictions, ".npy") || ends_with(o.predictions, ".csv"),
          "--predictions: '" + o.predictions + "' must end in .npy (float32 array) or .csv");
  require(o.schema.empty() || o.data_format == "auto",
          "--schema reads --train-data, --test-data and --predict itself: drop --data-format " + o.data_format +
              " (--schema criteo reads Criteo files)");
  const std::string data_format = o.schema.empty() ? o.data_format : "schema";
  if (!o.predict.empty()) parse_data_files(o.predict, "--predict", data_format);
  require(is_data_format(o.data_format), "--data-format: '" + o.data_format + "' is not one of auto, criteo");
  bool csv = false, criteo = false;
  for (const auto& [value, flag] : {std::pair{o.train_data, "--train-data"}, std::pair{o.test_data, "--test-data"}}) {
    if (value.empty()) continue;
    const DataKind format = parse_data_files(value, flag, data_format).format;
    csv = csv || format == DataKind::kCsv;
    criteo = criteo || format == DataKind::kCriteo || format == DataKind::kSchema;
  }
  // The schema is read before any data: a bad one is a usage error of every process at start (a
  // PS's tables and the job's fingerprint depend on it too).
  if (!o.schema.empty()) load_feature_schema(o.schema);
  require(o.schema.empty() || !o.train_data.empty() || !o.test_data.empty() || !o.predict.empty() || role != Role::kWorker,
          "--schema applies to --train-data, --test-data or --predict, and none is given");
  require(o.data_format == "auto" || !o.train_data.empty() || !o.test_data.empty(),
          "--data-format " + o.data_format + " applies to --train-data / --test-data, and neither is given");
  require(!o.skip_bad_lines || criteo || (!o.schema.empty() && !o.predict.empty()),
          "--skip-bad-lines applies to Criteo data (--train-data / --test-data FILE.tsv, or --data-format criteo) and to --schema's");
  require(o.train_data.empty() || !o.test_data.empty(),
          "--train-data needs --test-data too: the chief evaluates the model on it (it may name the same files)");
  require(o.label_column.empty() || o.schema.empty(), "--label-column: --schema names the label column (\"type\": \"label\"): drop --label-column");
  require(o.label_column.empty() || csv, "--label-column applies to CSV data (--train-data / --test-data FILE.csv)");
  require(o.log_every >= 1, "--log-every must be at least 1");
  const auto& opt = o.optimizer;
  require(std::isfinite(opt.lr) && opt.lr > 0, "--lr must be a positive number");
  require(opt.decay_steps >= 1 || (opt.schedule != LrSchedule::kStep && opt.schedule != LrSchedule::kCosineRestarts),
          std::string("--lr-schedule ") + lr_schedule_name(opt.schedule) + " needs --lr-decay-steps (at least 1)");
  require(opt.decay_rate > 0 && opt.decay_rate <= 1, "--lr-decay-rate must be in (0, 1]");
  require(opt.cycle_mult >= 1 && opt.cycle_mult <= 100, "--lr-cycle-mult must be in [1, 100]");
  require(opt.momentum >= 0 && opt.momentum < 1, "--momentum must be in [0, 1)");
  require(opt.beta1 >= 0 && opt.beta1 < 1, "--beta1 must be in [0, 1)");
  require(opt.beta2 >= 0 && opt.beta2 < 1, "--beta2 must be in [0, 1)");
  require(opt.epsilon > 0, "--epsilon must be positive");
  require(opt.weight_decay >= 0, "--weight-decay must not be negative");
  require(std::isfinite(opt.clip_norm) && opt.clip_norm >= 0, "--clip-norm must be a number >= 0 (0: no clipping)");
  require(opt.clip_norm == 0 || o.mode == Mode::kSync || o.mode == Mode::kAllreduce,
          "--clip-norm clips each step's global gradient: sync and allreduce modes only (in " +
              std::string(mode_name(o.mode)) + " each push is applied alone)");
  require(opt.clip_norm == 0 || o.backup_workers == 0,
          "--clip-norm: not with --backup-workers (each chunk's step may sum another set of workers)");
  require(opt.clip_norm == 0 || o.embedding_dim == 0,
          "--clip-norm: not with --embedding-dim yet (the norm would have to include the embedding rows' gradients)");
  require(o.label_smoothing >= 0 && o.label_smoothing < 1, "--label-smoothing must be in [0, 1)");
  require(o.augment_shift >= 0 && o.augment_shift <= 64, "--augment-shift must be in [0, 64] pixels");
  require(std::isfinite(o.huber_delta) && o.huber_delta > 0, "--huber-delta must be a positive number");
  if (o.loss != Loss::kSoftmax) {
    const std::string loss = std::string("--loss ") + loss_name(o.loss);
    require(o.label_smoothing == 0, "--label-smoothing applies to --loss softmax, not " + loss);
    require(o.classes == 0, "--classes applies to --loss softmax: with " + loss + " the targets' width is the model's outputs");
    require(o.embedding_dim == 0 || o.loss == Loss::kBce,
            "--embedding-dim: CTR models train with --loss softmax (2 outputs) or bce (1 output, p(click)), not " + loss);
    require(!o.evaluate && o.predict.empty(),
            std::string(o.evaluate ? "--evaluate" : "--predict") +
                " takes the loss from --init-params' model.json: drop " + loss);
  }
  for (int width : o.hidden) require(width >= 1, "--hidden: every width must be at least 1");
  require(o.embedding_dim >= 0 && o.embedding_dim <= 4096, "--embedding-dim must be in [0, 4096]");
  parse_job_choices(o);  // --embedding-tables, --embedding-optimizer, --embedding-pool, --device: words of a list
  require(std::isfinite(o.embedding_lr) && o.embedding_lr >= 0, "--embedding-lr must be a number >= 0 (0: --lr)");
  require(o.embedding_min_count >= 1 && o.embedding_min_count <= INT32_MAX, "--embedding-min-count must be in [1, 2^31)");
  require(o.embedding_expiry >= 0, "--embedding-expiry must not be negative");
  if (o.embedding_dim > 0) {
    const std::string why = "--embedding-dim: embedding tables ";
    require(role != Role::kWorker || o.data_elsewhere || o.evaluate || !o.predict.empty() || criteo,
            why + "need categorical fields: Criteo data (--train-data / --test-data FILE.tsv, or --data-format criteo) or "
                  "--schema's categorical columns");
  }
  if (role == Role::kWorker && o.mode == Mode::kAllreduce) {
    require(o.num_workers == 1 || !o.coordinator.empty(),
            "--mode allreduce with several workers needs --coordinator host:port (worker 0's rendezvous)");
    if (!o.coordinator.empty()) {
      const HostPort hp = parse_host_port(o.coordinator, /*allow_port_zero=*/true);
      require(o.index == 0 || hp.port != 0, "--coordinator: only worker 0 may give port 0");
    }
  }
  if (role == Role::kWorker && job_topology(o).has_ps && !o.evaluate && o.predict.empty()) {  // --evaluate, --predict: no PS
    require(static_cast<int>(o.ps_hosts.size()) == o.num_ps,
            "--ps-hosts names " + std::to_string(o.ps_hosts.size()) + " servers but --num-ps is " +
                std::to_string(o.num_ps));
  }
}

}  // namespace

std::vector<std::string> embedding_table_names(const JobOptions& o) {
  if (o.embedding_dim <= 0) return {};
  if (parse_job_choices(o).embedding_tables == EmbeddingTables::kShared) return {"ids"};
  if (!o.schema.empty()) return load_feature_schema(o.schema).field_names();  // checked at start
  std::vector<std::string> names;
  for (int f = 1; f <= 26; ++f) names.push_back("C" + std::to_string(f));  // Criteo's categorical fields
  return names;
}

std::vector<int> worker_shares(const JobOptions& o) {
  if (!o.worker_batch.empty()) return o.worker_batch;
  const auto n = static_cast<size_t>(o.num_workers);
  if (o.global_batch > 0) {
    std::vector<int> shares(n, static_cast<int>(o.global_batch / o.num_workers));
    for (size_t i = 0; i < static_cast<size_t>(o.global_batch % o.num_workers); ++i) ++shares[i];
    return shares;
  }
  return std::vector<int>(n, o.accum_steps * o.batch_size);
}

int micro_batch(const JobOptions& o, int share) {
  if (o.worker_batch.empty() && o.global_batch == 0) return o.batch_size;
  return (share + o.accum_steps - 1) / o.accum_steps;
}

HostPort parse_host_port(const std::string& text, bool allow_port_zero) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    throw UsageError("'" + text + "' is not host:port");
  }
  HostPort hp{text.substr(0, colon), parse_int(text.substr(colon + 1), "port of '" + text + "'")};
  if (hp.port < (allow_port_zero ? 0 : 1) || hp.port > 65535) throw UsageError("port of '" + text + "' is out of range");
  return hp;
}

std::optional<JobOptions> parse_flags(Role role, int argc, const char* const* argv, GivenOptions* given_out) {
  JobOptions o;
  TextOptions text;
  std::string config;
  po::options_description job = describe(o, text);
  po::options_description generic("General");
  // On the command line only: a config file must not turn a start into a check.
  generic.add_options()("help,h", "print this help and exit")(
      "config", po::value(&config), "read options from this file (key = value lines; flags win)")(
      "check-config", po::bool_switch(&o.check_config), "parse and check every option and the config file as a start would, print 'configuration OK' and exit 0 (exit 2 naming what is wrong), starting nothing: no network, data or GPU (launch.sh --dry-run checks one command of each kind of process with it)")(
      "json", po::bool_switch(&o.check_config_json), "with --check-config: print the resolved job instead of 'configuration OK', as one JSON object on one line (role, index, mode, ps_mode, hybrid, num_workers, num_ps, table_shards, checkpoint_shards, tables, data, model, ...; docs/operations.md, \"The resolved job\"); launch.sh plans the job with it")(
      "kernels", po::bool_switch(&o.print_kernels), "print what this binary's arithmetic runs on on this CPU and exit: the worker's matrix products (library, version, instruction set; 'generic' when below what the CPU can run), the PS's element-wise loops (their instruction set); the benchmarks print it beside their figures");
  po::options_description cmdline;
  cmdline.add(generic).add(job);

  po::variables_map vm;
  GivenOptions given;
  try {
    const po::parsed_options parsed = po::parse_command_line(argc, argv, cmdline);
    for (const auto& option : parsed.options) given.command_line.insert(option.string_key);
    po::store(parsed, vm);
    if (vm.count("help")) {
      std::cout << "Usage: " << (role == Role::kPs ? "pstrain-ps" : "pstrain-worker")
                << " [options]\n"
                << (role == Role::kPs ? "Parameter server shard: holds a slice of the parameters "
                                        "and its optimizer state.\n"
                                      : "Worker: trains a model replica on its shard of the data.\n")
                << "Both binaries accept the same options, so one config file serves a whole job.\n"
                << cmdline << "\n";
      return std::nullopt;
    }
    if (vm.count("config")) {
      const std::string& path = vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!in) throw UsageError("--config: cannot open '" + path + "'");
      const po::parsed_options parsed = po::parse_config_file(in, job);
      for (const auto& option : parsed.options) given.config.insert(option.string_key);
      po::store(parsed, vm);
    }
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    std::string name = e.get_option_name();
    name.erase(0, name.find_first_not_of('-'));
    std::vector<std::string> names;
    for (const auto& option : cmdline.options()) names.push_back(option->long_name());
    throw UsageError(e.what() + did_you_mean(name, names, "--"));
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  o.hidden.clear();
  for (const auto& w : split(text.hidden, ',')) o.hidden.push_back(parse_int(w, "--hidden"));
  for (const auto& b : split(text.worker_batch, ',')) o.worker_batch.push_back(parse_int(b, "--worker-batch"));
  o.resume_allow = split(text.resume_allow, ',');
  o.mode = choose<Mode>("--mode", text.mode, {{"sync", Mode::kSync}, {"async", Mode::kAsync}, {"ssp", Mode::kSsp},
                                              {"allreduce", Mode::kAllreduce}});
  o.loss = choose<Loss>("--loss", text.loss, {{"softmax", Loss::kSoftmax}, {"bce", Loss::kBce}, {"mse", Loss::kMse},
                                              {"huber", Loss::kHuber}});
  o.optimizer.kind = choose<OptimizerKind>("--optimizer", text.optimizer,
                                           {{"sgd", OptimizerKind::kSgd}, {"momentum", OptimizerKind::kMomentum},
                                            {"adam", OptimizerKind::kAdam}, {"adamw", OptimizerKind::kAdamW}});
  o.optimizer.schedule = choose<LrSchedule>("--lr-schedule", text.lr_schedule,
                                            {{"constant", LrSchedule::kConstant}, {"cosine", LrSchedule::kCosine},
                                             {"step", LrSchedule::kStep}, {"cosine-restarts", LrSchedule::kCosineRestarts}});
  o.collective = choose<CollectiveKind>("--collective", text.collective,
                                        {{"ring", CollectiveKind::kRing}, {"nccl", CollectiveKind::kNccl}});
  o.shared_memory = choose<bool>("--shared-memory", text.shared_memory, {{"auto", true}, {"off", false}});
  o.batchnorm_global = choose<bool>("--batchnorm-stats", text.batchnorm_stats, {{"global", true}, {"local", false}});
  o.checkpoint_errors =
      choose<OnError>("--checkpoint-errors", text.checkpoint_errors, {{"stop", OnError::kStop}, {"warn", OnError::kWarn}});
  if (text.resume == "auto") {
    o.resume = o.resume_auto = true;
  } else if (text.resume == "on" || text.resume == "true" || text.resume == "yes" || text.resume == "1") {
    o.resume = true;
  } else if (text.resume != "off" && text.resume != "false" && text.resume != "no" && text.resume != "0") {
    throw UsageError("--resume: '" + text.resume + "' is not on, auto or off");
  }
  o.batch_auto = text.batch_size == "auto";
  o.batch_size = o.batch_auto ? 1 : parse_int(text.batch_size, "--batch-size");
  // A batch-size in the config file yields to --worker-batch / --global-batch on the command line (the
  // flags win, as everywhere); given together in one place they contradict each other.
  const bool batch_flags = given.command_line.count("worker-batch") || given.command_line.count("global-batch");
  o.batch_size_given = given.command_line.count("batch-size") || (given.config.count("batch-size") && !batch_flags);
  o.hidden_given = given.command_line.count("hidden") || given.config.count("hidden");
  for (const auto& address : split(text.ps_hosts, ',')) {
    if (address.rfind("ipc://", 0) == 0) {
      const std::string name = address.substr(6);
      if (name.empty() || name.size() > kMaxIpcName) {
        throw UsageError("--ps-hosts: '" + address + "' needs a name of 1 to " + std::to_string(kMaxIpcName) + " characters");
      }
    } else {
      parse_host_port(address);
    }
    o.ps_hosts.push_back(address);
  }
  if (o.check_config_json && !o.check_config) throw UsageError("--json applies to --check-config (print the resolved job)");
  o.shuffle = parse_bool(text.shuffle, "--shuffle");
  o.augment_flip = parse_bool(text.augment_flip, "--augment-flip");
  take_model_embedding(&o, given);  // --model "embedding 8, ...": the tables' options, then the layers
  *given_out = std::move(given);
  return o;
}

void finish_job_options(JobOptions* o) {
  if (o->start_timeout_s == 0) o->start_timeout_s = o->timeout_s;
  validate(*o, o->origin.role);
}

}  // namespace pstrain
