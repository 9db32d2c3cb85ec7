// What makes a job the job a checkpoint belongs to (docs/checkpoints.md, "Whose checkpoint"):
// the model, the optimizer and its hyper-parameters, the seed, the data and the workers' batch
// arrangement. The chief records it in every manifest; --resume refuses a checkpoint whose
// fingerprint differs, naming what differs, unless --resume-allow accepts those keys. Steps and
// the number of PS shards are not in it: a resumed job may run on another shard count.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shared/util/modes.h"
#include "shared/train/optimizer.h"

namespace pstrain {

// The job's options a fingerprint is made of (filled from the job's flags in main); the defaults
// are the flags'.
struct JobIdentity {
  Mode mode = Mode::kSync;
  int staleness = 2;                     // ssp only
  int backup_workers = 0;                // sync only, when > 0
  std::string model;                     // --model; empty: the MLP of `hidden`
  std::vector<int> hidden = {256, 128};
  OptimizerOptions optimizer;
  uint64_t seed = 42;
  bool shuffle = true;
  std::string train_data;                // --train-data; empty: data_dir's IDX files
  std::string data_dir;                  // empty: the default directory
  int num_workers = 1;
  std::vector<int> worker_batches = {64};  // each worker's samples per step (worker_shares)
  double label_smoothing = 0;
  std::string loss;                      // --loss: "" for softmax, else "bce", "mse", "huber delta D"
  // Embedding tables (docs/sparse.md): "" without --embedding-dim, else their dim, layout,
  // optimizer, learning rate (fingerprint_number), admission and expiry in one line.
  std::string embeddings;
  std::string augment;                   // --augment-flip / --augment-shift: "flip shift 2"; "" for none
};

using Fingerprint = std::vector<std::pair<std::string, std::string>>;  // key, value; fixed order

Fingerprint job_fingerprint(const JobIdentity& o);
// A number as the fingerprint writes it, every one (JobIdentity's lines too): "%.17g", which reads
// back as the same double, so that any change of a setting is a difference.
std::string fingerprint_number(double v);
// Every key job_fingerprint can give (what --resume-allow accepts, besides "all").
const std::vector<std::string>& fingerprint_keys();

// The keys where `saved` and `ours` differ, as "lr 0.01 (this job: 0.05)", joined by "; ".
// Differences in `allowed` (or all, when it holds "all") go to *accepted instead of the result.
// A manifest written before the embeddings line's lr was exact (6 decimals: "lr 0.000000" for
// 1e-7 and 5e-7 alike) matches only a job whose lr is exactly that number (0, 0.05); any other
// is a difference, whose text says so (docs/checkpoints.md, "Whose checkpoint").
std::string fingerprint_differences(const Fingerprint& saved, const Fingerprint& ours,
                                    const std::vector<std::string>& allowed, std::string* accepted);

}  // namespace pstrain
