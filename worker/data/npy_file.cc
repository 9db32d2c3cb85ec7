#include "worker/data/npy_file.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "shared/error.h"
#include "worker/data/file_io.h"
#include "worker/data/idx.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the .npy reader assumes a little-endian host");

namespace pstrain {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr uint64_t kMaxHeaderBytes = 1 << 20;

struct TypeInfo {
  NpyType type;
  char kind;
  size_t bytes;
  const char* name;
};
constexpr TypeInfo kTypes[] = {
    {NpyType::kUint8, 'u', 1, "uint8"},     {NpyType::kInt8, 'i', 1, "int8"},
    {NpyType::kUint16, 'u', 2, "uint16"},   {NpyType::kInt16, 'i', 2, "int16"},
    {NpyType::kUint32, 'u', 4, "uint32"},   {NpyType::kInt32, 'i', 4, "int32"},
    {NpyType::kUint64, 'u', 8, "uint64"},   {NpyType::kInt64, 'i', 8, "int64"},
    {NpyType::kFloat32, 'f', 4, "float32"},
};

// NumPy's name of a simple dtype ("float64" for '<f8'), or "" when it is not one.
std::string numpy_name(char kind, const std::string& digits) {
  const char* base = kind == 'f'   ? "float"
                     : kind == 'i' ? "int"
                     : kind == 'u' ? "uint"
                     : kind == 'c' ? "complex"
                                   : nullptr;
  if (kind == 'b' && digits == "1") return "bool";
  if (base == nullptr || digits.empty()) return "";
  return base + std::to_string(std::stoul(digits) * 8);
}

// The header dictionary: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
struct Header {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<uint64_t>> shape;
};

// A strict reader of the Python literal NumPy writes (its own reader uses ast.literal_eval).
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& name) : s_(text), name_(name) {}

  Header parse() {
    Header h;
    skip_space();
    expect('{');
    for (;;) {
      skip_space();
      if (peek() == '}') break;
      const std::string key = string_literal();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        if (h.descr) fail("the key 'descr' appears twice");
        if (peek() == '[') fail_plain("structured dtypes (a list of fields) are not supported");
        h.descr = string_literal();
      } else if (key == "fortran_order") {
        if (h.fortran_order) fail("the key 'fortran_order' appears twice");
        h.fortran_order = boolean();
      } else if (key == "shape") {
        if (h.shape) fail("the key 'shape' appears twice");
        h.shape = tuple();
      } else {
        fail("unexpected key '" + key + "'");
      }
      skip_space();
      if (peek() == ',') {
        ++at_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}'");
    }
    ++at_;
    skip_space();
    if (at_ != s_.size()) fail("unexpected text after the dictionary");
    for (const auto& [present, key] :
         {std::pair{h.descr.has_value(), "descr"}, std::pair{h.fortran_order.has_value(), "fortran_order"},
          std::pair{h.shape.has_value(), "shape"}}) {
      if (!present) fail_plain(std::string("malformed .npy header (no '") + key + "' key)");
    }
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(name_ + ": malformed .npy header (" + what + " at character " + std::to_string(at_) + ")");
  }
  [[noreturn]] void fail_plain(const std::string& what) const { throw Error(name_ + ": " + what); }
  char peek() const { return at_ < s_.size() ? s_[at_] : '\0'; }
  void skip_space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\n')) ++at_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }
  std::string string_literal() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a quoted string");
    const size_t end = s_.find(quote, at_ + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string text = s_.substr(at_ + 1, end - at_ - 1);
    if (text.find('\\') != std::string::npos) fail("escapes in strings are not supported");
    at_ = end + 1;
    return text;
  }
  bool boolean() {
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      const size_t len = std::strlen(word);
      if (s_.compare(at_, len, word) == 0) {
        at_ += len;
        return value;
      }
    }
    fail("expected True or False");
  }
  uint64_t integer() {
    const size_t start = at_;
    uint64_t v = 0;
    while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') {
      const uint64_t digit = static_cast<uint64_t>(s_[at_] - '0');
      if (v > (UINT64_MAX - digit) / 10) fail("dimension too large");
      v = v * 10 + digit;
      ++at_;
    }
    if (at_ == start) fail("expected a non-negative integer");
    if (peek() == 'L') ++at_;  // Python 2's long literals, in files NumPy wrote under Python 2
    return v;
  }
  std::vector<uint64_t> tuple() {
    expect('(');
    std::vector<uint64_t> dims;
    bool comma = false;
    for (;;) {
      skip_space();
      if (peek() == ')') break;
      dims.push_back(integer());
      skip_space();
      comma = peek() == ',';
      if (comma) {
        ++at_;
      } else if (peek() != ')') {
        fail("expected ',' or ')' in the shape");
      }
    }
    if (dims.size() == 1 && !comma) fail("a one-dimensional shape is written (n,)");
    ++at_;
    return dims;
  }

  const std::string& s_;
  const std::string& name_;
  size_t at_ = 0;
};

uint32_t load_le(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string quoted(const std::string& descr) { return "'" + descr + "'"; }

// The element type of `descr`, or an Error that says why it is not accepted.
const TypeInfo& check_dtype(const std::string& descr, const NpyTypes& accepted, const std::string& name) {
  const auto refuse = [&](const std::string& why) { return Error(name + ": " + why + "; " + accepted.rule); };
  if (descr.size() < 2) throw refuse("unsupported dtype " + quoted(descr));
  const char order = descr[0];
  const char kind = descr[1];
  const std::string digits = descr.substr(2);
  const bool numeric_size =
      !digits.empty() && digits.size() <= 2 &&
      std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (kind == 'O') throw refuse("object arrays (dtype " + quoted(descr) + ") are not supported");
  const std::string known = numeric_size ? numpy_name(kind, digits) : "";
  const std::string what = "dtype " + quoted(descr) + (known.empty() ? "" : " (" + known + ")");
  if (order == '>' && numeric_size && digits != "1") throw refuse("big-endian " + what + " is not supported");
  if (order != '<' && order != '|' && order != '=' && order != '>')
    throw refuse("unsupported dtype " + quoted(descr));
  for (const TypeInfo& t : kTypes) {
    if (t.kind != kind || !numeric_size || std::stoul(digits) != t.bytes) continue;
    if (order == '|' && t.bytes > 1) break;  // NumPy writes '<' or '>' for these
    if (std::find(accepted.types.begin(), accepted.types.end(), t.type) == accepted.types.end()) break;
    return t;
  }
  throw refuse("unsupported " + what);
}

}  // namespace

NpyFile::NpyFile(const std::string& path, const std::string& cache_dir, const NpyTypes& accepted) {
  const std::string data_path = uncompressed_path(path, cache_dir);
  name_ = data_path == path ? path : path + " (decompressed " + data_path + ")";
  file_ = std::make_unique<RandomAccessFile>(data_path, name_);
  parse(accepted);
}

NpyFile::~NpyFile() = default;

void NpyFile::parse(const NpyTypes& accepted) {
  const uint64_t size = file_->size();
  uint8_t head[12] = {};
  const size_t got = file_->read_some(0, sizeof head, head);
  if (got < 6 || std::memcmp(head, kMagic, 6) != 0) {
    throw Error(name_ + ": not a .npy file (it does not start with \\x93NUMPY)");
  }
  if (got < 10)
    throw Error(name_ + ": file is " + std::to_string(size) + " bytes, too short for a .npy header");
  const int major = head[6], minor = head[7];
  if ((major < 1 || major > 3) || minor != 0) {
    throw Error(name_ + ": .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                " is not supported (1.0, 2.0 and 3.0 are)");
  }
  const int len_bytes = major == 1 ? 2 : 4;
  if (got < static_cast<size_t>(8 + len_bytes)) {
    throw Error(name_ + ": file is " + std::to_string(size) + " bytes, too short for a .npy header");
  }
  const uint64_t dict_bytes = load_le(head + 8, len_bytes);
  header_bytes_ = 8 + static_cast<uint64_t>(len_bytes) + dict_bytes;
  if (dict_bytes > kMaxHeaderBytes) {
    throw Error(name_ + ": .npy header of " + std::to_string(dict_bytes) + " bytes is too long");
  }
  if (header_bytes_ > size) {
    throw Error(name_ + ": file is " + std::to_string(size) + " bytes, shorter than its " +
                std::to_string(header_bytes_) + "-byte .npy header (truncated?)");
  }
  std::string dict(dict_bytes, '\0');
  file_->read_exact(8 + static_cast<uint64_t>(len_bytes), dict.size(), dict.data());
  if (dict.empty() || dict.back() != '\n')
    throw Error(name_ + ": malformed .npy header (it does not end in a newline)");
  const Header h = HeaderParser(dict, name_).parse();
  if (*h.fortran_order) {
    throw Error(name_ +
                ": fortran_order True (column-major) arrays are not supported; save a C-order array "
                "(numpy.ascontiguousarray)");
  }
  const TypeInfo& type = check_dtype(*h.descr, accepted, name_);
  type_ = type.type;
  item_bytes_ = type.bytes;
  shape_ = *h.shape;
  record_items_ = 1;
  uint64_t items = shape_.empty() ? 1 : shape_[0];
  for (size_t d = 1; d < shape_.size(); ++d) {
    if (shape_[d] != 0 && record_items_ > UINT64_MAX / shape_[d])
      throw Error(name_ + ": shape " + npy_shape_text(shape_) + " is too large");
    record_items_ *= shape_[d];
  }
  const uint64_t body = size - header_bytes_;
  const uint64_t record = record_items_ * item_bytes_;
  const bool overflow =
      record_items_ > UINT64_MAX / item_bytes_ || (record != 0 && items > UINT64_MAX / record);
  if (overflow || items * record != body) {
    throw Error(name_ + ": file is " + std::to_string(size) + " bytes, but its header describes " +
                std::to_string(count()) + " records of " + std::to_string(record) + " bytes (shape " +
                npy_shape_text(shape_) + ", " + type.name + ") after a " + std::to_string(header_bytes_) +
                "-byte header" +
                (overflow || items * record > body ? " (truncated?)" : " (extra bytes after the data)"));
  }
}

void NpyFile::read_data(uint64_t offset, size_t len, void* out) const {
  file_->read_exact(header_bytes_ + offset, len, out);
}

std::string npy_shape_text(const std::vector<uint64_t>& shape) {
  std::string text = "(";
  for (size_t d = 0; d < shape.size(); ++d) text += (d > 0 ? ", " : "") + std::to_string(shape[d]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

const char* npy_type_name(NpyType type) {
  for (const TypeInfo& t : kTypes) {
    if (t.type == type) return t.name;
  }
  return "?";
}

}  // namespace pstrain
