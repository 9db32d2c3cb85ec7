// EmbeddingTable's checkpoint bytes (docs/sparse.md, "Checkpoint format"), written and read by
// shared/checkpoint/table_file.h, which checks the file in itself; here the file is checked
// against this table (its name, id, dim and optimizer), then against the rows it holds (an ID
// saved twice) and the shard's memory bound.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "ps/sparse/embedding_table.h"
#include "ps/sparse/row_snapshot.h"
#include "shared/util/error.h"
#include "shared/checkpoint/table_file.h"
#include "shared/train/sparse_ids.h"

namespace pstrain {

void EmbeddingTable::save(std::string* out) const {
  StringSink sink(out);
  save(&sink);
}

// The header of this table's saved form: its identity, and its row and sighting counts now.
SavedTableHeader EmbeddingTable::saved_header() const {
  SavedTableHeader h;
  h.table = options_.id;
  h.dim = dim();
  h.slots = static_cast<uint32_t>(slots());
  h.name = options_.name;
  h.optimizer = table_optimizer_name(optimizer_kind());
  h.rows = index_.size();
  h.sightings = sightings_.size();
  return h;
}

uint64_t EmbeddingTable::saved_size() const { return saved_table_size(saved_header()); }

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
  SavedTableWriter writer(saved_header(), out);  // counts: the index's and sightings' sizes, as above
  for (const auto& [id, row] : rows) {
    const RowMeta& m = arena_.meta(row);
    writer.row(SavedRow{id, m.last_touched, m.updates}, arena_.values(row));
  }
  for (const SavedSighting& s : seen) writer.sighting(s);
  writer.finish();
}

namespace {

// The snapshot is done with when the last copy of its TableSource goes, written or not (a write
// that failed before the tables): the arena then stops copying rows aside.
struct FinishSnapshot {
  std::shared_ptr<RowSnapshot> rows;
  ~FinishSnapshot() {
    if (rows != nullptr) rows->finish();
  }
};

}  // namespace

// The (ID, row) pairs are made and sorted by the writer, from the snapshot's bookkeeping: the
// capture itself copies only the sightings (IDs not admitted yet) and notes the rows.
TableSource EmbeddingTable::snapshot_source() {
  const SavedTableHeader header = saved_header();
  auto seen = std::make_shared<std::vector<SavedSighting>>();
  seen->reserve(sightings_.size());
  for (const auto& [id, s] : sightings_) seen->push_back(SavedSighting{id, s.count, s.last_seen});
  std::shared_ptr<RowSnapshot> rows = arena_.snapshot();
  auto done = std::make_shared<FinishSnapshot>();
  done->rows = rows;
  const size_t floats = row_floats();
  auto write = [header, seen, rows, done, floats](ByteSink* out) {
    std::vector<std::pair<uint64_t, uint32_t>> live = rows->live_rows();
    if (live.size() != header.rows) {
      throw Error("a table's snapshot holds " + std::to_string(live.size()) + " rows, its index " +
                  std::to_string(header.rows));
    }
    std::sort(live.begin(), live.end());
    std::sort(seen->begin(), seen->end(), [](const SavedSighting& a, const SavedSighting& b) { return a.id < b.id; });
    std::vector<float> values(floats);
    SavedTableWriter writer(header, out);
    for (const auto& [id, row] : live) {
      RowMeta m;
      rows->read(row, values.data(), &m);
      writer.row(SavedRow{id, m.last_touched, m.updates}, values.data());
    }
    rows->finish();  // the rows are read: the apply writes them without copying again
    for (const SavedSighting& s : *seen) writer.sighting(s);
    writer.finish();
  };
  return TableSource{saved_table_size(header), write};
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

bool EmbeddingTable::load(const std::string& bytes, int shard, int num_ps, size_t max_bytes, std::string* error,
                          bool new_job) {
  ByteReader in(bytes);
  return load(in, shard, num_ps, max_bytes, error, new_job);
}

// Two passes through the bytes, each through the reader's bounded buffer (a table of gigabytes is
// never held beside the rows it becomes): the first checks everything and counts what this shard
// takes, changing nothing; the second adds those rows.
bool EmbeddingTable::load(ByteReader& in, int shard, int num_ps, size_t max_bytes, std::string* error,
                          bool new_job) {
  const uint64_t start = in.position();
  SavedTableHeader header;
  size_t rows = 0, seen = 0;
  std::string twice;
  SavedTableVisitor count;
  count.header = [&](const SavedTableHeader& h) { header = h; };
  count.row = [&](const SavedRow& r, const float*) {
    if (shard_of(r.id, num_ps) != shard) return;
    ++rows;
    if (twice.empty() && index_.contains(r.id)) twice = "ID " + std::to_string(r.id) + " is saved twice";
  };
  count.sighting = [&](const SavedSighting& s) {
    if (shard_of(s.id, num_ps) != shard) return;
    ++seen;
    if (twice.empty() && (index_.contains(s.id) || sightings_.count(s.id) != 0)) {
      twice = "ID " + std::to_string(s.id) + " is saved twice";
    }
  };
  std::string why;
  ByteReader first(in, start);
  if (read_saved_table(first, count, &why)) why = header_mismatch(header, options_, slots(), table_optimizer_name(optimizer_kind()));
  if (!why.empty()) return *error = "saved embedding table '" + options_.name + "': " + why, false;
  if (!twice.empty()) return *error = twice, false;
  if (bytes_with(rows, seen) > max_bytes) {
    *error = "embedding table '" + options_.name + "': loading " + std::to_string(rows) + " rows would take " +
             std::to_string(bytes_with(rows, seen)) + " bytes, over the shard's bound";
    return false;
  }
  SavedTableVisitor take;
  take.row = [&](const SavedRow& r, const float* values) {
    if (shard_of(r.id, num_ps) != shard) return;
    const uint32_t row = arena_.allocate();
    std::memcpy(arena_.values(row), values, row_floats() * sizeof(float));
    arena_.meta(row) = RowMeta{r.id, new_job ? 0 : r.last_touched, r.updates};
    index_.find_or_insert(r.id, row);
  };
  take.sighting = [&](const SavedSighting& s) {
    if (shard_of(s.id, num_ps) == shard) sightings_.emplace(s.id, Sighting{s.count, new_job ? 0 : s.last_seen});
  };
  ByteReader second(in, start);
  if (!read_saved_table(second, take, &why)) {  // what the first pass read has changed since
    return *error = "saved embedding table '" + options_.name + "': changed while it was loaded: " + why, false;
  }
  return true;
}

}  // namespace pstrain
