#include "shared/checkpoint/table_file.h"

#include <algorithm>
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

// Little-endian reads from `in` up to `end` (the table's checksum), the CRC-32C of every byte
// read kept; `ok` turns false at the first overrun, and reads nothing after it.
struct Reader {
  ByteReader& in;
  uint64_t end;
  uint32_t crc = 0;
  bool ok = true;
  uint64_t left() const { return end - in.position(); }
  bool get_bytes(void* out, size_t n) {
    if (!ok || left() < n || !in.read(out, n)) return ok = false;
    crc = crc32c::extend(crc, out, n);
    return true;
  }
  uint64_t get(size_t n) {
    unsigned char b[8];
    if (!get_bytes(b, n)) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint64_t{b[i]} << (8 * i);
    return v;
  }
  std::string get_text() {
    const uint64_t n = get(4);
    if (!ok || left() < n) return ok = false, std::string();
    std::string text(n, '\0');
    get_bytes(text.data(), text.size());
    return text;
  }
};

uint64_t little_endian(const unsigned char* b, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{b[i]} << (8 * i);
  return v;
}

void put(std::string* out, uint64_t v, size_t bytes) {
  char b[8];
  for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, bytes);
}

[[maybe_unused]] void put_float(std::string* out, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  put(out, bits, 4);
}

uint64_t row_bytes(const SavedTableHeader& h) { return kRowHead + (1 + h.slots) * h.dim * sizeof(float); }

bool read_header(Reader& r, SavedTableHeader* h, std::string* error) {
  char magic[sizeof kTableMagic];
  if (!r.get_bytes(magic, sizeof magic) || std::memcmp(magic, kTableMagic, sizeof magic) != 0) {
    return *error = "not a saved embedding table (bad magic)", false;
  }
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

// The rows after the header (whose sizes were checked), each read whole into a buffer of one row,
// checked, and handed to `visit`.
bool read_rows(Reader& r, const SavedTableHeader& h, const SavedTableVisitor& visit, std::string* error) {
  const size_t row_floats = static_cast<size_t>((1 + h.slots) * h.dim);
  std::vector<unsigned char> bytes(kRowHead + row_floats * sizeof(float));
  std::vector<float> values(row_floats);
  uint64_t last = 0;
  for (uint64_t i = 0; i < h.rows; ++i) {
    if (!r.get_bytes(bytes.data(), bytes.size())) return *error = "truncated rows", false;
    const SavedRow row{little_endian(&bytes[0], 8), little_endian(&bytes[8], 8), little_endian(&bytes[16], 8)};
    if (i > 0 && row.id <= last) return *error = "IDs not sorted or repeated", false;
    last = row.id;
    std::memcpy(values.data(), &bytes[kRowHead], row_floats * sizeof(float));  // little-endian hosts only
    for (float f : values) {
      if (!std::isfinite(f)) return *error = "a value is not finite", false;
    }
    if (visit.row) visit.row(row, values.data());
  }
  return true;
}

// The sightings after the rows. A merge with the rows' IDs, read again where they lie by a second
// reader of the same bytes, finds a sighting of a held ID.
bool read_sightings(Reader& r, const SavedTableHeader& h, const SavedTableVisitor& visit, std::string* error) {
  const uint64_t stride = row_bytes(h), first_row = r.in.position() - h.rows * stride;
  ByteReader rows(r.in, first_row);
  uint64_t row_at = 0;  // the row `rows` is at
  const auto row_id = [&](uint64_t i) {
    unsigned char b[8] = {};
    rows.skip((i - row_at) * stride);
    row_at = i;
    if (!rows.read(b, 8)) return uint64_t{0};
    rows.skip(stride - 8);
    row_at = i + 1;
    return little_endian(b, 8);
  };
  uint64_t below = 0, below_id = 0;  // rows with IDs below the sighting's; the ID of row `below`
  if (h.rows > 0) below_id = row_id(0);
  uint64_t last = 0;
  for (uint64_t i = 0; i < h.sightings; ++i) {
    SavedSighting s;
    s.id = r.get(8);
    s.count = static_cast<uint32_t>(r.get(4));
    s.last_seen = r.get(8);
    if (!r.ok) return *error = "truncated sightings", false;
    if (i > 0 && s.id <= last) return *error = "IDs not sorted or repeated", false;
    last = s.id;
    while (below < h.rows && below_id < s.id) {
      if (++below < h.rows) below_id = row_id(below);
    }
    if (!rows.error().empty()) return *error = rows.error(), false;
    if (s.count == 0 || (below < h.rows && below_id == s.id)) {
      return *error = "a sighting of a held ID, or of count 0", false;
    }
    if (visit.sighting) visit.sighting(s);
  }
  return true;
}

}  // namespace

bool read_saved_table(ByteReader& in, const SavedTableVisitor& visit, std::string* error) {
  const uint64_t size = in.left();
  if (size < sizeof kTableMagic + 4) return *error = "truncated (" + std::to_string(size) + " bytes)", false;
  Reader r{in, in.position() + size - 4};
  SavedTableHeader h;
  std::string why;
  bool ok = read_header(r, &h, &why);
  if (ok && visit.header) visit.header(h);
  ok = ok && read_rows(r, h, visit, &why) && read_sightings(r, h, visit, &why);
  if (!in.error().empty()) return *error = in.error(), false;
  // A damaged table is a checksum mismatch, whatever its bytes made of it: the checksum of the
  // rest, read on past where the checks stopped.
  std::vector<char> rest(static_cast<size_t>(std::min<uint64_t>(r.left(), uint64_t{1} << 16)));
  while (r.left() > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(r.left(), rest.size()));
    if (!in.read(rest.data(), n)) return *error = in.error().empty() ? "truncated" : in.error(), false;
    r.crc = crc32c::extend(r.crc, rest.data(), n);
  }
  unsigned char tail[4];
  if (!in.read(tail, 4)) return *error = in.error().empty() ? "truncated" : in.error(), false;
  if (little_endian(tail, 4) != r.crc) return *error = "checksum mismatch (corrupted)", false;
  if (!ok) *error = why;
  return ok;
}

bool read_saved_table(const std::string& bytes, SavedTable* out, std::string* error, SavedTableParts parts) {
  out->rows.clear();
  out->values.clear();
  out->sightings.clear();
  ByteReader in(bytes);
  size_t keep = 0;
  SavedTableVisitor visit;
  visit.header = [&](const SavedTableHeader& h) {
    out->header = h;
    keep = parts == SavedTableParts::kAll       ? static_cast<size_t>((1 + h.slots) * h.dim)
           : parts == SavedTableParts::kWeights ? static_cast<size_t>(h.dim)
                                                : 0;
    if (keep > 0) {
      out->rows.reserve(h.rows);
      out->values.reserve(h.rows * keep);
    }
    if (parts == SavedTableParts::kAll) out->sightings.reserve(h.sightings);
  };
  visit.row = [&](const SavedRow& row, const float* values) {
    if (keep == 0) return;
    out->rows.push_back(row);
    out->values.insert(out->values.end(), values, values + keep);
  };
  if (parts == SavedTableParts::kAll) visit.sighting = [&](const SavedSighting& s) { out->sightings.push_back(s); };
  if (read_saved_table(in, visit, error)) return true;
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
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  buffer_.append(reinterpret_cast<const char*>(values), row_floats_ * sizeof(float));  // the file's order already
#else
  for (size_t j = 0; j < row_floats_; ++j) put_float(&buffer_, values[j]);
#endif
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
