#include "worker/data/npy_format.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>

#include "shared/util/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the .npy reader assumes a little-endian host");
static_assert(sizeof(size_t) == sizeof(uint64_t), "a .npy dimension is 64-bit");

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
    {NpyType::kFloat32, 'f', 4, "float32"}, {NpyType::kFloat64, 'f', 8, "float64"},
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
  std::optional<std::vector<size_t>> shape;
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
  std::vector<size_t> tuple() {
    expect('(');
    std::vector<size_t> dims;
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

// Sets h->record_items from the shape; the records it describes must fill the file after the
// header exactly.
void check_records(NpyHeader* header, const char* type_name, uint64_t file_size, const std::string& name) {
  NpyHeader& h = *header;
  const uint64_t items = h.shape.empty() ? 1 : h.shape[0];
  for (size_t d = 1; d < h.shape.size(); ++d) {
    if (h.shape[d] != 0 && h.record_items > UINT64_MAX / h.shape[d])
      throw Error(name + ": shape " + shape_text(h.shape) + " is too large");
    h.record_items *= h.shape[d];
  }
  const uint64_t body = file_size - h.data_offset;
  const uint64_t record = h.record_items * h.item_bytes;
  const bool overflow =
      h.record_items > UINT64_MAX / h.item_bytes || (record != 0 && items > UINT64_MAX / record);
  if (overflow || items * record != body) {
    throw Error(name + ": file is " + std::to_string(file_size) + " bytes, but its header describes " +
                std::to_string(items) + " records of " + std::to_string(record) + " bytes (shape " +
                shape_text(h.shape) + ", " + type_name + ") after a " + std::to_string(h.data_offset) +
                "-byte header" +
                (overflow || items * record > body ? " (truncated?)" : " (extra bytes after the data)"));
  }
}

}  // namespace

NpyHeader read_npy_header(const NpyReadAt& read_at, uint64_t file_size, const std::string& name,
                          const NpyTypes& accepted) {
  uint8_t head[12] = {};
  const size_t got = static_cast<size_t>(std::min<uint64_t>(file_size, sizeof head));
  read_at(0, got, head);
  if (got < 6 || std::memcmp(head, kMagic, 6) != 0) {
    throw Error(name + ": not a .npy file (it does not start with \\x93NUMPY)");
  }
  const auto too_short = [&] {
    return Error(name + ": file is " + std::to_string(file_size) + " bytes, too short for a .npy header");
  };
  if (got < 10) throw too_short();
  const int major = head[6], minor = head[7];
  if ((major < 1 || major > 3) || minor != 0) {
    throw Error(name + ": .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                " is not supported (1.0, 2.0 and 3.0 are)");
  }
  const int len_bytes = major == 1 ? 2 : 4;
  if (got < static_cast<size_t>(8 + len_bytes)) throw too_short();
  const uint64_t dict_bytes = load_le(head + 8, len_bytes);
  NpyHeader h;
  h.data_offset = 8 + static_cast<uint64_t>(len_bytes) + dict_bytes;
  if (dict_bytes > kMaxHeaderBytes) {
    throw Error(name + ": .npy header of " + std::to_string(dict_bytes) + " bytes is too long");
  }
  if (h.data_offset > file_size) {
    throw Error(name + ": file is " + std::to_string(file_size) + " bytes, shorter than its " +
                std::to_string(h.data_offset) + "-byte .npy header (truncated?)");
  }
  std::string dict(dict_bytes, '\0');
  read_at(8 + static_cast<uint64_t>(len_bytes), dict.size(), dict.data());
  if (dict.empty() || dict.back() != '\n')
    throw Error(name + ": malformed .npy header (it does not end in a newline)");
  const Header dict_values = HeaderParser(dict, name).parse();
  if (*dict_values.fortran_order) {
    throw Error(name +
                ": fortran_order True (column-major) arrays are not supported; save a C-order array "
                "(numpy.ascontiguousarray)");
  }
  const TypeInfo& type = check_dtype(*dict_values.descr, accepted, name);
  h.type = type.type;
  h.item_bytes = type.bytes;
  h.shape = *dict_values.shape;
  check_records(&h, type.name, file_size, name);
  return h;
}

std::string shape_text(const std::vector<size_t>& shape) {
  std::string text = "(";
  for (size_t d = 0; d < shape.size(); ++d) text += (d > 0 ? ", " : "") + std::to_string(shape[d]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

std::string npy_bytes(const std::vector<size_t>& shape, const float* data) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  const size_t unpadded = 10 + dict.size() + 1;  // magic(6) ver(2) len(2) dict '\n'
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  size_t count = 1;
  for (size_t d : shape) count *= d;
  std::string bytes(kMagic, 6);
  bytes += '\x01';
  bytes += '\x00';
  bytes += static_cast<char>(dict.size() & 0xff);
  bytes += static_cast<char>(dict.size() >> 8);
  bytes += dict;
  bytes.append(reinterpret_cast<const char*>(data), count * sizeof(float));
  return bytes;
}

void write_npy(const std::string& path, const std::vector<size_t>& shape, const float* data) {
  const std::string bytes = npy_bytes(shape, data);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write '" + tmp + "'");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) throw Error("cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw Error("cannot rename '" + tmp + "' to '" + path + "'");
  }
}

std::vector<float> read_npy(const std::string& path, std::vector<size_t>* shape) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error("cannot open '" + path + "': " + std::error_code(errno, std::generic_category()).message());
  }
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) throw Error(path + ": not a regular file");
  const uint64_t size = std::filesystem::file_size(path, error);
  if (error) throw Error(path + ": " + error.message());
  const NpyReadAt read_at = [&](uint64_t offset, size_t len, void* out) {
    in.seekg(static_cast<std::streamoff>(offset));
    if (!in.read(static_cast<char*>(out), static_cast<std::streamsize>(len))) {
      throw Error(path + ": short read of " + std::to_string(len) + " bytes at offset " +
                  std::to_string(offset) + " (file truncated after it was opened?)");
    }
  };
  static const NpyTypes float32{{NpyType::kFloat32},
                                "parameters must be float32 ('<f4'), as --save-params writes them"};
  const NpyHeader h = read_npy_header(read_at, size, path, float32);
  std::vector<float> data(static_cast<size_t>((size - h.data_offset) / sizeof(float)));
  read_at(h.data_offset, data.size() * sizeof(float), data.data());
  *shape = h.shape;
  return data;
}

}  // namespace pstrain
