// A PS shard's part of checkpoints (docs/checkpoints.md; the chief's is worker/train/checkpoints.h):
// the chief marks in its pushes the version to checkpoint and the version the job stops after;
// the shard captures its store's part once the store is at the marked version and writes it in
// the background (ps/checkpoint_writer.h), and marks that version's PARAMS with the capture's
// time (the stall: with the wait for the previous write) and the stop, and every PARAMS with
// the last version written durably, after which the chief writes the manifest. The final
// checkpoint (a stop) is written before the version is sent, and the job's last version waits
// for a write in progress, so that nothing is left unannounced when the processes exit. With
// --resume the store starts from the newest usable checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "ps/checkpoint_writer.h"
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
  // A background write that failed stops the job here, at the next step.
  void advanced(const Store& store, SparseStore* sparse);
  // A PARAMS header of version h->step: whether the job stops after it, the time its checkpoint
  // stalled the shard, and the last version durably written.
  void stamp(Header* h) const;
  // The job's length: its last version waits for a write in progress.
  void set_last(uint64_t version) { last_ = version; }
  // Waits for a write in progress (the shard's end; before the tables go).
  void finish() { writer_.wait(); }
  // Tests: holds the background writer (CheckpointWriter::set_gate).
  void set_write_gate(std::function<void()> gate) { writer_.set_gate(std::move(gate)); }
  // --resume (--resume=auto: where a complete checkpoint exists): loads `store`, and leaves the
  // file's tables in *loaded; true without loading anything when it starts fresh.
  bool resume(Store& store, ShardCheckpoint* loaded, std::string* error) const {
    return !files_.resuming() || store.resume(files_, loaded, error);
  }

 private:
  void write(const Store& store, SparseStore* sparse);
  void throw_failure() const;

  const ServerOptions& options_;
  const CheckpointStore files_;
  uint64_t checkpoint_at_ = 0;  // the version the chief asked to checkpoint (0 = none pending)
  uint64_t stop_at_ = 0;        // the version after which the job stops (0 = none)
  uint64_t written_ = 0, write_us_ = 0;  // the last checkpointed version and its stall
  uint64_t last_ = 0;                    // the job's last version (0: not known)
  CheckpointWriter writer_{files_};      // after files_
};

}  // namespace pstrain
