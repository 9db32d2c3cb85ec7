// The grammar of a --train-data / --test-data value (docs/data.md): one CSV file (FILE.csv or
// FILE.csv.gz), or FEATURES,LABELS naming two .npy files (.npy or .npy.gz) or two IDX files (any
// other names; gzip allowed). Checked when the flags are parsed (options.cc) and used again
// where the data is opened (worker/data/open.cc).
#pragma once

#include <string>

namespace pstrain {

struct DataFiles {
  std::string format;    // "csv" | "npy" | "idx"
  std::string features;  // csv: the one file
  std::string labels;    // empty for csv
};

// Throws pstrain::UsageError naming `flag` for a value outside the grammar.
DataFiles parse_data_files(const std::string& value, const std::string& flag);

}  // namespace pstrain
