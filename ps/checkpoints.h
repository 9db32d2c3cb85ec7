// A PS shard's part of checkpoints (docs/checkpoints.md; the chief's is worker/train/checkpoints.h):
// the chief marks in its pushes the version to checkpoint and the version the job stops after;
// the shard writes its store's part once the store is at the marked version, and marks that
// version's PARAMS with the write's time and the stop. With --resume the store starts from the
// newest usable checkpoint.
#pragma once

#include <cstdint>
#include <string>

#include "ps/server_options.h"
#include "ps/sparse/sparse_store.h"
#include "ps/store.h"
#include "shared/checkpoint/checkpoint_store.h"
#include "shared/wire/protocol.h"

namespace pstrain {

class ShardCheckpoints {
 public:
  // `options` must outlive it.
  explicit ShardCheckpoints(const ServerOptions& options);

  // An accepted push of the chief's: the versions it marks (checks: the store's push).
  void mark(const Header& push);
  // After a part of `store` (or `sparse`, the tables, if any) advanced: writes the checkpoint if
  // the store is at the marked version, and in sync the tables too (their rows go in the same
  // file); in hybrid mode when the tables are (the file holds them alone). Throws pstrain::Error
  // when the write fails and --checkpoint-errors is stop.
  void advanced(const Store& store, const SparseStore* sparse);
  // A PARAMS header of version h->step: whether the job stops after it, and the time its write took.
  void stamp(Header* h) const;
  // --resume (--resume=auto: where a complete checkpoint exists): loads `store`, and leaves the
  // file's tables in *loaded; true without loading anything when it starts fresh.
  bool resume(Store& store, ShardCheckpoint* loaded, std::string* error) const {
    return !files_.resuming() || store.resume(files_, loaded, error);
  }

 private:
  void write(const Store& store, const SparseStore* sparse);

  const ServerOptions& options_;
  const CheckpointStore files_;
  uint64_t checkpoint_at_ = 0;  // the version the chief asked to checkpoint (0 = none pending)
  uint64_t stop_at_ = 0;        // the version after which the job stops (0 = none)
  uint64_t written_ = 0, write_us_ = 0;  // the last checkpointed version and its write time
};

}  // namespace pstrain
