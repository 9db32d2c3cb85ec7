// The worker's training loop, the same in every mode (sync, async, ssp through the PS; allreduce
// with the other workers): per step, take this worker's share of the global batch from the
// prefetch queue (in micro-batches with --accum-steps), compute its gradient, hand it to the
// Exchange (worker/exchange/exchange.h) chunk by chunk as the last micro-batch's backward produces it, and
// take the parameters the Exchange returns for the next step. The chief (worker 0) also
// initialises the parameter servers (INIT), prints progress (worker/report/progress.h), evaluates the
// test set (shared with the other workers at the epochs' ends where they hold the same
// parameters: worker/train/evaluation.h), decides checkpoints (worker/train/checkpoints.h) and saves the
// parameters (worker/train/run_model.h). Its rooms: the input stage (worker/train/train_input.h: plain, or
// embedding rows), the micro-batch and memory plan (worker/train/batch_fit.h), the run's model
// (worker/train/run_model.h: description, first parameters, state, --save-params).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shared/checkpoint/checkpoint_options.h"
#include "worker/backend/backend.h"
#include "worker/data/augment.h"
#include "worker/data/open.h"
#include "worker/exchange/exchange.h"
#include "worker/report/progress.h"  // TrainSummary
#include "worker/sparse/embedding_setup.h"
#include "worker/train/evaluation.h"

namespace pstrain {

// What the training loop needs of the job: its own fields and the options of the parts it makes
// (filled from the job's flags in main: worker/options_from_job.h). The trainer touches most of
// the job, hence one struct of many fields; each part it hands them to sees only its own.
struct TrainOptions {
  int index = 0;                // this worker's index (0: the chief)
  int num_workers = 1;          // N
  std::vector<int> worker_batches = {64};  // samples per step of each worker, in worker order
  int micro_batch = 64;         // this worker's micro-batch, unless batch_auto (the job's micro_batch())
  bool batch_auto = false;      // --batch-size auto: the largest micro-batch whose memory plan fits
  std::string model;            // --model: layer list (docs/models.md); empty: the MLP of `hidden`
  std::vector<int> hidden = {256, 128};  // --hidden
  bool recompute = false;       // --recompute: keep only block inputs in forward
  // --batchnorm-stats global in sync or allreduce mode: batchnorm layers combine their sums
  // across the workers (Exchange::stats_exchange); false: each worker's batch alone.
  bool batchnorm_global = true;
  float label_smoothing = 0;    // --label-smoothing
  float huber_delta = 1;        // --huber-delta (--loss huber; the loss itself is data.loss)
  int epochs = 10;              // passes over the training set
  int64_t steps = 0;            // stop after this many global steps (0 = no limit)
  uint64_t seed = 42;           // initialisation, shuffling and dropout
  bool shuffle = true;          // reshuffle every epoch
  AugmentOptions augment;       // --augment-flip, --augment-shift (training images only)
  int prefetch = 4;             // batches queued ahead of the loop
  int bind_cpu = -1;            // --bind-cpu: the loop's thread runs on this CPU only (-1: anywhere)
  double slowdown = 1;          // debugging: the compute takes this many times as long
  bool model_given = false;     // --model or --hidden was given; with init_params unset, DIR/model.json's model
  std::string init_params;      // start from DIR/<variable>.npy (the model from DIR/model.json unless given)
  std::string save_params;      // chief: write every variable as DIR/<name>.npy and DIR/model.json at the end
  std::string metrics_file;     // chief: the metrics file (worker/report/metrics_file.h); empty: none
  std::string tensorboard_dir;  // chief: TensorBoard event files go here (worker/report/tensorboard.h); every
                                // worker: its own breakdown in DIR/w<i> (worker/report/own_figures.h); empty: none
  // The tables (dim > 0, --embedding-dim: the data's categorical IDs become rows of the PS's
  // tables, sharded over its num_ps shards: docs/sparse.md), as model.json records them (dense
  // and fields: the data's).
  EmbeddingSetup embeddings;
  DataOptions data;
  // The device; its gpu_memory_limit_mib also bounds the memory plan: a GPU's plan past it is
  // refused, and --batch-size auto chooses a micro-batch whose plan fits it (also on the CPU).
  BackendOptions backend;
  CheckpointOptions checkpoint;  // the chief's checkpoint decisions and manifests; --resume
  int checkpoint_shards = 1;    // a checkpoint's shard files: the PS shards' (allreduce: the chief's one; hybrid: S + 1)
  EvaluationOptions evaluation;
  ProgressOptions progress;
  // This process's start line for the device it computes on (main gives describe_placement of
  // shared/config/cluster_env.h: role, index, host, local rank, device, where each came from;
  // unset: no start line).
  std::function<std::string(const std::string& device)> placement;
};

// Runs the whole job for this worker; throws pstrain::Error on failure. `stop_requested` (may be
// null) is the chief's SIGTERM flag: with --checkpoint-dir it ends the job after a final
// checkpoint (docs/checkpoints.md).
TrainSummary train(const TrainOptions& options, const ExchangeFactory& make_exchange,
                   const std::atomic<bool>* stop_requested = nullptr);

}  // namespace pstrain
