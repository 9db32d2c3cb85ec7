// EmbeddingTable's checkpoint bytes (docs/sparse.md, "Checkpoint format"), written and read by
// shared/checkpoint/table_file.h, which checks the file in itself; here the file is checked
// against this table (its name, id, dim and optimizer), then against the rows it holds (an ID
// saved twice) and the shard's memory bound.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ps/sparse/embedding_table.h"
#include "shared/checkpoint/table_file.h"
#include "shared/train/sparse_ids.h"

namespace pstrain {

struct EmbeddingTable::Saved {
  SavedTable table;  // read with SavedTableParts::kAll: each row's values are row_floats()
};

void EmbeddingTable::save(std::string* out) const {
  StringSink sink(out);
  save(&sink);
}

uint64_t EmbeddingTable::saved_size() const {
  SavedTableHeader h;
  h.dim = dim();
  h.slots = static_cast<uint32_t>(slots());
  h.name = options_.name;
  h.optimizer = optimizer_kind();
  h.rows = index_.size();
  h.sightings = sightings_.size();
  return saved_table_size(h);
}

// The rows are sorted by ID through (ID, row) pairs, 16 bytes a row, and written from the arena
// in place: a save to a file holds no copy of the table's bytes.
void EmbeddingTable::save(ByteSink* out) const {
  std::vector<std::pair<uint64_t, uint32_t>> rows;
  rows.reserve(index_.size());
  index_.for_each([&](uint64_t id, uint32_t row) { rows.emplace_back(id, row); });
  std::sort(rows.begin(), rows.end());
  std::vector<SavedSighting> seen;
  seen.reserve(sightings_.size());
  for (const auto& [id, s] : sightings_) seen.push_back(SavedSighting{id, s.count, s.last_seen});
  std::sort(seen.begin(), seen.end(), [](const SavedSighting& a, const SavedSighting& b) { return a.id < b.id; });
  SavedTableHeader h;
  h.table = options_.id;
  h.dim = dim();
  h.slots = static_cast<uint32_t>(slots());
  h.name = options_.name;
  h.optimizer = optimizer_kind();
  h.rows = rows.size();
  h.sightings = seen.size();
  SavedTableWriter writer(h, out);
  for (const auto& [id, row] : rows) {
    const RowMeta& m = arena_.meta(row);
    writer.row(SavedRow{id, m.last_touched, m.updates}, arena_.values(row));
  }
  for (const SavedSighting& s : seen) writer.sighting(s);
  writer.finish();
}

namespace {

// The header's fields against this table's; "" when they match.
std::string header_mismatch(const SavedTableHeader& h, const TableOptions& o, size_t slots, const std::string& kind) {
  if (h.name != o.name || h.table != o.id) return "it is table '" + h.name + "' (" + std::to_string(h.table) + ")";
  if (h.dim != o.dim) return "dim " + std::to_string(h.dim) + ", this job's is " + std::to_string(o.dim);
  if (h.optimizer != kind || h.slots != slots) return "optimizer " + h.optimizer + ", this job's is " + kind;
  return "";
}

}  // namespace

bool EmbeddingTable::decode(const std::string& bytes, Saved* out, std::string* error) const {
  std::string why;
  if (read_saved_table(bytes, &out->table, &why, SavedTableParts::kAll)) {
    why = header_mismatch(out->table.header, options_, slots(), optimizer_kind());
  }
  if (!why.empty()) *error = "saved embedding table '" + options_.name + "': " + why;
  return why.empty();
}

bool EmbeddingTable::load(const std::string& bytes, int shard, int num_ps, size_t max_bytes, std::string* error,
                          bool new_job) {
  Saved saved;
  if (!decode(bytes, &saved, error)) return false;
  size_t rows = 0, seen = 0;
  for (const SavedRow& r : saved.table.rows) {
    if (shard_of(r.id, num_ps) != shard) continue;
    ++rows;
    if (index_.contains(r.id)) return *error = "ID " + std::to_string(r.id) + " is saved twice", false;
  }
  for (const SavedSighting& s : saved.table.sightings) {
    if (shard_of(s.id, num_ps) != shard) continue;
    ++seen;
    if (index_.contains(s.id) || sightings_.count(s.id) != 0) {
      return *error = "ID " + std::to_string(s.id) + " is saved twice", false;
    }
  }
  if (bytes_with(rows, seen) > max_bytes) {
    *error = "embedding table '" + options_.name + "': loading " + std::to_string(rows) + " rows would take " +
             std::to_string(bytes_with(rows, seen)) + " bytes, over the shard's bound";
    return false;
  }
  restore(saved, shard, num_ps, new_job);
  return true;
}

void EmbeddingTable::restore(const Saved& saved, int shard, int num_ps, bool new_job) {
  const SavedTable& t = saved.table;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const SavedRow& r = t.rows[i];
    if (shard_of(r.id, num_ps) != shard) continue;
    const uint32_t row = arena_.allocate();
    std::memcpy(arena_.values(row), &t.values[i * row_floats()], row_floats() * sizeof(float));
    arena_.meta(row) = RowMeta{r.id, new_job ? 0 : r.last_touched, r.updates};
    index_.find_or_insert(r.id, row);
  }
  for (const SavedSighting& s : t.sightings) {
    if (shard_of(s.id, num_ps) == shard) sightings_.emplace(s.id, Sighting{s.count, new_job ? 0 : s.last_seen});
  }
}

}  // namespace pstrain
