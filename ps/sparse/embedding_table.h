// One embedding table's rows on one PS shard: a hash map from 64-bit ID to a row of the arena
// (weights, then the optimizer's slots), rows created when an ID is admitted, updated by the
// sparse optimizer at each step's apply, evicted when unused for expiry_steps. Pulls never
// change it, so what a step changes depends only on the step's pushes, in worker order.
// ShardTables (ps/sparse/shard_tables.h) checks every input before it reaches a table; here the
// preconditions are invariants. Single-threaded (the shard's loop thread). docs/sparse.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "shared/train/row_init.h"
#include "ps/sparse/row_arena.h"
#include "ps/sparse/sparse_optimizer.h"
#include "shared/checkpoint/checkpoint.h"
#include "shared/checkpoint/table_file.h"
#include "shared/util/byte_reader.h"
#include "shared/util/file_util.h"
#include "shared/util/id_map.h"

namespace pstrain {

struct TableOptions {
  std::string name;                  // for messages and checkpoints
  uint32_t id = 0;                   // the table's number in messages; a part of the initialiser's key
  size_t dim = 0;                    // floats per row (>= 1)
  SparseOptimizerOptions optimizer;
  RowInit init;
  uint64_t seed = 0;                 // the job's seed (the initialiser's key)
  uint32_t min_count = 1;            // an ID is admitted at its min_count-th sighting (<= 1: at once)
  uint64_t expiry_steps = 0;         // rows and sightings unused this many steps are evicted (0: never)
  size_t block_rows = 0;             // rows per arena block, a power of two (0: up to 1 MiB)
};

struct TableStats {
  size_t rows = 0;           // rows held
  size_t sightings = 0;      // IDs seen but not admitted yet (min_count > 1)
  uint64_t admissions = 0;   // rows created since this table was made
  uint64_t evictions = 0;    // rows expired since then
  size_t bytes = 0;          // bytes()
};

class EmbeddingTable {
 public:
  // Throws pstrain::Error for a dim of 0 or bad optimizer options.
  explicit EmbeddingTable(const TableOptions& options);

  const TableOptions& options() const { return options_; }
  size_t dim() const { return options_.dim; }
  size_t slots() const { return optimizer_->slots(); }
  size_t row_floats() const { return dim() * (1 + slots()); }
  TableOptimizer optimizer_kind() const { return optimizer_->kind(); }

  // A pull: the rows of `n` IDs into out (n * dim floats). An ID without a row reads as the row
  // it would be created with when min_count <= 1, else as zeros (not admitted yet).
  void lookup(const uint64_t* ids, size_t n, float* out) const;

  // rows[i]: the row of ids[i], or IdIndex::kAbsent. A step's are found once, for count_new and
  // apply (each a pass over an index larger than the cache: bench/ctr.py).
  void find_rows(const uint64_t* ids, size_t n, std::vector<uint32_t>* rows) const;
  // The rows and sightings applying these unique IDs would add (for the memory bound); found:
  // find_rows' answer for them.
  void count_new(const uint64_t* ids, const uint32_t* found, size_t n, size_t* rows, size_t* sightings) const;
  // The bytes the table would hold after adding that many rows and sightings (an estimate for
  // the maps: docs/sparse.md, "Memory").
  size_t bytes_with(size_t rows, size_t sightings) const;
  size_t bytes() const { return bytes_with(0, 0); }

  // Step `step`'s summed gradients of `n` unique IDs (n * dim floats): each row held is updated;
  // an ID without one is sighted, and admitted (its row created from the initialiser) at its
  // min_count-th sighting: with min_count <= 1 the gradient is then applied to the new row,
  // else it is dropped (it was computed while the ID read as zeros).
  // rows: find_rows' answer for ids, with nothing applied to the table since.
  void apply(uint64_t step, const uint64_t* ids, const uint32_t* rows, size_t n, const float* grad_sums,
             float grad_scale, double lr);
  // The end of step `step`: every ceil(expiry_steps / 4) steps, rows and sightings unused for
  // expiry_steps steps or more are dropped.
  void expire(uint64_t step);

  TableStats stats() const;

  // Checkpoints (ps/sparse/table_codec.cc): the rows (sorted by ID, with slots and bookkeeping)
  // and the sightings, appended to *out; and the rows of a saved table that shard `shard` of
  // `num_ps` holds, added to this one: any shard count's files re-slice onto any other's. load()
  // checks everything (format, checksum, the table's name, dim and optimizer, IDs held twice)
  // and that the table stays within max_bytes before it changes anything. `new_job` (a job
  // starting from saved tables, --init-params): the rows' last-touched steps and the sightings'
  // last-seen steps are set to 0, the new job's first, so expiry counts from its start.
  void save(ByteSink* out) const;
  void save(std::string* out) const;
  // The bytes save() writes.
  uint64_t saved_size() const;
  // What save() would write now, captured for a checkpoint's background writer (the rows
  // copy-on-write: ps/sparse/row_snapshot.h): its write() may run on another thread while this
  // table is applied to, and must be done (or never started) before the table is destroyed.
  TableSource snapshot_source();
  bool load(const std::string& bytes, int shard, int num_ps, size_t max_bytes, std::string* error,
            bool new_job = false);
  // The same of the table `in` reads from its position (a table in a checkpoint's shard file, read
  // there in bounded pieces: loading takes the rows' memory and a buffer, not a copy of the file).
  bool load(ByteReader& in, int shard, int num_ps, size_t max_bytes, std::string* error, bool new_job = false);

 private:
  SavedTableHeader saved_header() const;  // what save() writes first; saved_size() counts from it

  struct Sighting {
    uint32_t count = 0;
    uint64_t last_seen = 0;
  };
  void prefetch_row(uint32_t row) const;
  uint32_t create_row(uint64_t id, uint64_t step);
  void update_row(uint32_t row, uint64_t step, const float* grad_sum, float grad_scale, double lr);
  void sight(uint64_t id, uint64_t step);
  bool expired(uint64_t last, uint64_t step) const;

  const TableOptions options_;
  const std::unique_ptr<SparseOptimizer> optimizer_;
  RowArena arena_;
  IdIndex index_;                                      // ID -> row of arena_
  std::unordered_map<uint64_t, Sighting> sightings_;   // IDs not admitted yet (min_count > 1)
  uint64_t admissions_ = 0, evictions_ = 0;
  mutable std::vector<uint32_t> found_;  // find_rows' result for lookup, reused
};

}  // namespace pstrain
