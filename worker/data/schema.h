// The lines of a CTR file read by a feature schema (shared/config/feature_schema.h; docs/data.md,
// "Feature schema"): each line's label, numeric features and categorical IDs, as the schema says.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/config/feature_schema.h"
#include "worker/data/ctr_cache.h"

namespace pstrain {

// A string value's ID: FNV-1a 64 of its bytes (offset basis 0xcbf29ce484222325, prime
// 0x100000001b3, each byte XORed in then multiplied, mod 2^64). Part of the format: the saved
// tables are keyed by it.
uint64_t schema_string_id(std::string_view value);
// An int value's ID: mix_id(uint64(x)) (SplitMix64's finaliser, shared/train/sparse_ids.h; x as
// its two's complement). Part of the format.
uint64_t schema_int_id(int64_t value);

// One categorical value's ID in column `col` (hex, string or int, as below): "" or why it has none.
std::string schema_value_id(const SchemaColumn& col, std::string_view value, uint64_t& id);
// Element e (1-based) of the n values of a list: its ID appended to out.lists. "" or what is
// wrong, to follow the column's name: ": value e of n is empty" + `empty_hint`, or the element and
// its ID's problem. The text and Parquet readers' one way from a list element to an ID.
std::string append_list_id(const SchemaColumn& col, std::string_view element, size_t e, size_t n,
                           std::string_view empty_hint, CtrRecord& out);
// Field k of `out` from one categorical value, as a line's field (below): "" or what is wrong,
// to follow the column's name and the value in a message.
std::string schema_categorical(const SchemaColumn& col, std::string_view value, CtrRecord& out, size_t k);

// Parses the lines of one file (`path`, for the header's errors). Without a header, a line holds
// every column of the schema in order, or every one but the label (input to --predict). With
// one, the first line names the columns: each of the schema's must be there but the label
// (absent: the file has no labels), in any order; other columns are ignored; every later line
// has the header's number of fields. A field of a comma-separated file may be wrapped in double
// quotes (stripped; the value may not hold a comma). Values:
//   label: 0 or 1.
//   numeric: empty (0), a decimal int64 (integer columns) or a finite decimal number, then the
//     transform (log1p: log(1 + max(x, 0)) in double, stored as float; Criteo's for integers).
//   categorical: empty (the missing ID, kCriteoMissingId), or one value, or (a column with a
//     separator) 1 to kSchemaMaxIds values separated by it, each one ID: hex 1 to 16 hex digits
//     as the number they write; string schema_string_id of its bytes; int schema_int_id of a
//     decimal int64. A value whose ID would be the missing ID is refused.
// The messages name the line's field (1-based), the column and the value, as the Criteo reader's.
class SchemaLineParser final : public CtrLineParser {
 public:
  SchemaLineParser(const FeatureSchema& schema, std::string path);
  // Throws pstrain::Error for a header that lacks one of the schema's columns.
  std::string parse(std::string_view line, uint64_t number, CtrRecord& out, bool* skip) override;

 private:
  std::string read_header(std::string_view line);
  std::string field_text(size_t column, std::string_view value) const;
  std::string parse_field(size_t column, std::string_view value, CtrRecord& out, size_t& dense,
                          size_t& field);
  std::string parse_numeric(size_t column, std::string_view value, float& v) const;
  // Categorical field k: its ID (out.ids[k]), or its list's (out.lists, out.counts[k]).
  std::string parse_categorical(size_t column, std::string_view value, CtrRecord& out, size_t k) const;

  const FeatureSchema& schema_;
  std::string path_;
  std::vector<std::string_view> fields_;  // the line's, split
  // With a header: per schema column its field in a line (npos: the label, absent), and the
  // header's field count.
  std::vector<size_t> position_;
  size_t header_fields_ = 0;
  bool have_header_ = false, labelled_ = true;
};

}  // namespace pstrain
