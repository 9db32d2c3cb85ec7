#include "worker/data/schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "shared/train/sparse_ids.h"
#include "shared/util/error.h"
#include "worker/data/criteo.h"

namespace pstrain {
namespace {

constexpr size_t kNone = std::string::npos;

const char* delimiter_name(char d) { return d == ',' ? "commas" : "tabs"; }

// A decimal int64: an optional '-', then digits. "" when it is one, else why not.
std::string parse_int64(std::string_view f, int64_t& x) {
  const bool digits = !f.empty() && f != "-" &&
                      f.find_first_not_of("0123456789", f[0] == '-' ? 1 : 0) == std::string_view::npos;
  if (!digits) return " is not an integer";
  const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), x);
  if (ec != std::errc() || end != f.data() + f.size()) return " is outside the int64 range";
  return "";
}

}  // namespace

uint64_t schema_string_id(std::string_view value) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : value) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t schema_int_id(int64_t value) { return mix_id(static_cast<uint64_t>(value)); }

std::string schema_value_id(const SchemaColumn& col, std::string_view v, uint64_t& id) {
  switch (col.ids) {
    case IdKind::kHex:
      if (!parse_hex_id(v, id)) return " is not 1 to 16 hex digits";
      break;
    case IdKind::kString:
      id = schema_string_id(v);
      break;
    case IdKind::kInt: {
      int64_t i = 0;
      const std::string problem = parse_int64(v, i);
      if (!problem.empty()) return problem;
      id = schema_int_id(i);
      break;
    }
  }
  if (id == kCriteoMissingId) {
    return col.ids == IdKind::kHex ? " is the ID reserved for an empty field"
                                   : " hashes to the ID reserved for an empty field (change the value)";
  }
  return "";
}

std::string append_list_id(const SchemaColumn& col, std::string_view element, size_t e, size_t n,
                           std::string_view empty_hint, CtrRecord& out) {
  const std::string which = ": value " + std::to_string(e) + " of " + std::to_string(n);
  if (element.empty()) return which + " is empty" + std::string(empty_hint);
  uint64_t id = 0;
  const std::string problem = schema_value_id(col, element, id);
  if (!problem.empty()) return which + " " + quote_field(element) + problem;
  out.lists.push_back(id);
  return "";
}

std::string schema_categorical(const SchemaColumn& col, std::string_view f, CtrRecord& out, size_t k) {
  out.counts[k] = 1;
  if (f.empty()) {
    out.ids[k] = kCriteoMissingId;
    return "";
  }
  if (col.separator == '\0' || f.find(col.separator) == std::string_view::npos)
    return schema_value_id(col, f, out.ids[k]);
  const size_t ids = static_cast<size_t>(std::count(f.begin(), f.end(), col.separator)) + 1;
  if (ids > kSchemaMaxIds) {
    return " lists " + std::to_string(ids) + " values, more than " + std::to_string(kSchemaMaxIds) +
           " (the most one field may hold)";
  }
  const size_t first = out.lists.size();
  std::string_view rest = f;
  for (size_t e = 1; e <= ids; ++e) {
    const size_t cut = rest.find(col.separator);
    const std::string_view element = rest.substr(0, cut);
    rest.remove_prefix(cut == std::string_view::npos ? rest.size() : cut + 1);
    const std::string problem = append_list_id(
        col, element, e, ids, " (values are separated by one '" + std::string(1, col.separator) + "')", out);
    if (!problem.empty()) return problem;
  }
  out.ids[k] = out.lists[first];
  out.counts[k] = static_cast<uint32_t>(ids);
  return "";
}

SchemaLineParser::SchemaLineParser(const FeatureSchema& schema, std::string path)
    : schema_(schema), path_(std::move(path)) {}

std::string SchemaLineParser::field_text(size_t column, std::string_view value) const {
  size_t at = column;  // the field's place in the line
  if (schema_.header) {
    at = position_[column];
  } else if (!labelled_ && column > schema_.label()) {
    --at;
  }
  return "field " + std::to_string(at + 1) + " (" + schema_.columns[column].name + ") " + quote_field(value);
}

std::string SchemaLineParser::read_header(std::string_view) {
  const size_t label = schema_.label();
  position_.assign(schema_.columns.size(), kNone);
  std::string missing;
  for (size_t c = 0; c < schema_.columns.size(); ++c) {
    for (size_t k = 0; k < fields_.size(); ++k) {
      if (fields_[k] != schema_.columns[c].name) continue;
      if (position_[c] != kNone) {
        throw Error(path_ + ":1: the header names column \"" + schema_.columns[c].name + "\" twice (fields " +
                    std::to_string(position_[c] + 1) + " and " + std::to_string(k + 1) + ")");
      }
      position_[c] = k;
    }
    if (position_[c] == kNone && c != label && schema_.columns[c].kind != ColumnKind::kIgnore) {
      missing += (missing.empty() ? "\"" : ", \"") + schema_.columns[c].name + "\"";
    }
  }
  if (!missing.empty()) {
    std::string seen;
    for (size_t k = 0; k < fields_.size() && k < 12; ++k) seen += (k ? ", " : "") + quote_field(fields_[k]);
    throw Error(path_ + ":1: the header lacks the schema's column(s) " + missing + " (" + schema_.source +
                "; the header's " + std::to_string(fields_.size()) + " fields, separated by " +
                delimiter_name(schema_.delimiter) + ": " + seen + (fields_.size() > 12 ? ", ..." : "") + ")");
  }
  labelled_ = label != kNone && position_[label] != kNone;
  header_fields_ = fields_.size();
  have_header_ = true;
  return "";
}

std::string SchemaLineParser::parse(std::string_view line, uint64_t, CtrRecord& out, bool* skip) {
  fields_.clear();
  for (;;) {
    const size_t cut = line.find(schema_.delimiter);
    std::string_view f = line.substr(0, cut);
    if (schema_.delimiter == ',' && f.size() >= 2 && f.front() == '"' && f.back() == '"')
      f = f.substr(1, f.size() - 2);
    fields_.push_back(f);
    if (cut == std::string_view::npos) break;
    line.remove_prefix(cut + 1);
  }
  const size_t n = fields_.size(), columns = schema_.columns.size(), label = schema_.label();
  const auto count = [](size_t k) { return std::to_string(k) + (k == 1 ? " field" : " fields"); };
  if (schema_.header && !have_header_) {
    *skip = true;
    return read_header(line);
  }
  if (schema_.header) {
    if (n != header_fields_)
      return count(n) + ", but the header (line 1) has " + std::to_string(header_fields_);
  } else if (n == columns) {
    labelled_ = true;
  } else if (label != kNone && n == columns - 1) {
    labelled_ = false;
  } else {
    return count(n) + ", but a line of " + schema_.source + " has " + std::to_string(columns) +
           " separated by " + delimiter_name(schema_.delimiter) +
           (label != kNone ? ", or " + std::to_string(columns - 1) + " without the label column \"" +
                                 schema_.columns[label].name + "\" (input to --predict)"
                           : std::string());
  }
  out.label = labelled_ ? 0 : kNoLabel;
  size_t dense = 0, field = 0;
  for (size_t c = 0; c < columns; ++c) {
    const ColumnKind kind = schema_.columns[c].kind;
    if (kind == ColumnKind::kIgnore || (kind == ColumnKind::kLabel && !labelled_)) continue;
    size_t at = c;
    if (schema_.header) {
      at = position_[c];
    } else if (!labelled_ && c > label) {
      --at;
    }
    std::string problem = parse_field(c, fields_[at], out, dense, field);
    if (!problem.empty()) return problem;
  }
  return "";
}

std::string SchemaLineParser::parse_field(size_t c, std::string_view f, CtrRecord& out, size_t& dense,
                                          size_t& field) {
  const SchemaColumn& col = schema_.columns[c];
  switch (col.kind) {
    case ColumnKind::kIgnore:
      return "";
    case ColumnKind::kLabel:
      if (f != "0" && f != "1") return field_text(c, f) + " is not 0 or 1 (the label: 1 clicked, 0 not)";
      out.label = f[0] - '0';
      return "";
    case ColumnKind::kNumeric:
      return parse_numeric(c, f, out.dense[dense++]);
    case ColumnKind::kCategorical:
      break;
  }
  return parse_categorical(c, f, out, field++);
}

std::string SchemaLineParser::parse_numeric(size_t c, std::string_view f, float& v) const {
  const SchemaColumn& col = schema_.columns[c];
  if (f.empty()) {
    v = 0;
    return "";
  }
  double x = 0;
  if (col.integer) {
    int64_t i = 0;
    const std::string problem = parse_int64(f, i);
    if (!problem.empty()) return field_text(c, f) + problem;
    if (col.transform == NumericTransform::kLog1p) {
      v = criteo_dense_value(i);  // Criteo's, to the bit
      return "";
    }
    x = static_cast<double>(i);
  } else {
    const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), x);
    if (ec == std::errc::result_out_of_range) return field_text(c, f) + " is outside the float range";
    if (ec != std::errc() || end != f.data() + f.size()) return field_text(c, f) + " is not a number";
    if (!std::isfinite(x)) return field_text(c, f) + " is not a finite number";
  }
  if (col.transform == NumericTransform::kLog1p) x = std::log1p(std::max(x, 0.0));
  if (std::fabs(x) > std::numeric_limits<float>::max())
    return field_text(c, f) + " is outside the float range";
  v = static_cast<float>(x);
  return "";
}

std::string SchemaLineParser::parse_categorical(size_t c, std::string_view f, CtrRecord& out,
                                                size_t k) const {
  const std::string problem = schema_categorical(schema_.columns[c], f, out, k);
  return problem.empty() ? "" : field_text(c, f) + problem;
}

}  // namespace pstrain
