#include "shared/checkpoint/table_file.h"

#include <cmath>
#include <cstring>

#include "shared/util/crc32c.h"

namespace pstrain {
namespace {

constexpr char kMagic[8] = {'P', 'S', 'E', 'M', 'B', 'T', 'B', 'L'};
constexpr uint32_t kFormat = 1;
constexpr uint64_t kRowHead = 3 * sizeof(uint64_t);                      // id, last touched, updates
constexpr uint64_t kSighting = 2 * sizeof(uint64_t) + sizeof(uint32_t);  // id, count, last seen
constexpr uint64_t kMaxDim = 4096;                                       // kMaxSparseDim
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

bool read_header(Reader& r, SavedTableHeader* h, std::string* error) {
  if (r.bytes.compare(0, sizeof kMagic, kMagic, sizeof kMagic) != 0) {
    return *error = "not a saved embedding table (bad magic)", false;
  }
  r.at = sizeof kMagic;
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
  if (h->dim == 0 || h->dim > kMaxDim || h->slots > kMaxSlots) {
    return *error = "dim " + std::to_string(h->dim) + " with " + std::to_string(h->slots) + " slots", false;
  }
  const uint64_t row_bytes = kRowHead + (1 + h->slots) * h->dim * sizeof(float);
  if (h->rows > r.left() / row_bytes || h->sightings > r.left() / kSighting ||
      h->rows * row_bytes + h->sightings * kSighting != r.left()) {
    return *error = "its sizes do not add up", false;
  }
  return true;
}

}  // namespace

bool read_saved_table(const std::string& bytes, SavedTableRows* out, std::string* error, bool header_only) {
  if (bytes.size() < sizeof kMagic + 4) return *error = "truncated (" + std::to_string(bytes.size()) + " bytes)", false;
  const size_t body = bytes.size() - 4;
  Reader tail{bytes, body, bytes.size()};
  if (tail.get(4) != crc32c::value(bytes.data(), body)) return *error = "checksum mismatch (corrupted)", false;
  Reader r{bytes, 0, body};
  SavedTableHeader& h = out->header;
  if (!read_header(r, &h, error)) return false;
  out->ids.clear();
  out->weights.clear();
  const size_t dim = static_cast<size_t>(h.dim), slot_floats = h.slots * dim;
  if (!header_only) {
    out->ids.reserve(h.rows);
    out->weights.resize(h.rows * dim);
  }
  float* w = out->weights.data();
  uint64_t last = 0;
  for (uint64_t i = 0; i < h.rows; ++i) {
    const uint64_t id = r.get(8);
    if (i > 0 && id <= last) return *error = "IDs not sorted or repeated", false;
    last = id;
    r.at += 2 * sizeof(uint64_t);  // last touched, updates: the sizes were checked
    for (size_t j = 0; j < dim; ++j) {
      const uint32_t bits = static_cast<uint32_t>(r.get(4));
      float f;
      std::memcpy(&f, &bits, sizeof f);
      if (!std::isfinite(f)) return *error = "a value is not finite", false;
      if (!header_only) *w++ = f;
    }
    r.at += slot_floats * sizeof(float);
    if (!header_only) out->ids.push_back(id);
  }
  return true;
}

}  // namespace pstrain
