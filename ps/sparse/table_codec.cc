// EmbeddingTable's checkpoint bytes (docs/sparse.md, "Checkpoint format"): little-endian
// fields, rows sorted by ID, a CRC-32C of everything before it at the end.
#include <algorithm>
#include <cstring>
#include <vector>

#include "ps/sparse/embedding_table.h"
#include "shared/train/sparse_ids.h"
#include "shared/util/crc32c.h"
#include "shared/util/numeric.h"

namespace pstrain {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'E', 'M', 'B', 'T', 'B', 'L'};
constexpr uint32_t kFormat = 1;
constexpr size_t kRowHead = 3 * sizeof(uint64_t);                 // id, last touched, updates
constexpr size_t kSighting = 2 * sizeof(uint64_t) + sizeof(uint32_t);  // id, count, last seen

void put(std::string* out, uint64_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_text(std::string* out, const std::string& s) {
  put(out, s.size(), 4);
  out->append(s);
}

// Bounds-checked little-endian reads of a byte string; `ok` turns false at the first overrun.
struct Reader {
  const std::string& bytes;
  size_t at;
  size_t end;  // the first byte not to read
  bool ok = true;
  size_t left() const { return end - at; }
  uint64_t get(size_t n) {
    if (!ok || left() < n) return ok = false, 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
    at += n;
    return v;
  }
  float get_float() {
    const uint32_t bits = static_cast<uint32_t>(get(4));
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  std::string get_text() {
    const uint64_t n = get(4);
    if (!ok || left() < n) return ok = false, std::string();
    at += n;
    return bytes.substr(at - n, n);
  }
};

void put_float(std::string* out, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  put(out, bits, 4);
}

}  // namespace

struct EmbeddingTable::Saved {
  std::vector<RowMeta> rows;
  std::vector<float> values;  // rows.size() * row_floats()
  std::vector<std::pair<uint64_t, Sighting>> sightings;
};

void EmbeddingTable::save(std::string* out) const {
  const size_t start = out->size();
  out->append(kMagic, sizeof kMagic);
  put(out, kFormat, 4);
  put(out, options_.id, 4);
  put(out, dim(), 8);
  put(out, slots(), 4);
  put_text(out, options_.name);
  put_text(out, optimizer_kind());
  std::vector<std::pair<uint64_t, uint32_t>> rows;
  rows.reserve(index_.size());
  index_.for_each([&](uint64_t id, uint32_t row) { rows.emplace_back(id, row); });
  std::sort(rows.begin(), rows.end());
  std::vector<std::pair<uint64_t, Sighting>> seen(sightings_.begin(), sightings_.end());
  std::sort(seen.begin(), seen.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  put(out, rows.size(), 8);
  put(out, seen.size(), 8);
  for (const auto& [id, row] : rows) {
    const RowMeta& m = arena_.meta(row);
    put(out, id, 8);
    put(out, m.last_touched, 8);
    put(out, m.updates, 8);
    const float* v = arena_.values(row);
    for (size_t j = 0; j < row_floats(); ++j) put_float(out, v[j]);
  }
  for (const auto& [id, s] : seen) {
    put(out, id, 8);
    put(out, s.count, 4);
    put(out, s.last_seen, 8);
  }
  put(out, crc32c::value(out->data() + start, out->size() - start), 4);
}

namespace {

// The header's fields against this table's; "" when they match.
std::string header_mismatch(Reader& r, const TableOptions& o, size_t slots, const std::string& kind) {
  if (r.bytes.compare(0, sizeof kMagic, kMagic, sizeof kMagic) != 0) return "not a saved embedding table (bad magic)";
  r.at = sizeof kMagic;
  const uint64_t format = r.get(4), id = r.get(4), dim = r.get(8), saved_slots = r.get(4);
  const std::string name = r.get_text(), saved_kind = r.get_text();
  if (!r.ok) return "truncated header";
  if (format != kFormat) return "format " + std::to_string(format) + ", expected " + std::to_string(kFormat);
  if (name != o.name || id != o.id) return "it is table '" + name + "' (" + std::to_string(id) + ")";
  if (dim != o.dim) return "dim " + std::to_string(dim) + ", this job's is " + std::to_string(o.dim);
  if (saved_kind != kind || saved_slots != slots) return "optimizer " + saved_kind + ", this job's is " + kind;
  return "";
}

}  // namespace

bool EmbeddingTable::decode(const std::string& bytes, Saved* out, std::string* error) const {
  const auto fail = [&](const std::string& why) {
    *error = "saved embedding table '" + options_.name + "': " + why;
    return false;
  };
  if (bytes.size() < sizeof kMagic + 4) return fail("truncated (" + std::to_string(bytes.size()) + " bytes)");
  const size_t body = bytes.size() - 4;
  Reader tail{bytes, body, bytes.size()};
  if (tail.get(4) != crc32c::value(bytes.data(), body)) return fail("checksum mismatch (corrupted)");
  Reader r{bytes, 0, body};
  const std::string mismatch = header_mismatch(r, options_, slots(), optimizer_kind());
  if (!mismatch.empty()) return fail(mismatch);
  const uint64_t rows = r.get(8), seen = r.get(8);
  const size_t row_bytes = kRowHead + row_floats() * sizeof(float);
  if (!r.ok || rows > r.left() / row_bytes || seen > r.left() / kSighting ||
      rows * row_bytes + seen * kSighting != r.left()) {
    return fail("its sizes do not add up");
  }
  out->rows.resize(rows);
  out->values.resize(rows * row_floats());
  for (uint64_t i = 0; i < rows; ++i) {
    out->rows[i] = RowMeta{r.get(8), r.get(8), r.get(8)};
    for (size_t j = 0; j < row_floats(); ++j) out->values[i * row_floats() + j] = r.get_float();
  }
  out->sightings.resize(seen);
  for (auto& [id, s] : out->sightings) {
    id = r.get(8);
    s.count = static_cast<uint32_t>(r.get(4));
    s.last_seen = r.get(8);
  }
  return check_saved(*out, error);
}

// IDs strictly increasing, each a row or a sighting, values finite, counts positive.
bool EmbeddingTable::check_saved(const Saved& s, std::string* error) const {
  std::string why;
  const auto increasing = [](const auto& v, auto id) {
    for (size_t i = 1; i < v.size(); ++i) if (id(v[i - 1]) >= id(v[i])) return false;
    return true;
  };
  if (!increasing(s.rows, [](const RowMeta& m) { return m.id; }) ||
      !increasing(s.sightings, [](const auto& p) { return p.first; })) {
    why = "IDs not sorted or repeated";
  } else if (!all_finite(s.values.data(), s.values.size())) {
    why = "a value is not finite";
  }
  for (const auto& [id, sighting] : s.sightings) {
    const bool held = std::binary_search(s.rows.begin(), s.rows.end(), RowMeta{id, 0, 0},
                                         [](const RowMeta& a, const RowMeta& b) { return a.id < b.id; });
    if (why.empty() && (sighting.count == 0 || held)) why = "a sighting of a held ID, or of count 0";
  }
  if (!why.empty()) *error = "saved embedding table '" + options_.name + "': " + why;
  return why.empty();
}

bool EmbeddingTable::load(const std::string& bytes, int shard, int num_ps, size_t max_bytes, std::string* error) {
  Saved saved;
  if (!decode(bytes, &saved, error)) return false;
  size_t rows = 0, seen = 0;
  for (const RowMeta& m : saved.rows) {
    if (shard_of(m.id, num_ps) != shard) continue;
    ++rows;
    if (index_.contains(m.id)) return *error = "ID " + std::to_string(m.id) + " is saved twice", false;
  }
  for (const auto& [id, s] : saved.sightings) {
    if (shard_of(id, num_ps) != shard) continue;
    ++seen;
    if (index_.contains(id) || sightings_.count(id) != 0) return *error = "ID " + std::to_string(id) + " is saved twice", false;
  }
  if (bytes_with(rows, seen) > max_bytes) {
    *error = "embedding table '" + options_.name + "': loading " + std::to_string(rows) + " rows would take " +
             std::to_string(bytes_with(rows, seen)) + " bytes, over the shard's bound";
    return false;
  }
  restore(saved, shard, num_ps);
  return true;
}

void EmbeddingTable::restore(const Saved& saved, int shard, int num_ps) {
  for (size_t i = 0; i < saved.rows.size(); ++i) {
    if (shard_of(saved.rows[i].id, num_ps) != shard) continue;
    const uint32_t row = arena_.allocate();
    std::memcpy(arena_.values(row), &saved.values[i * row_floats()], row_floats() * sizeof(float));
    arena_.meta(row) = saved.rows[i];
    index_.find_or_insert(saved.rows[i].id, row);
  }
  for (const auto& [id, s] : saved.sightings) {
    if (shard_of(id, num_ps) == shard) sightings_.emplace(id, s);
  }
}

}  // namespace pstrain
