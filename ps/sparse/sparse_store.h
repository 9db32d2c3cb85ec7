// The sparse side of a PS shard's loop (docs/sparse.md, "Serving"): the shard's embedding tables
// (ps/sparse/shard_tables.h) behind the messages SPARSE_PULL and SPARSE_PUSH. In sync each step's
// pushes are collected per worker and applied once every worker pushed it (summed in worker
// order: the mirrored contract), or with --backup-workers once the loop names the step's workers
// (apply_step: those of the dense step); in async and ssp each push is applied when it arrives. A pull
// asks for the rows as they are at a version (the number of steps applied): it is answered once
// the tables reach it. Single-threaded: the loop's thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ps/sparse/embedding_table.h"
#include "ps/sparse/shard_tables.h"
#include "shared/checkpoint/checkpoint.h"
#include "shared/net/transport.h"
#include "shared/train/optimizer.h"
#include "shared/util/clock.h"
#include "shared/util/id_map.h"
#include "shared/wire/protocol.h"
#include "shared/wire/sparse_wire.h"

namespace pstrain {

// What a shard's tables need of the job: filled from the shard's options and the job's shape
// (ps/sparse_service.h, sparse_store_options), so that nothing in ps/sparse/ includes ps/.
struct SparseStoreOptions {
  int index = 0;               // this shard, in [0, num_ps)
  int num_ps = 1;
  int num_workers = 1;
  int backup_workers = 0;      // sync: the loop applies a step with its workers (apply_step)
  bool allow_rejoin = false;   // sync: the rows before the last step are kept for a replacement
  int chunk_kib = 1024;        // the largest pull part and answer (max_part_bytes)
  int64_t max_shard_mib = 0;   // the shard's bound (0: none), less the dense slice's state
  OptimizerOptions optimizer;  // the dense optimizer: its schedule, with table_lr as its rate
  double table_lr = 0;
  std::vector<TableOptions> tables;
  std::string save_params;     // --save-params DIR ("" = none)
  uint64_t total_steps = 0;    // the job's (JobShape), for the learning-rate schedule
  uint64_t global_batch = 0;   // the job's (JobShape), async's weighting
};

class SparseStore {
 public:
  // The tables of options.tables on shard options.index, at version `start` (the dense store's:
  // a new job's 0); with --max-shard-mib they may take what `dense_bytes` (the dense slice's
  // state) leaves of it. Throws pstrain::Error for bad table options.
  SparseStore(SparseStoreOptions options, Mode mode, uint64_t start, size_t dense_bytes);

  uint64_t version() const { return version_; }
  // A SPARSE_PUSH of `worker` (sections decoded), or a part of one (`h.part` of `h.parts`): a
  // push in parts counts once its last part is here, the parts in order, their sections
  // appended (docs/wire_protocol.md, "Sparse tables"). False, with the reason, for one refused:
  // nothing changes then. *applied: it completed a step, which was applied (parked pulls may be
  // answered). Throws pstrain::Error when a complete step cannot be applied (the memory bound).
  // A replacement of a worker (`rejoined`, --allow-rejoin) may push a step its predecessor pushed:
  // the same gradient (a step is a pure function of its inputs), which replaces the first.
  bool push(int worker, bool rejoined, const Header& h, std::vector<SparseSection> sections, bool* applied,
            std::string* error);
  // --backup-workers (sync): whether `worker` pushed the step being collected (every part); and that step
  // applied with the pushes of `workers` only (the dense step's, ps/server.cc), scaled by the
  // gradient's `samples` (the dense step's too; 0: the samples of those workers' sparse pushes,
  // for a shard without a dense slice). The others' pushes are dropped and counted, as is a
  // later push of an applied step. Throws pstrain::Error when the step cannot be applied (the
  // memory bound).
  bool pushed(int worker) const { return pushed_[static_cast<size_t>(worker)]; }
  // Whether `worker`'s push in parts has begun and its last part not come.
  bool in_parts(int worker) const { return partial_[static_cast<size_t>(worker)].open; }
  void apply_step(const std::vector<bool>& workers, uint64_t samples);
  // A SPARSE_PULL for version `want`: "" when it can be answered now or later, else why not.
  std::string check_pull(uint64_t want) const;
  // The most bytes a SPARSE_PULL part's body, and its SPARSE_ROWS, may take: the job's chunk
  // (--chunk-kib), which the workers cut their pulls to, by the pull and by its answer
  // (docs/wire_protocol.md, "Sparse tables"); an answer of one row may pass it by that row. A
  // pull's body is checked against it before it is decoded (check_pull_body) and its answer
  // before a row is looked up (check_rows), so that no pull makes the shard build an answer
  // that is not bounded, whatever its IDs.
  size_t max_part_bytes() const;
  // A SPARSE_PULL (part) whose body has `bytes`, before it is decoded: "" or why it is refused.
  std::string check_pull_body(const Header& h, size_t bytes) const;
  bool ready(uint64_t want) const { return version_ >= want; }
  // The rows of a pull's sections (SPARSE_ROWS sections: table, dim, values) for version `want`:
  // as they are now, or for want = version() - 1 with --allow-rejoin (a replacement redoing the
  // step its predecessor had pushed here), as they were before the last step.
  bool rows(const std::vector<SparseSection>& request, uint64_t want, std::vector<SparseSection>* out,
            std::string* error) const;
  // rows()'s checks alone (its answer within max_part_bytes, each table known, its IDs unique
  // and this shard's): a pull parked
  // until its version is checked when it arrives; and rows() of a request that passed them.
  bool check_rows(const std::vector<SparseSection>& request, std::string* error) const;
  void checked_rows(const std::vector<SparseSection>& request, uint64_t want, std::vector<SparseSection>* out) const;
  // The step a worker does next here (WELCOME's step is the smaller of this and the dense
  // store's): sync, for a replacement, the step being collected unless its predecessor pushed it.
  uint64_t next_step_of(int worker, bool rejoined) const;
  // The sync step being collected, when some but not all workers pushed it and it has waited:
  // which workers it lacks (for the stall report and WAITING). False when none is pending.
  bool barrier(uint64_t* step, Clock::time_point* since, std::vector<bool>* pushed) const;
  // A checkpoint's tables (ShardCheckpoint::tables: its own, for the shard file) and --resume's
  // (every saved shard's: the rows this shard holds are taken). False, with the reason, for a
  // checkpoint whose tables do not fit this job's.
  void save(std::vector<std::string>* tables) const;
  // The same tables for a shard file written as it is made (CheckpointStore::write): each writes
  // its bytes from the arena where they lie, no copy of them held; valid while nothing changes.
  std::vector<TableSource> table_sources() const;
  // The same, captured now for a background writer (EmbeddingTable::snapshot_source).
  std::vector<TableSource> snapshot_sources();
  bool resume(const std::vector<TableInFile>& tables, std::string* error);  // each read where it lies
  // --init-params DIR, a new job: every table starts with the rows (and slots) this shard holds
  // of DIR/embeddings/<table>.shard<s>-of-<S> (what --save-params and pstrain-export write; any
  // S, every one of its S files), their steps counted from this job's start. False, naming the
  // file, for a missing or damaged file or one of other tables (dim, optimizer).
  bool start_from(const std::string& dir, std::string* error);
  // --save-params DIR at the job's end: each table's rows on this shard, in the checkpoint
  // format (docs/sparse.md), to DIR/embeddings/<table>.shard<index>-of-<num_ps>.
  void save(const std::string& dir) const;
  // At the loop's end: save(--save-params) when it is set and the job ran to its end; a job
  // that `stopped` before (a worker's DONE said so) has no result, and DIR keeps what it holds
  // (docs/checkpoints.md, "Stopping": the checkpoint holds the tables).
  void save_result(bool stopped) const;
  // "; tables at version V: embedding rows R (admitted A, evicted E, pending P), M MiB" (and
  // with backup workers "; late sparse pushes dropped: D"): for the log lines.
  std::string counters_text() const;

 private:
  // One worker's push in parts, its parts so far.
  struct Partial {
    bool open = false;
    uint64_t step = 0, parts = 0, next = 0, samples = 0;
    size_t bytes = 0;                       // the parts' IDs and values (at most a whole body's)
    std::vector<SparseSection> sections;    // appended part by part
    std::map<uint32_t, IdIndex> ids;        // per table, the IDs of the parts so far
  };

  bool apply(uint64_t step, const std::vector<std::vector<SparseSection>>& by_worker, double samples,
             std::string* error);
  void clear_step();
  // A part's checks against the worker's earlier parts `p` of the push (order, count, step,
  // samples, the bound, IDs unique across the parts); and the part taken in when it passed them
  // (`restart`: a replacement's part 0 drops its predecessor's parts). *whole: the push's every
  // section once its last part is in (partial_ of the worker is then closed).
  bool check_part(const Partial& p, const Header& h, const std::vector<SparseSection>& sections,
                  std::string* error) const;
  bool take_part(int worker, bool restart, const Header& h, std::vector<SparseSection> sections,
                 std::vector<SparseSection>* whole, std::string* error);

  const SparseStoreOptions options_;
  const Mode mode_;
  ShardTables tables_;
  uint64_t version_;
  // sync: the step being collected, each worker's sections (or none yet) and samples.
  std::vector<std::vector<SparseSection>> pending_;
  // --allow-rejoin, sync: the rows the last step changed, as they were before it, by table and ID.
  std::map<std::pair<uint32_t, uint64_t>, std::vector<float>> previous_;
  std::vector<bool> pushed_;
  std::vector<Partial> partial_;  // by worker: a push whose last part has not come yet
  uint64_t parted_pushes_ = 0, parts_ = 0;  // pushes that came in several parts, and their parts
  uint64_t pending_samples_ = 0;
  std::vector<uint64_t> samples_;  // each worker's pushed samples (backup workers)
  int pushes_ = 0;
  const bool backup_;      // --backup-workers: the loop applies a step (apply_step)
  uint64_t dropped_ = 0;   // backup workers: pushes of a step applied without them
  Clock::time_point since_;
};

}  // namespace pstrain
