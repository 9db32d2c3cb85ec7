// The consistency-policy seam of the PS (docs/design.md, "Modes"): which pushes a chunk accepts, how
// many complete a step, how far ahead of the chunk's version steps may be pending, and when a
// pull can be answered. The chunk's own bookkeeping (the pending sums, who pushed) is the
// store's (ps/dense_store.h); a policy is rules only.
//
//   sync   one step pending; applied once every worker pushed it (the mirrored contract), or
//          with --backup-workers b once N - b did; then later pushes for it are dropped
//   ssp    steps version .. version + s pending (--staleness s), each applied in order once every
//          worker pushed it: s = 0 is sync; a worker pulls "at least version step + 1 - s"
//   async  every push is applied as it arrives, weighted by its own samples; pulls get the newest
#pragma once

#include <cstdint>
#include <string>

#include "ps/server_options.h"
#include "shared/wire/protocol.h"

namespace pstrain {

enum class PullVerdict { kAnswerNow, kPark, kReject };

struct PushVerdict {
  enum Kind { kAccept, kDrop, kReject } kind = kAccept;
  uint64_t slot = 0;   // kAccept: the pending step it adds to, counted from the chunk's version
  std::string reason;  // kReject: why
};

class ConsistencyPolicy {
 public:
  // Throws pstrain::UsageError for a mode the PS does not serve (allreduce has no PS).
  explicit ConsistencyPolicy(const ServerOptions& options);

  Mode mode() const { return mode_; }
  const char* name() const;
  // The mode as the shard's first log line says it ("sync with 1 backup worker(s) (...)").
  std::string describe() const;
  // Pushes that complete a pending step.
  int quorum() const { return quorum_; }
  // Steps beyond the version that may be pending at once (ssp's staleness; 0 otherwise).
  uint64_t window() const { return window_; }
  // A push for `step`, computed on version `based_on` of a chunk now at `version`, where
  // `already` says whether this worker pushed that step already.
  PushVerdict check_push(int worker, uint64_t step, uint64_t based_on, uint64_t version, bool already) const;
  // A pull for parameters of at least version `want` of a chunk at `version`.
  PullVerdict check_pull(uint64_t want, uint64_t version) const;
  // The staleness of an update applied to a chunk at `version`, computed on version `based_on`.
  static uint64_t staleness(uint64_t version, uint64_t based_on) { return version > based_on ? version - based_on : 0; }

 private:
  Mode mode_ = Mode::kSync;
  int quorum_ = 1;
  uint64_t window_ = 0;
  bool backup_ = false;
  int backups_ = 0;  // sync: --backup-workers
};

}  // namespace pstrain
