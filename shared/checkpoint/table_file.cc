#include "shared/checkpoint/table_file.h"

#include <cmath>
#include <cstring>

#include "shared/util/crc32c.h"
#include "shared/util/error.h"
#include "shared/wire/sparse_wire.h"

namespace pstrain {
namespace {

constexpr char kTableMagic[8] = {'P', 'S', 'E', 'M', 'B', 'T', 'B', 'L'};
constexpr uint32_t kFormat = 1;
constexpr uint64_t kRowHead = 3 * sizeof(uint64_t);                      // id, last touched, updates
constexpr uint64_t kSighting = 2 * sizeof(uint64_t) + sizeof(uint32_t);  // id, count, last seen
constexpr uint32_t kMaxSlots = 8;

// Bounds-checked little-endian reads; `ok` turns false at the first overrun.
struct Reader {
  const std::string& bytes;
  size_t at, end;
  bool ok = true;
  size_t left() const { return end - at; }
  uint64_t get(size_t n) {
    if (!ok || left() < n) return ok = false, 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(bytes[at + i])} << (8 * i);
    at += n;
    return v;
  }
  std::string get_text() {
    const uint64_t n = get(4);
    if (!ok || left() < n) return ok = false, std::string();
    at += n;
    return bytes.substr(at - n, n);
  }
};

void put(std::string* out, uint64_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t row_bytes(const SavedTableHeader& h) { return kRowHead + (1 + h.slots) * h.dim * sizeof(float); }

bool read_header(Reader& r, SavedTableHeader* h, std::string* error) {
  if (r.bytes.compare(0, sizeof kTableMagic, kTableMagic, sizeof kTableMagic) != 0) {
    return *error = "not a saved embedding table (bad magic)", false;
  }
  r.at = sizeof kTableMagic;
  h->format = static_cast<uint32_t>(r.get(4));
  h->table = static_cast<uint32_t>(r.get(4));
  h->dim = r.get(8);
  h->slots = static_cast<uint32_t>(r.get(4));
  h->name = r.get_text();
  h->optimizer = r.get_text();
  h->rows = r.get(8);
  h->sightings = r.get(8);
  if (!r.ok) return *error = "truncated header", false;
  if (h->format != kFormat) {
    return *error = "format " + std::to_string(h->format) + ", expected " + std::to_string(kFormat), false;
  }
  if (h->dim == 0 || h->dim > kMaxSparseDim || h->slots > kMaxSlots) {
    return *error = "dim " + std::to_string(h->dim) + " with " + std::to_string(h->slots) + " slots", false;
  }
  const uint64_t row = row_bytes(*h);
  if (h->rows > r.left() / row || h->sightings > r.left() / kSighting ||
      h->rows * row + h->sightings * kSighting != r.left()) {
    return *error = "its sizes do not add up", false;
  }
  return true;
}

float get_float(Reader& r) {
  const uint32_t bits = static_cast<uint32_t>(r.get(4));
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void put_float(std::string* out, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  put(out, bits, 4);
}

// The rows after the header (whose sizes were checked), keeping the first `keep` floats of each.
bool read_rows(Reader& r, const SavedTableHeader& h, size_t keep, SavedTable* out, std::string* error) {
  const size_t row_floats = static_cast<size_t>((1 + h.slots) * h.dim);
  if (keep > 0) {
    out->rows.reserve(h.rows);
    out->values.resize(h.rows * keep);
  }
  float* v = out->values.data();
  uint64_t last = 0;
  for (uint64_t i = 0; i < h.rows; ++i) {
    const SavedRow row{r.get(8), r.get(8), r.get(8)};
    if (i > 0 && row.id <= last) return *error = "IDs not sorted or repeated", false;
    last = row.id;
    for (size_t j = 0; j < row_floats; ++j) {
      const float f = get_float(r);
      if (!std::isfinite(f)) return *error = "a value is not finite", false;
      if (j < keep) *v++ = f;
    }
    if (keep > 0) out->rows.push_back(row);
  }
  return true;
}

// The sightings after the rows. A merge with the rows' IDs, read where they lie in the bytes
// (kept or not), finds a sighting of a held ID.
bool read_sightings(Reader& r, const SavedTableHeader& h, bool keep, SavedTable* out, std::string* error) {
  const size_t stride = static_cast<size_t>(row_bytes(h)), first_row = r.at - h.rows * stride;
  const auto row_id = [&](uint64_t i) { return Reader{r.bytes, first_row + i * stride, r.end}.get(8); };
  uint64_t below = 0;  // rows with IDs below the sighting's
  uint64_t last = 0;
  if (keep) out->sightings.reserve(h.sightings);
  for (uint64_t i = 0; i < h.sightings; ++i) {
    SavedSighting s;
    s.id = r.get(8);
    s.count = static_cast<uint32_t>(r.get(4));
    s.last_seen = r.get(8);
    if (i > 0 && s.id <= last) return *error = "IDs not sorted or repeated", false;
    last = s.id;
    while (below < h.rows && row_id(below) < s.id) ++below;
    if (s.count == 0 || (below < h.rows && row_id(below) == s.id)) {
      return *error = "a sighting of a held ID, or of count 0", false;
    }
    if (keep) out->sightings.push_back(s);
  }
  return true;
}

}  // namespace

bool read_saved_table(const std::string& bytes, SavedTable* out, std::string* error, SavedTableParts parts) {
  out->rows.clear();
  out->values.clear();
  out->sightings.clear();
  if (bytes.size() < sizeof kTableMagic + 4) return *error = "truncated (" + std::to_string(bytes.size()) + " bytes)", false;
  const size_t body = bytes.size() - 4;
  Reader tail{bytes, body, bytes.size()};
  if (tail.get(4) != crc32c::value(bytes.data(), body)) return *error = "checksum mismatch (corrupted)", false;
  Reader r{bytes, 0, body};
  const SavedTableHeader& h = out->header;
  if (!read_header(r, &out->header, error)) return false;
  const size_t keep = parts == SavedTableParts::kAll       ? static_cast<size_t>((1 + h.slots) * h.dim)
                      : parts == SavedTableParts::kWeights ? static_cast<size_t>(h.dim)
                                                           : 0;
  if (read_rows(r, h, keep, out, error) && read_sightings(r, h, parts == SavedTableParts::kAll, out, error)) {
    return true;
  }
  out->rows.clear();
  out->values.clear();
  out->sightings.clear();
  return false;
}

uint64_t saved_table_size(const SavedTableHeader& h) {
  return sizeof kTableMagic + 4 + 4 + 8 + 4 + 4 + h.name.size() + 4 + h.optimizer.size() + 8 + 8 +
         h.rows * row_bytes(h) + h.sightings * kSighting + 4;
}

namespace {

constexpr size_t kTableBuffer = size_t{64} << 10;

}  // namespace

SavedTableWriter::SavedTableWriter(const SavedTableHeader& h, ByteSink* out)
    : out_(out), row_floats_(static_cast<size_t>((1 + h.slots) * h.dim)), rows_left_(h.rows),
      sightings_left_(h.sightings) {
  buffer_.reserve(kTableBuffer);
  buffer_.append(kTableMagic, sizeof kTableMagic);
  put(kFormat, 4);
  put(h.table, 4);
  put(h.dim, 8);
  put(h.slots, 4);
  put(h.name.size(), 4);
  buffer_.append(h.name);
  put(h.optimizer.size(), 4);
  buffer_.append(h.optimizer);
  put(h.rows, 8);
  put(h.sightings, 8);
}

void SavedTableWriter::put(uint64_t v, size_t bytes) { pstrain::put(&buffer_, v, bytes); }

void SavedTableWriter::flush() {
  crc_ = crc32c::extend(crc_, buffer_.data(), buffer_.size());
  out_->append(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void SavedTableWriter::row(const SavedRow& row, const float* values) {
  PSTRAIN_CHECK(rows_left_ > 0);
  --rows_left_;
  if (buffer_.size() + kRowHead + row_floats_ * sizeof(float) > kTableBuffer) flush();
  put(row.id, 8);
  put(row.last_touched, 8);
  put(row.updates, 8);
  for (size_t j = 0; j < row_floats_; ++j) put_float(&buffer_, values[j]);
}

void SavedTableWriter::sighting(const SavedSighting& s) {
  PSTRAIN_CHECK(rows_left_ == 0 && sightings_left_ > 0);
  --sightings_left_;
  if (buffer_.size() + kSighting > kTableBuffer) flush();
  put(s.id, 8);
  put(s.count, 4);
  put(s.last_seen, 8);
}

void SavedTableWriter::finish() {
  PSTRAIN_CHECK(rows_left_ == 0 && sightings_left_ == 0);
  flush();
  std::string tail;
  pstrain::put(&tail, crc_, 4);
  out_->append(tail.data(), tail.size());
}

std::string encode_saved_table(const SavedTable& t) {
  SavedTableHeader h = t.header;
  h.rows = t.rows.size();
  h.sightings = t.sightings.size();
  const size_t row_floats = static_cast<size_t>((1 + h.slots) * h.dim);
  PSTRAIN_CHECK_EQ(t.values.size(), t.rows.size() * row_floats);
  std::string out;
  StringSink sink(&out);
  SavedTableWriter w(h, &sink);
  for (size_t i = 0; i < t.rows.size(); ++i) w.row(t.rows[i], &t.values[i * row_floats]);
  for (const SavedSighting& s : t.sightings) w.sighting(s);
  w.finish();
  return out;
}

}  // namespace pstrain
