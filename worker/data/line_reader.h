// Lines of a plain or gzip text file, read in fixed-size chunks (the CSV and Criteo readers').
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pstrain {

class LineReader {
 public:
  // Opens `path` (gzip or plain: zlib reads a plain file as it is). A line longer than
  // `max_line` bytes (0: no limit) is cut there and the rest of it skipped, so a file without
  // newlines cannot fill memory; too_long() then says so. `cite_lines`: read errors name the line
  // being read ("f.gz:7: truncated gzip data"), else only the file ("f.gz: truncated gzip data").
  // Throws pstrain::Error "<path>: cannot open: <reason>".
  explicit LineReader(const std::string& path, size_t max_line = 0, bool cite_lines = false);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line without its "\n" or "\r\n"; false at the end of the file. Throws
  // pstrain::Error for truncated or corrupt gzip data and read failures.
  bool next(std::string& line);
  uint64_t number() const { return number_; }  // 1-based number of the line last returned
  bool too_long() const { return too_long_; }  // the line last returned was cut at max_line

 private:
  bool fill();

  std::string path_;
  size_t max_line_;
  bool cite_lines_;
  gzFile file_ = nullptr;
  std::vector<char> buf_;
  size_t at_ = 0, len_ = 0;
  uint64_t number_ = 0;
  bool too_long_ = false;
};

}  // namespace pstrain
