// A CTR data set's columns (--schema; docs/data.md, "Feature schema"): which column is the label,
// which are numeric features and how they are transformed, which are categorical and how their
// values become 64-bit IDs, which list several values; the delimiter and the header row. Read
// from a small JSON file (nlohmann-json), or the preset `criteo` (Criteo's 40 columns, read to
// the same bits as the Criteo reader). Parsed when the flags are checked, by every worker and by
// a PS whose per-field tables it names, so a bad schema is a usage error before any data is
// read. The line parser is the worker's (worker/data/schema.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pstrain {

enum class ColumnKind { kLabel, kNumeric, kCategorical, kIgnore };
enum class NumericTransform { kNone, kLog1p };  // none: x; log1p: log(1 + max(x, 0))
enum class IdKind { kHex, kString, kInt };      // how a categorical value becomes a 64-bit ID

struct SchemaColumn {
  std::string name;
  ColumnKind kind = ColumnKind::kIgnore;
  // numeric
  bool integer = false;  // only decimal int64 values (Criteo's integer fields); else any decimal number
  NumericTransform transform = NumericTransform::kNone;
  // categorical
  IdKind ids = IdKind::kString;
  char separator = '\0';  // a multi-valued column's separator between values; '\0': one value
};

struct FeatureSchema {
  std::string source;                 // the --schema value: a file, or "criteo"
  char delimiter = '\t';              // '\t' or ','
  bool header = false;                // the first line names the columns (matched by name, in any order)
  std::vector<SchemaColumn> columns;  // in the file's order (without a header)

  // The label column's index in `columns`, or npos when the schema has none.
  size_t label() const;
  size_t dense() const;   // numeric columns: the dense features, in column order
  size_t fields() const;  // categorical columns: the embedding fields, in column order
  // The categorical columns' names (per-field tables are named after them).
  std::vector<std::string> field_names() const;
  // A canonical text of everything that changes what a line parses to (for the cache file's name
  // and the job's fingerprint): equal for equal schemas, whatever the file's spacing or key order.
  std::string canonical() const;
};

// The most categorical values one field may list (as Criteo's kCriteoMaxIds).
constexpr size_t kSchemaMaxIds = 1024;
// The most categorical columns a schema may have (model.json's limit on fields).
constexpr size_t kSchemaMaxFields = 4096;

// "criteo" is the preset; any other value a JSON file. Throws pstrain::UsageError naming the
// file, the column and what is wrong, with the fix.
FeatureSchema load_feature_schema(const std::string& value);
// The JSON text's schema (`source` names it in messages).
FeatureSchema parse_feature_schema(const std::string& json_text, const std::string& source);
// Criteo's 40 columns: label; I1..I13 integer, log1p; C1..C26 hex IDs, ',' between the values of a list.
FeatureSchema criteo_feature_schema();

}  // namespace pstrain
