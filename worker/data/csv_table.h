// A CSV file of numbers (docs/data.md, "CSV"), parsed once into a binary cache file and then read
// back by pread, so a reader's memory does not grow with the file.
//
// The source: comma-separated fields, one row a line ('\n' or "\r\n"), plain or gzip. A first row
// that is not all numbers is a header of column names. Fields may be padded with spaces or tabs
// and wrapped in double quotes (which may not contain commas). Blank lines may end the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstrain {

class RandomAccessFile;

class CsvTable {
 public:
  // Uses the cache file of `path` in cache_dir (created if needed) when one exists, else parses
  // `path` into it: the cache is named after the source's path, size and mtime and written under
  // a temporary name that is renamed into place (racing processes are safe). Throws
  // pstrain::Error naming the file, line and column of the first problem: a row whose field
  // count differs from the first row's, a field that is not a number or is empty, a value that
  // is not finite or not a float32, an empty line followed by more rows, no data rows, fewer
  // than 2 columns.
  CsvTable(const std::string& path, const std::string& cache_dir);
  ~CsvTable();
  CsvTable(const CsvTable&) = delete;
  CsvTable& operator=(const CsvTable&) = delete;

  const std::string& path() const { return path_; }
  uint64_t rows() const { return rows_; }
  size_t columns() const { return columns_; }
  const std::vector<std::string>& names() const { return names_; }    // the header's; empty without one
  uint64_t line_of(uint64_t row) const { return first_line_ + row; }  // 1-based line in the source
  // The first line whose value in `column` is not an integer; 0 when all are.
  uint64_t first_non_integer_line(size_t column) const { return non_integer_line_[column]; }
  // "column 3 ('label')", or "column 3" without a header (columns count from 0).
  std::string column_text(size_t column) const;
  // Reads rows [first, first + count): count * columns() floats, row by row.
  void read_rows(uint64_t first, uint64_t count, float* out) const;

 private:
  bool load(const std::string& cache_path);  // false when the cache file is not a valid one

  std::string path_;
  std::unique_ptr<RandomAccessFile> file_;
  uint64_t rows_ = 0;
  size_t columns_ = 0;
  uint64_t first_line_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<std::string> names_;
  std::vector<uint64_t> non_integer_line_;
};

}  // namespace pstrain
