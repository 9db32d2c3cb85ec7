#include "shared/wire/sparse_wire.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "shared/util/error.h"

namespace pstrain {

bool is_sparse_op(Op op) { return op == Op::kSparsePull || op == Op::kSparseRows || op == Op::kSparsePush; }

namespace {

// Every field is written and read with memcpy in host order: the wire is little-endian, and so
// are the hosts pstrain runs on (the float payloads and checkpoints assume it too).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the sparse wire format is little-endian");

constexpr size_t kBodyHeadBytes = 8;      // u32 sections, u32 reserved
constexpr size_t kSectionHeadBytes = 16;  // u32 table, u32 dim, u64 count

template <typename T>
void store(std::string* out, size_t* at, T v) {
  std::memcpy(&(*out)[*at], &v, sizeof v);
  *at += sizeof v;
}

void store_bytes(std::string* out, size_t* at, const void* data, size_t bytes) {
  if (bytes > 0) std::memcpy(&(*out)[*at], data, bytes);
  *at += bytes;
}

// What the payload of a section needs, per entry: `ids` u64 and `dim` f32 after them.
bool has_ids(Op op) { return op != Op::kSparseRows; }
bool has_values(Op op) { return op != Op::kSparsePull; }

// "SPARSE_PUSH section 2 (table 7)": how errors name a section (numbered from 0).
std::string section_name(Op op, size_t index, uint32_t table) {
  return std::string(op_name(op)) + " section " + std::to_string(index) + " (table " + std::to_string(table) +
         ")";
}

// "N <what> need B bytes, L left", with B written out only where it fits 64 bits.
std::string too_short(uint64_t count, const std::string& what, uint64_t each, size_t left) {
  const std::string need = count <= UINT64_MAX / each ? std::to_string(count * each) : "more than 2^64";
  return std::to_string(count) + " " + what + " need " + need + " bytes, " + std::to_string(left) + " left";
}

bool dim_ok(Op op, uint32_t dim) {
  return op == Op::kSparsePull ? dim == 0 : dim >= 1 && dim <= kMaxSparseDim;
}

std::string dim_problem(Op op, uint32_t dim) {
  return "dim is " + std::to_string(dim) + ", not " +
         (op == Op::kSparsePull ? "0" : "1.." + std::to_string(kMaxSparseDim));
}

// Why `s` cannot be a section of an `op` body, or "" (encode_sparse_body's checks; the table's
// uniqueness is the caller's).
std::string section_problem(Op op, const SparseSection& s) {
  if (!dim_ok(op, s.dim)) return dim_problem(op, s.dim);
  if (op == Op::kSparsePull) return s.values.empty() ? "" : "a pull carries no values";
  if (op == Op::kSparseRows && !s.ids.empty()) return "rows carry no ids";
  if (s.values.size() % s.dim != 0) {
    return std::to_string(s.values.size()) + " values are not whole rows of " + std::to_string(s.dim) +
           " floats";
  }
  if (op == Op::kSparsePush && s.values.size() / s.dim != s.ids.size()) {
    return std::to_string(s.values.size() / s.dim) + " gradient rows for " + std::to_string(s.ids.size()) +
           " ids";
  }
  return "";
}

// The size of the body of `op` for these sections; throws pstrain::Error where decode_sparse_body
// would refuse that body.
size_t checked_body_bytes(Op op, const std::vector<SparseSection>& sections) {
  const std::string where = std::string("encode_sparse_body: ") + op_name(op);
  if (!is_sparse_op(op)) throw Error(where + " is not a sparse op");
  if (sections.size() > kMaxSparseSections) {
    throw Error(where + " of " + std::to_string(sections.size()) + " sections, at most " +
                std::to_string(kMaxSparseSections));
  }
  std::unordered_map<uint32_t, size_t> seen;
  uint64_t size = kBodyHeadBytes;
  for (size_t i = 0; i < sections.size(); ++i) {
    const SparseSection& s = sections[i];
    std::string problem = section_problem(op, s);
    const auto [first, fresh] = seen.emplace(s.table, i);
    if (problem.empty() && !fresh) {
      problem = "table " + std::to_string(s.table) + " is also section " + std::to_string(first->second);
    }
    if (!problem.empty()) throw Error("encode_sparse_body: " + section_name(op, i, s.table) + ": " + problem);
    size += kSectionHeadBytes + s.ids.size() * sizeof(uint64_t) + s.values.size() * sizeof(float);
  }
  if (size > kMaxSparseBodyBytes) {
    throw Error(where + " body of " + std::to_string(size) + " bytes exceeds " +
                std::to_string(kMaxSparseBodyBytes));
  }
  return size;
}

// Reads one body front to back. Every size is checked (by division: nothing is multiplied before
// it is known to fit) before anything is read or allocated; `error` gets the first failure.
class BodyDecoder {
 public:
  BodyDecoder(Op op, const unsigned char* p, size_t size, std::string* error)
      : op_(op), name_(op_name(op)), p_(p), size_(size), error_(error) {}

  bool head(uint32_t* sections) {
    const auto body = [this] { return std::string(name_) + " body of " + std::to_string(size_) + " bytes"; };
    if (size_ > kMaxSparseBodyBytes) return fail(body() + " exceeds " + std::to_string(kMaxSparseBodyBytes));
    if (size_ < kBodyHeadBytes) return fail(body() + " is shorter than its 8-byte head");
    if (size_ % 4 != 0) return fail(body() + " is not a whole number of 4-byte words");
    *sections = take<uint32_t>();
    const uint32_t reserved = take<uint32_t>();
    if (reserved != 0) {
      return fail(std::string(name_) + " reserved word is " + std::to_string(reserved) + ", not 0");
    }
    if (*sections > kMaxSparseSections) {
      return fail(std::string(name_) + " has " + std::to_string(*sections) + " sections, at most " +
                  std::to_string(kMaxSparseSections));
    }
    return true;
  }

  bool section(size_t index, SparseSection* s) {
    if (left() < kSectionHeadBytes) {
      return fail(std::string(name_) + " section " + std::to_string(index) + ": its head needs 16 bytes, " +
                  std::to_string(left()) + " left");
    }
    s->table = take<uint32_t>();
    s->dim = take<uint32_t>();
    const uint64_t count = take<uint64_t>();
    const auto [first, fresh] = seen_.emplace(s->table, index);
    if (!fresh) {
      return fail(index, *s,
                  "table " + std::to_string(s->table) + " is also section " + std::to_string(first->second));
    }
    if (!dim_ok(op_, s->dim)) return fail(index, *s, dim_problem(op_, s->dim));
    if (has_ids(op_)) {
      if (count > left() / sizeof(uint64_t)) {
        return fail(index, *s, too_short(count, "ids", sizeof(uint64_t), left()));
      }
      take_array(count, &s->ids);
    }
    if (has_values(op_)) {
      const size_t row_bytes = size_t{s->dim} * sizeof(float);
      if (count > left() / row_bytes) {
        const char* what = op_ == Op::kSparseRows ? "rows of " : "gradients of ";
        return fail(index, *s,
                    too_short(count, what + std::to_string(s->dim) + " floats", row_bytes, left()));
      }
      take_array(count * s->dim, &s->values);
    }
    return true;
  }

  bool finish(uint32_t sections) {
    if (left() == 0) return true;
    return fail(std::string(name_) + " body has " + std::to_string(left()) + " bytes after its " +
                std::to_string(sections) + " sections");
  }

 private:
  size_t left() const { return size_ - at_; }

  bool fail(const std::string& what) {
    *error_ = what;
    return false;
  }
  bool fail(size_t index, const SparseSection& s, const std::string& what) {
    return fail(section_name(op_, index, s.table) + ": " + what);
  }

  template <typename T>
  T take() {
    T v;
    std::memcpy(&v, p_ + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }

  // The next n values; the caller checked that they are there.
  template <typename T>
  void take_array(size_t n, std::vector<T>* out) {
    out->resize(n);
    if (n > 0) std::memcpy(out->data(), p_ + at_, n * sizeof(T));  // an empty vector's data() may be null
    at_ += n * sizeof(T);
  }

  const Op op_;
  const char* const name_;
  const unsigned char* const p_;
  const size_t size_;
  std::string* const error_;
  size_t at_ = 0;
  std::unordered_map<uint32_t, size_t> seen_;  // table -> its section
};

// A run of one section's entries in a part: entries [first, first + count) of sections[index].
struct Piece {
  size_t index, first, count;
};

// The bytes an entry (an ID, a row or both) takes in a body of `op`.
size_t wire_entry_bytes(Op op, uint32_t dim) {
  return (has_ids(op) ? sizeof(uint64_t) : 0) + (has_values(op) ? size_t{dim} * sizeof(float) : 0);
}

// What an entry counts for when a body of `op` is cut into parts: its bytes; for a pull sized by
// its answer, the larger of its ID and its row in the SPARSE_ROWS.
size_t entry_bytes(Op op, uint32_t dim, uint32_t answer_dim) {
  if (op != Op::kSparsePull) return wire_entry_bytes(op, dim);
  return std::max<size_t>(sizeof(uint64_t), size_t{answer_dim} * sizeof(float));
}

// Where the parts are cut: whole sections while they fit, then as many of a section's entries as
// fit (at least one); a part that cannot take even a section's head and an entry is closed.
std::vector<std::vector<Piece>> plan_parts(Op op, const std::vector<SparseSection>& sections, size_t max_bytes,
                                           const std::vector<uint32_t>& answer_dims) {
  std::vector<std::vector<Piece>> parts(1);
  size_t used = kBodyHeadBytes;
  for (size_t i = 0; i < sections.size(); ++i) {
    const size_t n = sections[i].count();
    const size_t each = entry_bytes(op, sections[i].dim, i < answer_dims.size() ? answer_dims[i] : 0);
    size_t first = 0;
    do {
      const size_t least = kSectionHeadBytes + (n > first ? each : 0);
      if (!parts.back().empty() && used + least > max_bytes) {
        parts.emplace_back();
        used = kBodyHeadBytes;
      }
      const size_t room = max_bytes > used + kSectionHeadBytes ? (max_bytes - used - kSectionHeadBytes) / each : 0;
      const size_t take = std::min(n - first, std::max<size_t>(room, 1));
      parts.back().push_back(Piece{i, first, take});
      used += kSectionHeadBytes + take * each;
      first += take;
    } while (first < n);
  }
  return parts;
}

std::string encode_part(Op op, const std::vector<SparseSection>& sections, const std::vector<Piece>& pieces) {
  size_t size = kBodyHeadBytes;
  for (const Piece& p : pieces) size += kSectionHeadBytes + p.count * wire_entry_bytes(op, sections[p.index].dim);
  std::string out(size, '\0');
  size_t at = 0;
  store(&out, &at, static_cast<uint32_t>(pieces.size()));
  store(&out, &at, uint32_t{0});
  for (const Piece& p : pieces) {
    const SparseSection& s = sections[p.index];
    store(&out, &at, s.table);
    store(&out, &at, s.dim);
    store(&out, &at, static_cast<uint64_t>(p.count));
    if (has_ids(op) && p.count > 0) store_bytes(&out, &at, s.ids.data() + p.first, p.count * sizeof(uint64_t));
    if (has_values(op) && p.count > 0) {
      store_bytes(&out, &at, s.values.data() + p.first * s.dim, p.count * s.dim * sizeof(float));
    }
  }
  PSTRAIN_CHECK_EQ(at, out.size());
  return out;
}

}  // namespace

std::vector<std::string> encode_sparse_parts(Op op, const std::vector<SparseSection>& sections, size_t max_bytes,
                                             const std::vector<uint32_t>& answer_dims) {
  checked_body_bytes(op, sections);
  std::vector<std::string> out;
  for (const std::vector<Piece>& pieces : plan_parts(op, sections, max_bytes, answer_dims)) {
    out.push_back(encode_part(op, sections, pieces));
  }
  return out;
}

bool append_sparse_part(std::vector<SparseSection>* whole, std::vector<SparseSection>&& part, std::string* error) {
  // The part usually goes on with whole's last section.
  const auto section_of = [whole](uint32_t table) {
    if (!whole->empty() && whole->back().table == table) return whole->end() - 1;
    return std::find_if(whole->begin(), whole->end(), [table](const SparseSection& w) { return w.table == table; });
  };
  for (const SparseSection& s : part) {
    const auto to = section_of(s.table);
    if (to == whole->end() || to->dim == s.dim) continue;
    *error = "table " + std::to_string(s.table) + " has rows of " + std::to_string(to->dim) + " floats in one part and " +
             std::to_string(s.dim) + " in another";
    return false;
  }
  for (SparseSection& s : part) {
    const auto to = section_of(s.table);
    if (to == whole->end()) {
      whole->push_back(std::move(s));
      continue;
    }
    to->ids.insert(to->ids.end(), s.ids.begin(), s.ids.end());
    to->values.insert(to->values.end(), s.values.begin(), s.values.end());
  }
  return true;
}

std::string encode_sparse_body(Op op, const std::vector<SparseSection>& sections) {
  std::string out(checked_body_bytes(op, sections), '\0');
  size_t at = 0;
  store(&out, &at, static_cast<uint32_t>(sections.size()));
  store(&out, &at, uint32_t{0});
  for (const SparseSection& s : sections) {
    store(&out, &at, s.table);
    store(&out, &at, s.dim);
    store(&out, &at, static_cast<uint64_t>(s.count()));
    store_bytes(&out, &at, s.ids.data(), s.ids.size() * sizeof(uint64_t));
    store_bytes(&out, &at, s.values.data(), s.values.size() * sizeof(float));
  }
  PSTRAIN_CHECK_EQ(at, out.size());
  return out;
}

bool decode_sparse_body(Op op, const void* data, size_t size, std::vector<SparseSection>* out,
                        std::string* error) {
  out->clear();
  if (!is_sparse_op(op)) {
    *error = std::string(op_name(op)) + " (op " + std::to_string(static_cast<uint32_t>(op)) +
             ") is not a sparse op";
    return false;
  }
  BodyDecoder d(op, static_cast<const unsigned char*>(data), size, error);
  uint32_t sections = 0;
  if (!d.head(&sections)) return false;
  for (uint32_t i = 0; i < sections; ++i) {
    if (!d.section(i, &out->emplace_back())) return false;
  }
  return d.finish(sections);
}

}  // namespace pstrain
