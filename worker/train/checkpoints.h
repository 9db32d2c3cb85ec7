// The chief's part of checkpoints (docs/checkpoints.md): it decides which versions the PS
// shards checkpoint (every --checkpoint-every steps, after --checkpoint-secs, the job's last
// version, and a final one when it is asked to stop), marks them in its pushes, and once it has received a marked version
// from every shard (so every shard file is on disk) writes the manifest that makes the
// checkpoint complete, then removes the oldest beyond --keep-checkpoints.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/checkpoint/checkpoint_options.h"
#include "shared/train/layout.h"
#include "worker/model/model_file.h"

namespace pstrain {

class ChiefCheckpoints {
 public:
  // Enabled on the chief when options.dir is set; a checkpoint is complete with `shards` shard
  // files (the PS shards', or in allreduce the chief's one). `model` (whose layout is `layout`)
  // goes into every checkpoint as model.json, for pstrain-export (a script's model, worker/python/,
  // as its variables' names and shapes: model_file.h). `stop_requested` (may be null)
  // is set by the worker's SIGTERM handler.
  ChiefCheckpoints(const CheckpointOptions& options, bool chief, int shards, const Layout& layout,
                   ModelDescription model, uint64_t total_steps, const std::atomic<bool>* stop_requested);

  bool enabled() const { return enabled_; }
  // The model's embedding tables as model.json describes them (a script's model learns them
  // after its start: its EmbeddingBag's fields and pool).
  void set_embeddings(const EmbeddingSetup& tables) { model_.embeddings = tables; }
  // Called before step `step`: whether version step+1 is to be checkpointed, and whether the
  // job stops after it (a stop was requested).
  void plan(uint64_t step, uint64_t* checkpoint, bool* stop);
  // After a step: `marked` (0: none) was marked in it, and every shard has written every
  // version up to `durable` (they write in the background: StepMetrics::durable). Completes
  // each marked version now durable on every shard. Returns the seconds it took.
  double step_done(uint64_t marked, uint64_t durable);
  // Version `version`, which was marked, is on disk on every shard: writes its model.json,
  // then its manifest, and prunes. Returns the seconds it took. Throws pstrain::Error when the checkpoint is incomplete
  // and --checkpoint-errors is stop.
  double completed(uint64_t version);
  // --resume: the checkpoint the shards resumed from must be of this model (its layout).
  void check_resumed(uint64_t version) const;
  // The model's state (batchnorm's running statistics, `layout`), written into every checkpoint
  // as <name>.npy before its manifest; both must outlive this object. Without: none.
  void set_state(const Layout& layout, const std::vector<float>& state) {
    state_layout_ = &layout;
    state_ = &state;
  }

 private:
  std::string layout_text() const;
  void prune() const;

  const CheckpointOptions o_;
  const int shards_;
  const Layout& layout_;
  ModelDescription model_;
  const uint64_t total_steps_;
  const std::atomic<bool>* stop_requested_;
  const Layout* state_layout_ = nullptr;
  const std::vector<float>* state_ = nullptr;
  const bool enabled_;
  std::chrono::steady_clock::time_point last_;
  bool stopping_ = false;
  std::vector<uint64_t> pending_;  // marked versions not yet on every shard's disk, oldest first
};

}  // namespace pstrain
