// A PS shard's embedding tables: the checks every pull and push gets before it reaches a table,
// the step's apply (gradients summed per ID in worker order, then each table's optimizer), the
// memory bound over all tables, and the counters of the shard's log lines. Nothing that fails a
// check changes anything (docs/sparse.md). Single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ps/sparse/embedding_table.h"

namespace pstrain {

struct SparseShardOptions {
  int index = 0;         // this shard
  int num_ps = 1;        // shards in the job
  size_t max_bytes = 0;  // bound on bytes() (--max-shard-mib less the dense slice's state); 0: none
};

// One worker's gradients of one table for a step: `count` unique IDs of this shard and, for
// each, the sum of its per-sample gradients (grad_len floats, count * dim if well-formed).
struct TablePush {
  uint32_t table = 0;
  const uint64_t* ids = nullptr;
  size_t count = 0;
  const float* grads = nullptr;
  size_t grad_len = 0;
};

struct SparseStep {
  uint64_t step = 0;      // steps apply in increasing order (expiry counts them)
  double lr = 0;          // this step's learning rate (scheduled_lr)
  float grad_scale = 1;   // 1 / the step's samples over all workers
};

class ShardTables {
 public:
  // Throws pstrain::Error for two tables of one id, a bad table or bad shard options.
  ShardTables(const SparseShardOptions& options, const std::vector<TableOptions>& tables);

  // A pull of `n` unique IDs of this shard from `table` into out (n * dim floats).
  bool pull(uint32_t table, const uint64_t* ids, size_t n, float* out, std::string* error) const;
  // A pull's checks alone (the table known, the IDs unique and this shard's), and the lookup of
  // one that passed them (a parked pull is checked when it arrives and looked up when it can be
  // answered).
  bool check_pull(uint32_t table, const uint64_t* ids, size_t n, std::string* error) const;
  void lookup_checked(uint32_t table, const uint64_t* ids, size_t n, float* out) const;
  // A step's pushes, by_worker[i] worker i's (any number of tables, each at most once). Each
  // ID's gradient is summed in worker order (bit-for-bit the same whatever order the pushes
  // arrived in), then every table's touched rows are updated and expired rows dropped.
  bool apply_step(const SparseStep& step, const std::vector<std::vector<TablePush>>& by_worker, std::string* error);
  // apply_step for pushes that each passed check_pushes already (a sync step's, checked as they
  // arrived): the step's own checks and the memory bound only.
  bool apply_checked_step(const SparseStep& step, const std::vector<std::vector<TablePush>>& by_worker,
                          std::string* error);

  // One worker's pushes of a step, checked as apply_step checks them (each table at most once,
  // known, lengths, finite gradients, unique IDs of this shard), without applying anything: a
  // sync step's pushes are checked as they arrive, so one bad push is refused alone.
  bool check_pushes(const std::vector<TablePush>& pushes, std::string* error) const;

  const EmbeddingTable* table(uint32_t id) const;
  EmbeddingTable* table(uint32_t id) {  // a checkpoint's capture
    std::string unknown;
    return find(id, &unknown);
  }
  size_t bytes() const;  // all tables
  // Adds the rows of a saved table (any shard count's file) that this shard holds.
  bool load(uint32_t table, const std::string& saved, std::string* error, bool new_job = false);
  bool load(uint32_t table, ByteReader& saved, std::string* error, bool new_job = false);  // read in pieces
  // "embedding rows R (admitted A, evicted E, pending S), T MiB": for the progress and last lines.
  std::string counters_text() const;

 private:
  struct Merged;
  EmbeddingTable* find(uint32_t table, std::string* error) const;
  bool check_ids(const EmbeddingTable& t, const uint64_t* ids, size_t n, std::string* error) const;
  bool check_push(const TablePush& push, std::string* error) const;
  bool check_step(const SparseStep& step, std::string* error) const;
  bool check_all(const SparseStep& step, const std::vector<std::vector<TablePush>>& by_worker,
                 std::string* error) const;
  std::vector<Merged> merge(const std::vector<std::vector<TablePush>>& by_worker) const;
  bool check_memory(const std::vector<Merged>& merged, uint64_t step, std::string* error) const;

  // An empty map with room for n IDs: the checks' and the merge's (a message's or a step's own).
  IdIndex& scratch(size_t n) const;
  void trim_scratch() const;  // frees the scratch map's slots when over kScratchKeepBytes
  static constexpr size_t kScratchKeepBytes = size_t{4} << 20;

  const SparseShardOptions options_;
  mutable IdIndex scratch_;
  std::map<uint32_t, std::unique_ptr<EmbeddingTable>> tables_;  // by id: a fixed order
  bool applied_ = false;
  uint64_t last_step_ = 0;
};

}  // namespace pstrain
