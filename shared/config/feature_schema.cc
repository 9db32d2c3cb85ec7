#include "shared/config/feature_schema.h"

#include <cctype>
#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <system_error>

#include "shared/util/error.h"

namespace pstrain {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxSchemaBytes = 16 << 20;
constexpr size_t kMaxNameLength = 64;

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string kinds_text() { return "label, numeric, categorical, ignore"; }

// Unknown keys are refused, so a typo ("seperator") is not silently a default.
void check_keys(const json& object, const std::set<std::string>& allowed, const std::string& where) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (allowed.count(it.key()) == 0) {
      std::string list;
      for (const std::string& k : allowed) list += (list.empty() ? "" : ", ") + k;
      throw UsageError(where + ": unknown key \"" + it.key() + "\" (the keys here: " + list + ")");
    }
  }
}

std::string string_of(const json& object, const char* key, const std::string& where,
                      const std::string& fallback) {
  if (!object.contains(key)) return fallback;
  const json& v = object.at(key);
  if (!v.is_string()) throw UsageError(where + ": \"" + key + "\" must be a string, not " + v.dump());
  return v.get<std::string>();
}

bool bool_of(const json& object, const char* key, const std::string& where) {
  if (!object.contains(key)) return false;
  const json& v = object.at(key);
  if (!v.is_boolean()) throw UsageError(where + ": \"" + key + "\" must be true or false, not " + v.dump());
  return v.get<bool>();
}

// Categorical columns name per-field tables and their files (<name>.shard<s>-of-<S>).
bool table_name_ok(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength || name[0] == '.') return false;
  for (const char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  }
  return true;
}

SchemaColumn parse_column(const json& c, size_t index, char delimiter, const std::string& source) {
  std::string where = source + ": column " + std::to_string(index + 1);
  if (!c.is_object()) {
    throw UsageError(
        where + " must be an object such as {\"name\": \"os\", \"type\": \"categorical\"}, not " + c.dump());
  }
  SchemaColumn col;
  col.name = string_of(c, "name", where, "");
  if (col.name.empty()) throw UsageError(where + ": needs a \"name\" (a non-empty string)");
  where += " (\"" + col.name + "\")";
  const std::string type = string_of(c, "type", where, "");
  if (type == "label") {
    col.kind = ColumnKind::kLabel;
    check_keys(c, {"name", "type"}, where);
  } else if (type == "numeric") {
    col.kind = ColumnKind::kNumeric;
    check_keys(c, {"name", "type", "transform", "integer"}, where);
    const std::string transform = string_of(c, "transform", where, "none");
    if (transform != "none" && transform != "log1p") {
      throw UsageError(where +
                       ": \"transform\" must be none (the value as it is) or log1p (log(1 + max(x, 0)), "
                       "Criteo's), not \"" +
                       transform + "\"");
    }
    col.transform = transform == "log1p" ? NumericTransform::kLog1p : NumericTransform::kNone;
    col.integer = bool_of(c, "integer", where);
  } else if (type == "categorical") {
    col.kind = ColumnKind::kCategorical;
    check_keys(c, {"name", "type", "ids", "separator"}, where);
    if (!table_name_ok(col.name)) {
      throw UsageError(
          where + ": a categorical column's name names its per-field table and that table's files: 1 to " +
          std::to_string(kMaxNameLength) + " letters, digits, '_', '-' or '.', not starting with '.'");
    }
    const std::string ids = string_of(c, "ids", where, "string");
    if (ids != "string" && ids != "int" && ids != "hex") {
      throw UsageError(where +
                       ": \"ids\" must be string (FNV-1a of the bytes), int (SplitMix64 of the int64) or hex "
                       "(1 to 16 hex digits, the ID itself), not \"" +
                       ids + "\"");
    }
    col.ids = ids == "hex" ? IdKind::kHex : ids == "int" ? IdKind::kInt : IdKind::kString;
    if (c.contains("separator")) {
      const std::string sep = string_of(c, "separator", where, "");
      if (sep.size() != 1 || sep[0] == delimiter || sep[0] == '"' || sep[0] == '\n' || sep[0] == '\r' ||
          sep[0] == '\0') {
        throw UsageError(where +
                         ": \"separator\" must be one character other than the delimiter, '\"' and a newline "
                         "(e.g. \"|\" in a CSV file, \",\" in a tab-separated one), not \"" +
                         sep + "\"");
      }
      col.separator = sep[0];
    }
  } else if (type == "ignore") {
    col.kind = ColumnKind::kIgnore;
    check_keys(c, {"name", "type"}, where);
  } else {
    throw UsageError(where + ": \"type\" must be one of " + kinds_text() +
                     (type.empty() ? "" : ", not \"" + type + "\""));
  }
  return col;
}

void check_schema(const FeatureSchema& s) {
  std::set<std::string> names;
  size_t labels = 0;
  for (size_t i = 0; i < s.columns.size(); ++i) {
    const SchemaColumn& c = s.columns[i];
    if (!names.insert(c.name).second) {
      throw UsageError(s.source + ": column " + std::to_string(i + 1) + ": the name \"" + c.name +
                       "\" is taken by an earlier column (names must differ)");
    }
    if (c.kind == ColumnKind::kLabel && ++labels > 1) {
      throw UsageError(s.source + ": column " + std::to_string(i + 1) + " (\"" + c.name +
                       "\"): a second label column (a schema has at most one)");
    }
  }
  if (s.dense() + s.fields() == 0) {
    throw UsageError(s.source + ": no numeric or categorical column: the model would have no input");
  }
  if (s.fields() > kSchemaMaxFields) {
    throw UsageError(s.source + ": " + std::to_string(s.fields()) + " categorical columns, more than " +
                     std::to_string(kSchemaMaxFields));
  }
}

}  // namespace

size_t FeatureSchema::label() const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i].kind == ColumnKind::kLabel) return i;
  return std::string::npos;
}

size_t FeatureSchema::dense() const {
  size_t n = 0;
  for (const SchemaColumn& c : columns) n += c.kind == ColumnKind::kNumeric;
  return n;
}

size_t FeatureSchema::fields() const {
  size_t n = 0;
  for (const SchemaColumn& c : columns) n += c.kind == ColumnKind::kCategorical;
  return n;
}

std::vector<std::string> FeatureSchema::field_names() const {
  std::vector<std::string> names;
  for (const SchemaColumn& c : columns)
    if (c.kind == ColumnKind::kCategorical) names.push_back(c.name);
  return names;
}

std::string FeatureSchema::canonical() const {
  std::ostringstream out;
  out << "delimiter " << int{delimiter} << " header " << header;
  for (const SchemaColumn& c : columns) {
    out << "; " << c.name << ' ';
    switch (c.kind) {
      case ColumnKind::kLabel:
        out << "label";
        break;
      case ColumnKind::kIgnore:
        out << "ignore";
        break;
      case ColumnKind::kNumeric:
        out << "numeric " << (c.integer ? "integer " : "")
            << (c.transform == NumericTransform::kLog1p ? "log1p" : "none");
        break;
      case ColumnKind::kCategorical:
        out << "categorical " << (c.ids == IdKind::kHex ? "hex" : c.ids == IdKind::kInt ? "int" : "string");
        if (c.separator != '\0') out << " separator " << int{c.separator};
        break;
    }
  }
  return out.str();
}

FeatureSchema parse_feature_schema(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw UsageError(source + ": not a JSON schema: " + e.what() + " (docs/data.md, \"Feature schema\")");
  }
  if (!j.is_object())
    throw UsageError(source +
                     ": a schema is a JSON object with \"columns\" (docs/data.md, \"Feature schema\")");
  check_keys(j, {"delimiter", "header", "columns"}, source);
  FeatureSchema s;
  s.source = source;
  const std::string delimiter = string_of(j, "delimiter", source, "tab");
  if (delimiter != "tab" && delimiter != "comma") {
    throw UsageError(source + ": \"delimiter\" must be tab or comma, not \"" + delimiter + "\"");
  }
  s.delimiter = delimiter == "comma" ? ',' : '\t';
  s.header = bool_of(j, "header", source);
  if (!j.contains("columns") || !j.at("columns").is_array() || j.at("columns").empty()) {
    throw UsageError(
        source +
        ": needs \"columns\": a list of columns such as {\"name\": \"clicked\", \"type\": \"label\"}");
  }
  const json& columns = j.at("columns");
  for (size_t i = 0; i < columns.size(); ++i)
    s.columns.push_back(parse_column(columns[i], i, s.delimiter, source));
  check_schema(s);
  return s;
}

FeatureSchema criteo_feature_schema() {
  FeatureSchema s;
  s.source = "the criteo preset";
  s.delimiter = '\t';
  s.columns.push_back(
      SchemaColumn{"label", ColumnKind::kLabel, false, NumericTransform::kNone, IdKind::kHex, '\0'});
  for (int i = 1; i <= 13; ++i) {
    s.columns.push_back(SchemaColumn{"I" + std::to_string(i), ColumnKind::kNumeric, true,
                                     NumericTransform::kLog1p, IdKind::kHex, '\0'});
  }
  for (int i = 1; i <= 26; ++i) {
    s.columns.push_back(SchemaColumn{"C" + std::to_string(i), ColumnKind::kCategorical, false,
                                     NumericTransform::kNone, IdKind::kHex, ','});
  }
  return s;
}

FeatureSchema load_feature_schema(const std::string& value) {
  if (value == "criteo") return criteo_feature_schema();
  std::ifstream in(value, std::ios::binary);
  if (!in) {
    throw UsageError("--schema " + value + ": cannot open: " + errno_text(errno) +
                     " (a JSON schema file, or the preset criteo: docs/data.md, \"Feature schema\")");
  }
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxSchemaBytes)
      throw UsageError("--schema " + value + ": larger than 16 MiB: not a schema");
  }
  if (in.bad()) throw UsageError("--schema " + value + ": read failed: " + errno_text(errno));
  return parse_feature_schema(text, "--schema " + value);
}

}  // namespace pstrain
