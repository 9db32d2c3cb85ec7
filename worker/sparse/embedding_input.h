// The worker's side of embedding tables on the parameter servers (docs/sparse.md): per batch of
// CTR records (dense features and categorical raw IDs), the unique keys to pull from each shard,
// the model's input x built from the pulled rows, and the summed gradient per unique key to push.
//
//   EmbeddingInput in(options);
//   in.prepare(raw_ids, counts, batch);                 // dedup and route by shard_of
//   for each shard s: send in.pull(s); in.set_rows(s, answer, &error);
//   in.gather(dense, x);                                // x = [dense, field 0's pooled row, ...]
//   model.train_step(..., x, ..., dx);                  // dx = dL/dx
//   for each shard s: push in.gradients(s, dx);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/util/id_map.h"
#include "shared/wire/sparse_wire.h"
#include "worker/sparse/embedding_setup.h"

namespace pstrain {

struct EmbeddingInputOptions {
  size_t dense = 13;              // dense features per record (copied first into x)
  size_t fields = 26;             // categorical fields per record, each one or more IDs
  uint32_t dim = 16;              // floats per embedding row, 1..kMaxSparseDim
  bool per_field_tables = false;  // table f holds field f's keys (key = raw ID); else one table 0
                                  // for all fields, key = embedding_key(f, raw, false)
  int num_ps = 1;
  EmbeddingPool pool = EmbeddingPool::kSum;  // a field of several IDs: the sum or mean of their rows
};

// The key of field `field`'s raw ID: with per-field tables the raw ID itself; in the shared table
// mix_id(raw ^ mix_id(field + 1)) (shared/train/sparse_ids.h), so equal raw IDs of different
// fields get different rows. Part of the format (checkpointed tables are keyed by it): it must
// never change. A missing ID (kCriteoMissingId) is an ID like any other: each field learns a row
// for "empty".
uint64_t embedding_key(size_t field, uint64_t raw, bool per_field_tables);

// The most IDs (list elements, over every record and field) one prepare() takes.
constexpr size_t kMaxBatchIds = size_t{1} << 31;

class EmbeddingInput {
 public:
  // Throws pstrain::UsageError for dim 0 or over kMaxSparseDim, fields 0, num_ps < 1.
  explicit EmbeddingInput(const EmbeddingInputOptions& options);

  const EmbeddingInputOptions& options() const { return options_; }
  size_t input_dim() const { return options_.dense + options_.fields * options_.dim; }
  size_t batch() const { return batch_; }

  // A new batch: counts (batch x fields, record by record; each >= 1) says how many IDs each
  // field lists, raw_ids holds them in that order (null counts: one each, raw_ids batch x
  // fields). Finds the unique keys per (shard, table) in first-seen order (record by record, field
  // by field, ID by ID) and forgets the last batch's rows. Throws pstrain::Error for more than
  // kMaxBatchIds IDs in all.
  void prepare(const uint64_t* raw_ids, const uint32_t* counts, size_t batch);
  void prepare(const uint64_t* raw_ids, size_t batch) { prepare(raw_ids, nullptr, batch); }
  // What to ask shard `shard` for: one section per table with keys there, tables increasing,
  // dim 0, ids the unique keys. Empty when the shard has none of the batch's keys (then no
  // set_rows is needed for it).
  const std::vector<SparseSection>& pull(int shard) const;
  // The shard's SPARSE_ROWS answer (sections: table, dim, values; ids empty). It must match
  // pull(shard) exactly: the same tables in order, dim == options.dim, count * dim values, all
  // finite. False with *error saying what differs otherwise; the shard then has no rows.
  bool set_rows(int shard, std::vector<SparseSection> rows, std::string* error);
  // x: batch x input_dim(), record by record: its dense features (dense: batch x options.dense;
  // may be null when that is 0), then field 0's row, field 1's, ... A field of one ID gives its
  // row as it is; a field of several the sum of their rows (added in order to a copy of the
  // first), or under kMean that sum divided by their count. Every shard with keys must have had
  // its rows set.
  void gather(const float* dense, float* x) const { gather(dense, 0, batch_, x); }
  // The same for records [first, first + n) of the batch only (a micro-batch of a step whose
  // records were prepared together): dense and x hold those n records.
  void gather(const float* dense, size_t first, size_t n, float* x) const;
  // dx: batch x input_dim() (dL/dx; the embedding columns are read). For pull(shard)'s keys, in
  // the same sections and order (dim and ids set), each key's gradient summed over its
  // occurrences in record order, then field order, then the field's order of IDs: the same bits
  // on every run. An occurrence's gradient is its field's columns of dx, divided by the field's
  // count under kMean when that is over 1.
  std::vector<SparseSection> gradients(int shard, const float* dx) const;
  // Unique keys over all shards and tables (for logs).
  size_t unique_keys() const { return slots_.size(); }

 private:
  struct Slot {  // a unique key: where its row is (while prepare runs, section is the table)
    uint32_t shard, section, position;
  };
  uint32_t table_of(size_t field) const {
    return options_.per_field_tables ? static_cast<uint32_t>(field) : 0;
  }
  size_t tables() const { return options_.per_field_tables ? options_.fields : 1; }
  uint32_t find_or_add(const TableId& key);
  // pull_ from the staged keys (a section per table with keys, per shard), the slots' sections.
  void make_pulls();
  const float* row(uint32_t slot) const;
  // The pooled row of occurrences [begin, end) (one field's IDs) into out.
  void pool(uint32_t begin, uint32_t end, float* out) const;

  EmbeddingInputOptions options_;
  size_t batch_ = 0;
  std::vector<uint32_t> slot_of_;  // per occurrence (record, field, ID): its key's slot
  std::vector<TableId> keys_;      // per occurrence: its key (prepare()'s scratch)
  // With a field of several IDs in the batch (lists_): per (record, field) its first occurrence
  // (batch x fields + 1 entries), and per occurrence its (record, field). Without, occurrence i
  // is (record, field) i.
  bool lists_ = false;
  std::vector<uint32_t> first_of_, cell_of_;
  std::vector<Slot> slots_;
  std::vector<uint64_t> field_salt_;                // shared table: mix_id(field + 1)
  std::vector<std::vector<uint64_t>> staged_;       // per (shard, table): the keys, first seen first
  std::vector<uint32_t> section_of_;                // per (shard, table): its section in pull_
  std::vector<std::vector<uint32_t>> occurrences_;  // per shard: its occurrences, in order
  std::vector<std::vector<SparseSection>> pull_;    // per shard
  std::vector<std::vector<SparseSection>> rows_;    // per shard, as set_rows took them
  std::vector<bool> has_rows_;
  IdMap<TableId> slot_of_key_;  // (key, table) -> its slot, this batch's
};

}  // namespace pstrain
