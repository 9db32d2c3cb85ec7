// A PS shard's dense store: its slice of the flat parameter vector and the optimizer state for
// it. The slice is cut into chunks of --chunk-kib; every message carries one chunk, and every
// chunk has its own barrier and version. A chunk is applied as soon as its quorum of workers
// pushed it (ps/policy.h), so the loop can send it at once to the workers whose PULL waits for
// it: receiving, applying and sending overlap (except with backup workers and embedding tables:
// held steps, below). Also here: copy-on-write of values that PARAMS
// still being sent hold, the version before the last (--allow-rejoin), the shared parameter area
// (plain sync, same host), and the slice's part of a checkpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ps/job_shape.h"
#include "ps/policy.h"
#include "ps/server_options.h"
#include "ps/store.h"
#include "shared/train/clip_norm.h"
#include "shared/train/layout.h"
#include "shared/train/optimizer.h"
#include "shared/net/shared_memory.h"

namespace pstrain {

// The oldest step of a chunk still waiting for pushes (for the stall report).
struct Barrier {
  uint64_t step = 0;
  Clock::time_point since;
  std::vector<bool> pushed;  // by worker
};

class DenseStore final : public Store {
 public:
  // Shard options.index's slice of a model of job.total floats, zeroed. `options` and `policy`
  // must outlive it.
  DenseStore(const ServerOptions& options, const ConsistencyPolicy& policy, const JobShape& job);
  ~DenseStore() override;

  bool init(const Update& update, Outcome* out, std::string* error) override;
  bool push(const Update& update, Outcome* out, std::string* error) override;
  size_t parts() const override;
  uint64_t version() const override;
  std::string check_pull(uint64_t want) const override;
  bool ready(size_t part, uint64_t want) const override;
  Header params_header(size_t part, uint64_t want, int worker) override;
  void save(ShardCheckpoint* out) const override;
  bool resume(const CheckpointStore& files, std::string* error) override;
  // After resume(): the embedding tables the checkpoint held (every saved shard's), for the
  // shard's SparseStore (ps/sparse/sparse_store.h), handed over once.
  std::vector<TableInFile> take_resumed_tables() { return std::move(resumed_tables_); }

  const Slice& slice() const { return slice_; }
  size_t chunk_length() const { return chunk_len_; }
  std::vector<float> values() const;  // a copy of the slice
  std::string shape_text() const;     // the slice and its chunks, for the log
  // The step `worker` runs next against this shard (WELCOME's step).
  uint64_t next_step_of(int worker, bool rejoined) const;
  // PARAMS' values of `part` for a pull of `want`: a frame, or copied to `slice_values` (the
  // worker's segment's parameters of the slice).
  Frame payload(size_t part, uint64_t want) const;
  void copy_values(size_t part, uint64_t want, float* slice_values) const;
  // Before `worker`'s segment is unmapped (it registered again).
  void release_segment(int worker);

  // The shared parameter area: made at the first same-host worker's HELLO in plain sync.
  void share_values();
  const SharedMemory& area() const { return area_; }
  void release_area_name();  // once every worker mapped it (or uses its own copy)

  // --clip-norm in sync (docs/models.md, "Gradient clipping"): a step is applied once every chunk
  // of the slice has all its pushes and the whole gradient's norm is known. With one shard that
  // is at once; with several, the shard waits with its part of the squares (NORM to the workers)
  // until a worker sends the whole sum (CLIP).
  bool awaiting_clip(uint64_t* step, ExactSquares* part) const;
  // A CLIP of `step` with the squares of every shard's part: applies the step (every part
  // advances). A repeat (another worker's CLIP of a step applied already) changes nothing.
  bool clip(uint64_t step, const ExactSquares& total, Outcome* out, std::string* error);

  // --backup-workers in a job with embedding tables (held steps): a step is applied when the
  // loop names its workers, not when each chunk has its quorum, so that every chunk of the shard
  // and the shard's tables take the same workers' pushes (ps/server.cc, settle_step).
  bool holds_steps() const { return held_steps_; }
  // Held steps: whether `worker` pushed every chunk of the step being collected.
  bool pushed_every_chunk(int worker) const;
  // Held steps: applies the step being collected to every chunk with the pushes of `workers`
  // (each pushed every chunk); the others' pushes of it are dropped and counted as late. Returns
  // the samples of those workers' pushes, which scale the step's gradient.
  uint64_t apply_step(const std::vector<bool>& workers, Outcome* out);

  bool oldest_barrier(Barrier* out) const;  // false: no chunk waits for pushes
  std::string counters_text() const;        // the mode's counters, for the last log line
  uint64_t apply_us() const { return static_cast<uint64_t>(apply_s_ * 1e6); }  // all applies so far

 private:
  struct Source;
  struct Pending;
  struct Chunk;

  Chunk* find_chunk(const Header& h, std::string* error);
  bool is_repeat(const Chunk& c, int worker, uint64_t step, bool rejoined) const;
  static bool has_pushed(const Chunk& chunk, int worker);  // the chunk's oldest pending step
  void add(Chunk& c, uint64_t slot, const Update& update, const float* grad);
  void keep(Pending& p, const Update& update, const float* grad, size_t n);
  uint64_t lead(int worker, uint64_t step);
  void apply(Chunk& chunk, Pending& step, double clip_factor = 1.0);
  void sum_step(Outcome* out);
  void apply_clipped(const ExactSquares& total);
  void make_writable(Chunk& chunk);
  void apply_sources(Chunk& chunk, const Pending& step, float scale, double lr);
  void applied(Chunk& chunk, const Pending& step);
  bool previous(const Chunk& c, uint64_t want) const;
  void create_area();

  const ServerOptions& options_;
  const ConsistencyPolicy& policy_;
  const JobShape job_;
  const Slice slice_;
  const size_t chunk_len_;  // elements per chunk (the last one may be shorter)
  std::vector<Chunk> chunks_;
  std::unique_ptr<Optimizer> optimizer_;
  // Plain sync with a worker on this host: the shard's values live in this segment, which
  // same-host workers map read-only and compute from (WELCOME shm 2, docs/wire_protocol.md).
  SharedMemory area_;
  std::vector<Header> unreported_;  // async, ssp: metrics applied since each worker's last PARAMS
  std::vector<uint64_t> clock_of_;  // ssp: steps each worker pushed (to this shard's first chunk)
  uint64_t lead_max_ = 0;           // ssp: the largest lead over the slowest worker seen
  uint64_t stale_sum_ = 0, stale_count_ = 0, stale_max_ = 0;  // async, first chunk
  uint64_t dropped_ = 0;            // backup workers: late pushes dropped (first chunk)
  double apply_s_ = 0;     // time spent applying updates (the workers wait for it in sync)
  uint64_t applies_ = 0;   // chunk updates applied
  // Sync and ssp with staleness 0 without backup workers (every worker in every step): pushes
  // are kept, not summed on arrival, and apply_sources sums them in worker order (see
  // Pending::sources), so the result does not depend on which worker was faster.
  const bool ordered_sums_;
  // --backup-workers with tables: pushes kept (in worker order, as ordered_sums_ keeps them),
  // applied by apply_step; and each worker's chunks pushed of the step being collected.
  const bool held_steps_;
  std::vector<size_t> held_pushes_;
  // Plain sync without replacements: the values live in area_ (create_area).
  const bool shared_area_;
  std::vector<TableInFile> resumed_tables_;  // resume(): where the checkpoint's tables lie, until taken
  // --clip-norm (sync): the step whose CLIP the shard waits for, and its part of the squares.
  const bool clipping_;
  bool clip_wait_ = false;
  uint64_t clip_step_ = 0;
  ExactSquares clip_part_;
  uint64_t clip_steps_ = 0, clipped_steps_ = 0;  // steps applied, and those scaled down
  double smallest_norm_ = 0, largest_norm_ = 0;  // of the steps' mean gradients
  double largest_part_ = 0;                      // the largest norm of this shard's part of one
};

}  // namespace pstrain
