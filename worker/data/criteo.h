// Criteo's CTR text format (docs/data.md, "Criteo (CTR) data"): one record a line, 40 fields
// separated by tabs: the label (0 or 1), 13 integer features I1..I13 and 26 categorical features
// C1..C26 written as hex strings, or lists of them separated by ','; any feature may be empty.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pstrain {

constexpr size_t kCriteoDense = 13;
constexpr size_t kCriteoCategorical = 26;
constexpr size_t kCriteoFields = 1 + kCriteoDense + kCriteoCategorical;
// The most IDs one categorical field may list ("a,b,c": a multi-valued field).
constexpr size_t kCriteoMaxIds = 1024;
// The longest line accepted: a valid one is at most 39 tabs + 1 + 13 * 20 + 26 * (1024 * 17 - 1)
// = 452,882 bytes (716 when every field holds one ID).
constexpr size_t kCriteoMaxLine = 512 << 10;
// The ID of an empty categorical field, in every field. The 16-digit value that equals it
// ("ffffffffffffffff") is refused, so no written ID is read as missing.
constexpr uint64_t kCriteoMissingId = UINT64_MAX;

// The label of a line without it (39 fields: input to --predict).
constexpr int32_t kCriteoNoLabel = -1;

struct CriteoRecord {
  int32_t label = 0;                // 0 or 1, or kCriteoNoLabel
  float dense[kCriteoDense] = {};   // criteo_dense_value(I1..I13)
  // C1..C26 as hex numbers: a field's one ID (kCriteoMissingId when empty), or the first of its
  // list when it holds several.
  uint64_t ids[kCriteoCategorical] = {};
  uint32_t counts[kCriteoCategorical] = {};  // IDs per field: 1, or 2..kCriteoMaxIds for a list
  std::vector<uint64_t> lists;  // every ID of the fields holding several, field by field, in order
};

// The dense feature the model sees for an integer field, DLRM's transform: log(1 + max(x, 0)),
// so negative values (Criteo has some -1, -2 in I2) count as 0; an empty field is 0 too.
float criteo_dense_value(int64_t x);

// Parses one line (without its newline) into `out`. Returns "" when it is valid, else what is
// wrong, without file or line: `field 5 (I4) "x1" is not an integer`. Strict: exactly 40 fields
// (or 39: I1..C26 without the label, which is then kCriteoNoLabel; messages number the line's
// own fields),
// the label "0" or "1", an integer field empty or an int64 in decimal (optional '-', digits
// only), a categorical field empty or 1 to kCriteoMaxIds IDs separated by ',' each of 1 to 16
// hex digits (either case; no empty element), no other characters.
std::string parse_criteo_line(std::string_view line, CriteoRecord& out);

// A field as a message shows it: in double quotes, control and non-ASCII bytes as \xNN, cut after
// 32 characters.
std::string quote_field(std::string_view f);
// One ID of 1 to 16 hex digits (either case); false when `f` is not one.
bool parse_hex_id(std::string_view f, uint64_t& out);

// "label", "I1".."I13", "C1".."C26" for field 0..39.
std::string criteo_field_name(size_t field);

}  // namespace pstrain
