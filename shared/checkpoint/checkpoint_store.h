// Checkpoints on disk (docs/checkpoints.md): a PS shard (or the allreduce chief, as the one
// shard of the whole vector) writes its slice and optimizer state at the versions the chief
// marks; on --resume a shard (or every allreduce worker) finds the newest checkpoint whose every
// file is present, intact and of this job, re-sliced when it was saved by another shard count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/checkpoint/checkpoint.h"
#include "shared/checkpoint/checkpoint_options.h"
#include "shared/train/layout.h"

namespace pstrain {

class CheckpointStore {
 public:
  // `who` names this process in log lines and errors ("ps1", "w0"). Throws pstrain::UsageError
  // for a --resume-allow key that no fingerprint has.
  CheckpointStore(CheckpointOptions options, std::string who);

  // Writes DIR/v<version>/shard<s>of<S>.ckpt durably, streamed: `tables` (else c.tables) go from
  // where they lie to the file through a bounded buffer, the CRC computed as they go. A write says
  // it is saving ("ps0: saving checkpoint of version 40 to PATH: 512.0 of 1900.0 MiB") every 5 s,
  // and when it starts if the file passes kAnnouncedSaveBytes, then its size, time and rate.
  // Throws pstrain::Error when the write fails and --checkpoint-errors is stop (the file is then
  // absent and earlier checkpoints intact); with warn it logs the failure and returns false.
  bool write(const ShardCheckpoint& c, const std::vector<TableSource>& tables = {}) const;
  static constexpr uint64_t kAnnouncedSaveBytes = uint64_t{64} << 20;

  // Whether to resume: --resume, or --resume=auto where DIR holds a complete checkpoint (one with
  // a MANIFEST; usable or not: a damaged or foreign one is then an error, not a fresh start).
  // Logs the fresh start of --resume=auto.
  bool resuming() const;

  // Fills *out with this shard's `slice` (values and `num_slots` optimizer slots) from the newest
  // usable checkpoint of a job of `total` floats, at a version not past `total_steps` (the job may
  // be longer or shorter than the one that saved: that is logged), whose manifest records this
  // job's fingerprint (or one that differs only in --resume-allow keys). Every checkpoint passed
  // over is logged with its reason. False, with every reason in *error, when none is usable.
  bool load(uint64_t total, uint64_t total_steps, const Slice& slice, size_t num_slots, ShardCheckpoint* out,
            std::string* error) const;

 private:
  // Checks version directory `v` and cuts this shard's slice out of it; "" or the reason.
  std::string try_version(uint64_t v, uint64_t total, uint64_t total_steps, const Slice& slice, size_t num_slots,
                          ShardCheckpoint* out) const;

  const CheckpointOptions o_;
  const std::string who_;
};

}  // namespace pstrain
