// A tiny Criteo-format data set for CTR job tests, and the tables a job's PS shards saved with
// --save-params (docs/sparse.md), loaded back for comparison.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ps/sparse/embedding_table.h"

namespace pstrain::test {

// Record r's categorical ID of field f: one of 12 values per field, so rows repeat within and
// across batches.
uint64_t ctr_raw_id(int r, int f);
// The key that record r's field f has in the tables (the missing ID where the field is empty).
uint64_t ctr_key(int r, int f, bool per_field_tables);
// With `lists`, the fields kCtrFirstList.. of a non-empty field list 1 to 3 IDs (ctr_raw_id
// first, then IDs of the same 12 values: some repeat within the field); without, as ctr_key.
constexpr int kCtrFirstList = 20;
std::vector<uint64_t> ctr_keys(int r, int f, bool per_field_tables, bool lists);
// Writes `records` Criteo lines (records offset .. offset + records - 1) to `path`; the label is
// learnable from the categorical IDs (a hidden per-ID effect; a list's: the mean of its IDs')
// and the first dense feature. With `lists`, fields as ctr_keys says, written "a,b,c".
void write_criteo(const std::string& path, int records, int offset, bool lists = false);

// A job's tables as saved by its PS shards (DIR/embeddings), every shard's file of a table loaded
// into one table (re-slicing onto 1 shard is loading every file), by table name; table t of
// `names` has id t. A failed expectation for a file that does not load.
std::map<std::string, std::unique_ptr<EmbeddingTable>> load_tables(const std::string& dir, const std::string& optimizer,
                                                                   const std::vector<std::string>& names, size_t dim);

}  // namespace pstrain::test
