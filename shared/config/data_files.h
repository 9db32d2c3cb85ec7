// The grammar of a --train-data / --test-data value (docs/data.md): one CSV file (FILE.csv or
// FILE.csv.gz), one Criteo TSV file (FILE.tsv or FILE.txt, optionally .gz; any name with
// --data-format criteo), or FEATURES,LABELS naming two .npy files (.npy or .npy.gz) or two IDX files (any
// other names; gzip allowed). Checked when the flags are parsed (options.cc) and used again
// where the data is opened (worker/data/open.cc).
#pragma once

#include <string>

namespace pstrain {

// What a worker reads: IDX, .npy, CSV, Criteo TSV, or CTR text read by --schema.
enum class DataKind { kIdx, kNpy, kCsv, kCriteo, kSchema };
const char* data_kind_name(DataKind kind);  // "idx" | "npy" | "csv" | "criteo" | "schema"

struct DataFiles {
  DataKind format = DataKind::kIdx;
  std::string features;  // csv, criteo: the one file
  std::string labels;    // empty for csv and criteo
};

// The values of --data-format: "auto" (by the file names' extensions) or "criteo".
bool is_data_format(const std::string& data_format);

// `data_format`: --data-format ("auto", or "" for the same), or "schema" (--schema is given: each
// value is one file, format "schema"). Throws pstrain::UsageError naming
// `flag` for a value outside the grammar.
DataFiles parse_data_files(const std::string& value, const std::string& flag,
                           const std::string& data_format = "auto");

}  // namespace pstrain
