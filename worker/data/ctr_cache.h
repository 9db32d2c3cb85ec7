// The cache both CTR text readers share (the Criteo reader, worker/data/criteo_dataset.h, and the
// schema reader, worker/data/schema_dataset.h): a text file parsed once, streaming, into a cache
// file of fixed-size binary records (and the IDs of fields that list several), read back by
// pread, so a reader's memory does not grow with the file (docs/data.md, "Criteo (CTR) data").
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "worker/data/dataset.h"
#include "worker/data/records.h"

namespace pstrain {

// The label of a record of a file without the label column (prediction input).
constexpr int32_t kNoLabel = -1;

// One parsed line: `dense` and `fields` values (the layout's), the label (0 or 1, or kNoLabel),
// each field's first ID (or its one ID) and count, and the IDs of the fields listing several.
struct CtrRecord {
  int32_t label = 0;
  std::vector<float> dense;
  std::vector<uint64_t> ids;
  std::vector<uint32_t> counts;
  std::vector<uint64_t> lists;  // every ID of the fields holding several, field by field, in order
};

// A format's line parser. parse() fills `out` (its vectors already sized to the layout) from one
// line (without its newline) and returns "" or what is wrong, without file or line (the cache
// adds them). It may set *skip for a line that is no record (a header).
class CtrLineParser {
 public:
  virtual ~CtrLineParser() = default;
  virtual std::string parse(std::string_view line, uint64_t number, CtrRecord& out, bool* skip) = 0;
};

// A file's rows, one at a time, for the cache: a text file's lines through a CtrLineParser
// (text_rows), or a Parquet file's rows (worker/data/parquet_rows.h).
class CtrRows {
 public:
  virtual ~CtrRows() = default;
  // The next row into `out` (its vectors sized to the layout), false at the end. `problem`: ""
  // or what is wrong with the row (without file or row); *skip for a row that is no record.
  virtual bool next(CtrRecord& out, std::string& problem, bool* skip) = 0;
  virtual uint64_t number() const = 0;  // 1-based number of the row last returned
  // Where row `number` is, for messages: "f.csv:7" (a line), "f.parquet: row 7".
  virtual std::string where(uint64_t number) const = 0;
  virtual const char* unit() const = 0;  // "line" or "row"
};

struct CtrCacheLayout {
  std::string format;     // "Criteo TSV", for the log line
  const char* magic;      // 8 bytes: the cache format, its version
  std::string suffix;     // of the cache file's name (parsed_cache_path)
  size_t dense = 0;       // dense values per record
  size_t fields = 0;      // categorical fields per record (0 to 4096)
  size_t max_ids = 1024;  // the most IDs one field may list
  size_t max_line = 512 << 10;
};

// Opens (parsing it first when its cache is missing or of another format) the file at `path`.
// `make_parser` is called for each parse. A line that does not parse throws pstrain::Error
// "<path>:<line>: <what is wrong> (...--skip-bad-lines...)" (nothing is cached); with
// `skip_bad_lines` such lines are left out, counted, and the count logged at every open. Also an
// error: an empty file, no valid line, truncated or corrupt gzip data, lines with and without
// the label in one file, a cache written by a --skip-bad-lines run that skipped lines when
// skip_bad_lines is false. As a Dataset: the dense values are the features, labels 0 and 1 (0
// for every record of a file without the label column: labelled() false); num_classes()
// labels_range.classes, else 2; id_fields() the layout's fields.
std::unique_ptr<Dataset> open_ctr_cache(const std::string& path, const std::string& cache_dir,
                                        bool skip_bad_lines, const LabelRange& labels_range,
                                        const CtrCacheLayout& layout,
                                        const std::function<std::unique_ptr<CtrLineParser>()>& make_parser);

// The same, for a file read by `make_rows` (its rows, as above).
std::unique_ptr<Dataset> open_ctr_cache_rows(const std::string& path, const std::string& cache_dir,
                                             bool skip_bad_lines, const LabelRange& labels_range,
                                             const CtrCacheLayout& layout,
                                             const std::function<std::unique_ptr<CtrRows>()>& make_rows);

// The lines of the text file at `path` (plain or gzip) through `parser`: a line longer than
// layout.max_line is a bad line.
std::unique_ptr<CtrRows> text_rows(const std::string& path, const CtrCacheLayout& layout,
                                   std::unique_ptr<CtrLineParser> parser);

// The hint a bad line's message ends with.
std::string skip_bad_lines_hint();

}  // namespace pstrain
