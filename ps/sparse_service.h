// The sparse side of a PS shard (docs/sparse.md, "Serving"): the loop (ps/server.h) routes
// SPARSE_PULL and SPARSE_PUSH here. It owns the shard's tables (ps/sparse/sparse_store.h) and the
// SPARSE_PULLs parked until the tables reach their version, with the bounds on what one worker's
// parked pulls may hold; it starts the tables (new, resumed from a checkpoint's, or --init-params'),
// saves them at the end (--save-params) and keeps their counters. It answers through the loop's
// Replier and tells the loop what a push did (SparsePushOutcome); when a step is whole across the
// dense chunks and the tables is the step gate's (ps/step_gate.h), which only the loop asks.
// Single-threaded: the loop's thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ps/job_shape.h"
#include "ps/replier.h"
#include "ps/server_options.h"
#include "ps/sparse/sparse_store.h"
#include "shared/net/transport.h"
#include "shared/util/clock.h"
#include "shared/wire/protocol.h"

namespace pstrain {

// The tables' options of shard `options` in a job of shape `job`.
SparseStoreOptions sparse_store_options(const ServerOptions& options, const JobShape& job);

// What a SPARSE_PUSH did, for the loop.
struct SparsePushOutcome {
  bool applied = false;  // it completed a step of the tables, which was applied: they advanced
  bool whole = false;    // the worker's push is whole (no part of it still to come)
};

class SparseService {
 public:
  // `options` and `replier` must outlive it.
  SparseService(const ServerOptions& options, Mode mode, Replier& replier);
  ~SparseService();

  // At the job's start (its first HELLO), in a job with tables: the tables at `version` (the dense
  // store's), within what `dense_bytes` (the slice's state) leaves of --max-shard-mib. A resumed
  // job's (version > 0, or `resumed_tables`: every saved shard's) are its checkpoint's; a new
  // one's start empty, or as --init-params'. False, with the reason, when they cannot be made
  // (nothing is kept then). Throws pstrain::Error for bad table options.
  bool start(const JobShape& job, uint64_t version, size_t dense_bytes,
             const std::vector<TableInFile>& resumed_tables, std::string* error);
  bool active() const { return store_ != nullptr; }
  const SparseStore* store() const { return store_.get(); }
  SparseStore* store() { return store_.get(); }
  uint64_t version() const { return store_->version(); }

  // SPARSE_PULL: answered with the rows, or parked until the tables reach its version; false,
  // with the reason, for one refused (nothing is kept).
  bool pull(const Message& msg, const Header& h, std::string* error);
  // SPARSE_PUSH of a registered worker (`rejoined`: a replacement): false, with the reason, for
  // one refused. Throws pstrain::Error when a step cannot be applied (the memory bound).
  bool push(const Message& msg, const Header& h, bool rejoined, SparsePushOutcome* out, std::string* error);
  // After the tables advanced: the parked pulls of the version they are at now get their rows.
  void answer_parked();

  // Held steps (ps/step_gate.h): by worker, who pushed the step being collected (every part);
  // and that step applied with `workers`' pushes, scaled by `samples` (the dense step's).
  std::vector<bool> pushed() const;
  void apply_step(const std::vector<bool>& workers, uint64_t samples) {
    store_->apply_step(workers, samples);
  }

  // The step `worker` does next here; UINT64_MAX without tables.
  uint64_t next_step_of(int worker, bool rejoined) const;
  // The sync step being collected and the workers it lacks (SparseStore::barrier); false: none.
  bool barrier(uint64_t* step, Clock::time_point* since, std::vector<bool>* pushed) const;
  bool waiting() const { return !parked_.empty(); }
  void tell_waiting(Header h);    // `h` (a WAITING) to every parked pull
  void report(uint64_t version);  // the tables' counters in the log, every 10 s
  // For the shard's last log line: the tables' counters and the pulls that came in parts.
  std::string counters_text() const;
  // At the loop's end: --save-params, unless a worker `stopped` the job before its end.
  void finish(bool stopped) const;

 private:
  struct Parked;
  // What one worker's parked SPARSE_PULLs hold (check_parking's bounds), kept beside parked_ so
  // that a pull's check costs no scan of every parked part.
  struct ParkedUse {
    std::vector<uint64_t> request_ids;              // at most kMaxParkedSparsePulls
    std::set<std::pair<uint64_t, uint64_t>> parts;  // (request id, part)
    size_t bytes = 0;
  };

  // Why `p` may not wait among the parked pulls (its worker's are too many), or "".
  std::string check_parking(const Parked& p) const;
  void park(Parked p);
  void unpark(const Parked& p);
  void send_rows(const Parked& p);  // a pull that passed SparseStore::check_rows

  const ServerOptions& options_;
  const Mode mode_;
  Replier& replier_;
  std::unique_ptr<SparseStore> store_;  // made at start(), in a job with tables
  std::vector<Parked> parked_;
  std::map<std::string, ParkedUse> parked_use_;  // by route: what parked_ holds of each worker
  uint64_t parted_pulls_ = 0, pull_parts_ = 0;   // SPARSE_PULLs that came in several parts, and their parts
  Clock::time_point last_report_;
};

}  // namespace pstrain
