#include "worker/data/csv_table.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string_view>

#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/data/file_io.h"
#include "worker/data/line_reader.h"

namespace pstrain {
namespace {

// The cache file: kMagic, then uint64 header_bytes, rows, columns, first data line, names_bytes;
// the header's names, each NUL-terminated, padded to 8 bytes; `columns` uint64 first non-integer
// lines; then rows * columns float32, row by row. Native byte order: the cache is local.
constexpr char kMagic[8] = {'P', 'S', 'C', 'S', 'V', '0', '1', '\n'};
constexpr size_t kFixedBytes = sizeof kMagic + 5 * 8;
constexpr size_t kWriteFloats = 16 << 10;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The fields of a line: padding and enclosing double quotes removed.
void split_fields(std::string_view line, std::vector<std::string_view>& fields) {
  fields.clear();
  for (;;) {
    const size_t comma = line.find(',');
    std::string_view f = trim(line.substr(0, comma));
    if (f.size() >= 2 && f.front() == '"' && f.back() == '"') f = trim(f.substr(1, f.size() - 2));
    fields.push_back(f);
    if (comma == std::string_view::npos) return;
    line.remove_prefix(comma + 1);
  }
}

bool is_blank(std::string_view line) { return trim(line).empty(); }

bool parse_number(std::string_view f, double& value) {
  if (!f.empty() && f.front() == '+') f.remove_prefix(1);
  if (f.empty()) return false;
  const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), value);
  return ec == std::errc() && end == f.data() + f.size();
}

std::string column_name(const std::vector<std::string>& names, size_t c) {
  return "column " + std::to_string(c) + (names.empty() ? "" : " ('" + names[c] + "')");
}

void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }

// Parses the CSV at `path` into the cache format, written to fd.
class Converter {
 public:
  Converter(const std::string& path, int fd, const std::string& tmp)
      : path_(path), fd_(fd), tmp_(tmp), in_(path) {}

  void run() {
    std::string line;
    std::vector<std::string_view> fields;
    uint64_t blank = 0;  // the first empty line after the first row (0: none yet)
    while (in_.next(line)) {
      if (is_blank(line)) {
        if (columns_ > 0 && blank == 0) blank = in_.number();
        continue;
      }
      if (blank != 0) {
        throw Error(path_ + " line " + std::to_string(blank) + ": empty line before line " +
                    std::to_string(in_.number()) + " (only the end of the file may have empty lines)");
      }
      split_fields(line, fields);
      if (columns_ == 0) {
        start(fields);
        if (!names_.empty()) continue;
      }
      add_row(fields);
    }
    if (rows_ == 0) throw Error(path_ + ": no data rows" + (names_.empty() ? "" : " after the header"));
    flush();
    write_header();
  }

 private:
  // The first row: the column count, and a header when any field is not a number.
  void start(const std::vector<std::string_view>& fields) {
    columns_ = fields.size();
    first_row_line_ = in_.number();
    if (columns_ < 2) {
      throw Error(
          path_ + " line " + std::to_string(in_.number()) +
          ": one column; a CSV data set needs feature columns and a label column, separated by commas");
    }
    double v = 0;
    for (const auto& f : fields) {
      if (!parse_number(f, v)) {
        for (const auto& name : fields) names_.emplace_back(name);
        break;
      }
    }
    non_integer_line_.assign(columns_, 0);
    std::string placeholder(header_bytes(), '\0');
    write_all(fd_, placeholder.data(), placeholder.size(), tmp_);
  }

  void add_row(const std::vector<std::string_view>& fields) {
    const uint64_t line = in_.number();
    if (fields.size() != columns_) {
      throw Error(path_ + " line " + std::to_string(line) + ": " + std::to_string(fields.size()) +
                  " fields, but " + (names_.empty() ? "the first row" : "the header") + " (line " +
                  std::to_string(first_row_line_) + ") has " + std::to_string(columns_));
    }
    if (rows_ == 0) first_line_ = line;
    for (size_t c = 0; c < columns_; ++c) {
      double v = 0;
      const auto where = [&] {
        return path_ + " line " + std::to_string(line) + ", " + column_name(names_, c) + ": ";
      };
      if (fields[c].empty()) throw Error(where() + "empty field (missing values are not supported)");
      if (!parse_number(fields[c], v))
        throw Error(where() + "'" + std::string(fields[c]) + "' is not a number");
      if (!std::isfinite(v)) throw Error(where() + "non-finite value '" + std::string(fields[c]) + "'");
      const float f = static_cast<float>(v);
      if (!std::isfinite(f))
        throw Error(where() + "'" + std::string(fields[c]) + "' is outside the float32 range");
      if (non_integer_line_[c] == 0 && v != std::floor(v)) non_integer_line_[c] = line;
      out_.push_back(f);
      if (out_.size() == kWriteFloats) flush();
    }
    ++rows_;
  }

  size_t names_bytes() const {
    size_t n = 0;
    for (const auto& name : names_) n += name.size() + 1;
    return (n + 7) / 8 * 8;
  }
  size_t header_bytes() const { return kFixedBytes + names_bytes() + 8 * columns_; }

  void flush() {
    write_all(fd_, out_.data(), out_.size() * sizeof(float), tmp_);
    out_.clear();
  }

  void write_header() {
    std::string h(kMagic, sizeof kMagic);
    for (uint64_t v :
         {uint64_t{header_bytes()}, rows_, uint64_t{columns_}, first_line_, uint64_t{names_bytes()}})
      put_u64(h, v);
    for (const auto& name : names_) h.append(name).push_back('\0');
    h.resize(kFixedBytes + names_bytes(), '\0');
    for (uint64_t line : non_integer_line_) put_u64(h, line);
    if (::lseek(fd_, 0, SEEK_SET) != 0) throw Error(tmp_ + ": seek failed: " + errno_text(errno));
    write_all(fd_, h.data(), h.size(), tmp_);
  }

  std::string path_;
  int fd_;
  std::string tmp_;
  LineReader in_;
  size_t columns_ = 0;
  uint64_t rows_ = 0, first_line_ = 0, first_row_line_ = 0;
  std::vector<std::string> names_;
  std::vector<uint64_t> non_integer_line_;
  std::vector<float> out_;
};

uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

CsvTable::CsvTable(const std::string& path, const std::string& cache_dir) : path_(path) {
  const std::string cache = parsed_cache_path(path, cache_dir, ".pstrain-csv");
  if (::access(cache.c_str(), R_OK) == 0 && load(cache)) return;
  PSLOG(INFO) << "parsing " << path << " into " << cache;
  create_file_atomically(cache, [&](int fd, const std::string& tmp) { Converter(path, fd, tmp).run(); });
  if (!load(cache)) throw Error(cache + ": the cache file just written is not valid");
}

CsvTable::~CsvTable() = default;

bool CsvTable::load(const std::string& cache_path) {
  auto file = std::make_unique<RandomAccessFile>(cache_path, path_ + " (cache " + cache_path + ")");
  uint8_t fixed[kFixedBytes];
  if (file->read_some(0, sizeof fixed, fixed) < sizeof fixed ||
      std::memcmp(fixed, kMagic, sizeof kMagic) != 0)
    return false;
  const uint64_t header = get_u64(fixed + 8), rows = get_u64(fixed + 16), columns = get_u64(fixed + 24);
  const uint64_t first_line = get_u64(fixed + 32), names_bytes = get_u64(fixed + 40);
  if (columns < 2 || columns > (uint64_t{1} << 30) || names_bytes > header ||
      header != kFixedBytes + names_bytes + 8 * columns || header > file->size() ||
      rows > (file->size() - header) / (4 * columns) || header + rows * columns * 4 != file->size()) {
    return false;
  }
  std::vector<uint8_t> rest(header - kFixedBytes);
  file->read_exact(kFixedBytes, rest.size(), rest.data());
  names_.clear();
  for (size_t at = 0; names_bytes > 0 && names_.size() < columns; at += names_.back().size() + 1) {
    if (at >= names_bytes) return false;
    const auto* start = reinterpret_cast<const char*>(rest.data() + at);
    names_.emplace_back(start, ::strnlen(start, names_bytes - at));
  }
  non_integer_line_.resize(columns);
  for (size_t c = 0; c < columns; ++c) non_integer_line_[c] = get_u64(rest.data() + names_bytes + 8 * c);
  rows_ = rows;
  columns_ = columns;
  first_line_ = first_line;
  data_offset_ = header;
  file_ = std::move(file);
  return true;
}

std::string CsvTable::column_text(size_t column) const { return column_name(names_, column); }

void CsvTable::read_rows(uint64_t first, uint64_t count, float* out) const {
  file_->read_exact(data_offset_ + first * columns_ * sizeof(float), count * columns_ * sizeof(float), out);
}

}  // namespace pstrain
