#include "shared/config/data_files.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "shared/util/error.h"

namespace pstrain {
namespace {

// `name` ends in `ext` or `ext`.gz, in any case.
bool has_extension(const std::string& name, const std::string& ext) {
  std::string lower(name.size(), ' ');
  std::transform(name.begin(), name.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower.size() > 3 && lower.compare(lower.size() - 3, 3, ".gz") == 0) lower.resize(lower.size() - 3);
  return lower.size() > ext.size() && lower.compare(lower.size() - ext.size(), ext.size(), ext) == 0;
}

}  // namespace

const char* data_kind_name(DataKind kind) {
  switch (kind) {
    case DataKind::kIdx: return "idx";
    case DataKind::kNpy: return "npy";
    case DataKind::kCsv: return "csv";
    case DataKind::kCriteo: return "criteo";
    case DataKind::kSchema: return "schema";
  }
  return "?";
}

bool is_data_format(const std::string& data_format) {
  return data_format == "auto" || data_format == "criteo";
}

DataFiles parse_data_files(const std::string& value, const std::string& flag, const std::string& data_format) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t comma = value.find(',', start);
    parts.push_back(value.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  const std::string quoted = "'" + value + "'";
  if (data_format == "schema") {  // --schema: one CTR text file read by it, whatever its name
    if (parts.size() == 1 && !value.empty()) return {DataKind::kSchema, value, ""};
    throw UsageError(flag + " " + quoted + ": --schema reads one file (file names may not contain commas)");
  }
  if (data_format == "criteo") {
    if (parts.size() == 1 && !value.empty()) return {DataKind::kCriteo, value, ""};
    throw UsageError(flag + " " + quoted + ": --data-format criteo reads one file (file names may not contain commas)");
  }
  if (!data_format.empty() && data_format != "auto") {
    throw UsageError("--data-format: '" + data_format + "' is not one of auto, criteo");
  }
  if (parts.size() == 1) {
    if (has_extension(value, ".csv")) return {DataKind::kCsv, value, ""};
    if (has_extension(value, ".tsv") || has_extension(value, ".txt")) return {DataKind::kCriteo, value, ""};
    if (has_extension(value, ".parquet")) {
      throw UsageError(flag + " " + quoted + ": a Parquet file is read by a feature schema: give --schema FILE.json "
                       "naming its columns (docs/data.md, \"Parquet\")");
    }
    throw UsageError(flag + " " + quoted + ": one file must be a .csv (features and label columns) or Criteo "
                     "data (.tsv or .txt, or any name with --data-format criteo); give .npy or IDX data as "
                     "FEATURES,LABELS");
  }
  if (parts.size() != 2) {
    throw UsageError(flag + " " + quoted + ": names " + std::to_string(parts.size()) +
                     " files; give FEATURES,LABELS or one .csv or Criteo file (file names may not contain commas)");
  }
  if (parts[0].empty() || parts[1].empty()) throw UsageError(flag + " " + quoted + ": an empty file name in FEATURES,LABELS");
  if (has_extension(parts[0], ".csv") || has_extension(parts[1], ".csv")) {
    throw UsageError(flag + " " + quoted + ": a .csv file holds the features and the labels: give it alone");
  }
  const int npy = has_extension(parts[0], ".npy") + has_extension(parts[1], ".npy");
  if (npy == 1) throw UsageError(flag + " " + quoted + ": FEATURES and LABELS must both be .npy files, or both IDX files");
  return {npy == 2 ? DataKind::kNpy : DataKind::kIdx, parts[0], parts[1]};
}

}  // namespace pstrain
