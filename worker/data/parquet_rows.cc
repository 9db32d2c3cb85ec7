// Compiled as C++20 (Arrow's headers need it); its interface (parquet_rows.h) is C++17.
#include "worker/data/parquet_rows.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "shared/util/error.h"
#include "worker/data/criteo.h"
#include "worker/data/schema.h"

namespace pstrain {
namespace {

using arrow::Type;

bool is_int_type(Type::type t) {
  return t == Type::INT8 || t == Type::INT16 || t == Type::INT32 || t == Type::INT64 || t == Type::UINT8 ||
         t == Type::UINT16 || t == Type::UINT32 || t == Type::UINT64;
}
bool is_float_type(Type::type t) { return t == Type::FLOAT || t == Type::DOUBLE; }
bool is_text(Type::type t) {
  return t == Type::STRING || t == Type::LARGE_STRING || t == Type::BINARY || t == Type::LARGE_BINARY;
}
bool is_list_type(Type::type t) { return t == Type::LIST || t == Type::LARGE_LIST; }

// A dictionary-encoded column's values are its dictionary's.
const arrow::DataType& value_type(const arrow::DataType& t) {
  return t.id() == Type::DICTIONARY ? *static_cast<const arrow::DictionaryType&>(t).value_type() : t;
}

// Value i of an array (a dictionary's index resolved): the array and the index holding it.
const arrow::Array& resolve(const arrow::Array& a, int64_t& i) {
  if (a.type_id() != Type::DICTIONARY) return a;
  const auto& d = static_cast<const arrow::DictionaryArray&>(a);
  i = d.GetValueIndex(i);
  return *d.dictionary();
}

template <typename T>
auto value_of(const arrow::Array& a, int64_t i) {
  return static_cast<const arrow::NumericArray<T>&>(a).Value(i);
}

// An integer value as int64; "" or why not (a uint64 past int64, as the text reader's range).
std::string int_value(const arrow::Array& a, int64_t i, int64_t& x) {
  switch (a.type_id()) {
    case Type::INT8:
      x = value_of<arrow::Int8Type>(a, i);
      break;
    case Type::INT16:
      x = value_of<arrow::Int16Type>(a, i);
      break;
    case Type::INT32:
      x = value_of<arrow::Int32Type>(a, i);
      break;
    case Type::INT64:
      x = value_of<arrow::Int64Type>(a, i);
      break;
    case Type::UINT8:
      x = value_of<arrow::UInt8Type>(a, i);
      break;
    case Type::UINT16:
      x = value_of<arrow::UInt16Type>(a, i);
      break;
    case Type::UINT32:
      x = value_of<arrow::UInt32Type>(a, i);
      break;
    case Type::UINT64: {
      const uint64_t u = value_of<arrow::UInt64Type>(a, i);
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        std::string why(1, ' ');
        return why.append(std::to_string(u)).append(" is outside the int64 range");
      }
      x = static_cast<int64_t>(u);
      break;
    }
    default:
      return " is not an integer";
  }
  return "";
}

std::string_view text_value(const arrow::Array& a, int64_t i) {
  switch (a.type_id()) {
    case Type::STRING:
      return static_cast<const arrow::StringArray&>(a).GetView(i);
    case Type::LARGE_STRING:
      return static_cast<const arrow::LargeStringArray&>(a).GetView(i);
    case Type::BINARY:
      return static_cast<const arrow::BinaryArray&>(a).GetView(i);
    default:
      return static_cast<const arrow::LargeBinaryArray&>(a).GetView(i);
  }
}

// Value i as the text a CSV file would hold (integers in decimal): a categorical value's.
std::string_view value_text(const arrow::Array& a, int64_t i, std::string& scratch) {
  if (is_text(a.type_id())) return text_value(a, i);
  int64_t x = 0;
  if (!int_value(a, i, x).empty()) {  // a uint64 past int64: its digits, refused as the text's are
    scratch = std::to_string(value_of<arrow::UInt64Type>(a, i));
  } else {
    scratch = std::to_string(x);
  }
  return scratch;
}

// Whether a column of type `t` maps to schema column `col`; "" or what it needs.
std::string type_problem(const SchemaColumn& col, const arrow::DataType& type) {
  const arrow::DataType& t = value_type(type);
  switch (col.kind) {
    case ColumnKind::kLabel:
      return is_int_type(t.id()) || t.id() == Type::BOOL ? "" : "an integer or bool type (0 or 1)";
    case ColumnKind::kNumeric:
      if (col.integer) return is_int_type(t.id()) ? "" : "an integer type (\"integer\": true)";
      return is_int_type(t.id()) || is_float_type(t.id()) ? "" : "an integer or floating-point type";
    case ColumnKind::kCategorical: {
      const bool list = is_list_type(t.id());
      const arrow::DataType& e =
          list ? value_type(*static_cast<const arrow::BaseListType&>(t).value_type()) : t;
      if (col.ids == IdKind::kHex && !is_text(e.id())) return "strings of hex digits (\"ids\": \"hex\")";
      if (!is_text(e.id()) && !is_int_type(e.id()))
        return "a string, binary or integer type, or a list of one";
      return list && is_list_type(e.id()) ? "a list of strings or integers, not of lists" : "";
    }
    case ColumnKind::kIgnore:
      break;
  }
  return "";
}

class ParquetRows final : public CtrRows {
 public:
  ParquetRows(const std::string& path, const FeatureSchema& schema) : path_(path), schema_(schema) {
    open_file();
    match_columns();
  }

  bool next(CtrRecord& out, std::string& problem, bool*) override {
    while (batch_ == nullptr || row_ >= batch_->num_rows()) {
      if (!next_batch()) return false;
    }
    ++number_;
    out.label = labelled_ ? 0 : kNoLabel;
    size_t dense = 0, field = 0;
    for (size_t c = 0; c < schema_.columns.size() && problem.empty(); ++c) {
      if (arrays_[c] == nullptr) continue;
      const SchemaColumn& col = schema_.columns[c];
      if (col.kind == ColumnKind::kLabel) problem = label(c, out.label);
      if (col.kind == ColumnKind::kNumeric) problem = numeric(c, out.dense[dense++]);
      if (col.kind == ColumnKind::kCategorical) problem = categorical(c, out, field++);
    }
    ++row_;
    return true;
  }
  uint64_t number() const override { return number_; }
  std::string where(uint64_t number) const override { return path_ + ": row " + std::to_string(number); }
  const char* unit() const override { return "row"; }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw Error(path_ + ": " + what); }

  void open_file() {
    auto file = arrow::io::ReadableFile::Open(path_);
    if (!file.ok()) fail("cannot open: " + file.status().message());
    auto reader = parquet::arrow::OpenFile(*file, arrow::default_memory_pool());
    if (!reader.ok()) fail("cannot read as Parquet: " + reader.status().message());
    reader_ = std::move(*reader);
    const arrow::Status st = reader_->GetSchema(&file_schema_);
    if (!st.ok()) fail("cannot read as Parquet: " + st.message());
  }

  // Each schema column's field in the file, its type checked; the leaf columns to read.
  void match_columns() {
    fields_.assign(schema_.columns.size(), -1);
    std::string missing;
    std::vector<int> leaves;
    for (size_t c = 0; c < schema_.columns.size(); ++c) {
      const SchemaColumn& col = schema_.columns[c];
      if (col.kind == ColumnKind::kIgnore) continue;
      const std::vector<int> at = file_schema_->GetAllFieldIndices(col.name);
      if (at.size() > 1)
        fail("the file has " + std::to_string(at.size()) + " columns named \"" + col.name + "\"");
      if (at.empty()) {
        if (col.kind != ColumnKind::kLabel) missing += (missing.empty() ? "\"" : ", \"") + col.name + "\"";
        continue;
      }
      const arrow::DataType& type = *file_schema_->field(at[0])->type();
      const std::string needs = type_problem(col, type);
      if (!needs.empty()) {
        fail("column \"" + col.name + "\" is " + type.ToString() + ", but the schema's " +
             (col.kind == ColumnKind::kLabel     ? "label"
              : col.kind == ColumnKind::kNumeric ? "numeric"
                                                 : "categorical") +
             " column needs " + needs + " (" + schema_.source + ")");
      }
      fields_[c] = at[0];
      add_leaves(reader_->manifest().schema_fields[static_cast<size_t>(at[0])], leaves);
    }
    if (!missing.empty())
      fail("the file lacks the schema's column(s) " + missing + " (" + schema_.source + "; " + names() + ")");
    const size_t label = schema_.label();
    labelled_ = label != std::string::npos && fields_[label] >= 0;
    std::sort(leaves.begin(), leaves.end());
    std::vector<int> groups(static_cast<size_t>(reader_->num_row_groups()));
    for (size_t g = 0; g < groups.size(); ++g) groups[g] = static_cast<int>(g);
    auto batches = reader_->GetRecordBatchReader(groups, leaves);
    if (!batches.ok()) fail("cannot read: " + batches.status().message());
    batches_ = std::move(*batches);
    arrays_.assign(schema_.columns.size(), nullptr);
  }

  static void add_leaves(const parquet::arrow::SchemaField& f, std::vector<int>& out) {
    if (f.is_leaf()) out.push_back(f.column_index);
    for (const auto& child : f.children) add_leaves(child, out);
  }

  std::string names() const {
    std::string s = "the file's " + std::to_string(file_schema_->num_fields()) + " columns: ";
    for (int k = 0; k < file_schema_->num_fields() && k < 12; ++k)
      s += (k ? ", " : "") + quote_field(file_schema_->field(k)->name());
    return s + (file_schema_->num_fields() > 12 ? ", ..." : "");
  }

  bool next_batch() {
    const arrow::Status st = batches_->ReadNext(&batch_);
    if (!st.ok()) fail("row " + std::to_string(number_ + 1) + ": cannot read: " + st.message());
    if (batch_ == nullptr) return false;
    for (size_t c = 0; c < schema_.columns.size(); ++c) {
      if (fields_[c] < 0) continue;
      arrays_[c] = batch_->GetColumnByName(schema_.columns[c].name);
      if (arrays_[c] == nullptr) fail("column \"" + schema_.columns[c].name + "\" is missing from a batch");
    }
    row_ = 0;
    return true;
  }

  std::string column(size_t c) const { return "column \"" + schema_.columns[c].name + "\""; }

  std::string label(size_t c, int32_t& out) const {
    if (arrays_[c]->IsNull(row_)) return column(c) + " is null (the label: 1 clicked, 0 not)";
    int64_t i = row_, x = 0;
    const arrow::Array& a = resolve(*arrays_[c], i);
    if (a.type_id() == Type::BOOL) {
      x = static_cast<const arrow::BooleanArray&>(a).Value(i) ? 1 : 0;
    } else if (!int_value(a, i, x).empty() || (x != 0 && x != 1)) {
      return column(c) + " " + std::string(value_text(a, i, scratch_)) +
             " is not 0 or 1 (the label: 1 clicked, 0 not)";
    }
    out = static_cast<int32_t>(x);
    return "";
  }

  std::string numeric(size_t c, float& v) const {
    if (arrays_[c]->IsNull(row_)) {
      v = 0;
      return "";
    }
    const SchemaColumn& col = schema_.columns[c];
    int64_t i = row_;
    const arrow::Array& a = resolve(*arrays_[c], i);
    double x = 0;
    if (is_int_type(a.type_id())) {
      int64_t n = 0;
      const std::string problem = int_value(a, i, n);
      if (!problem.empty()) return column(c) + problem;
      if (col.integer && col.transform == NumericTransform::kLog1p) {
        v = criteo_dense_value(n);  // as the text reader's, to the bit
        return "";
      }
      x = static_cast<double>(n);
    } else {
      x = a.type_id() == Type::FLOAT ? value_of<arrow::FloatType>(a, i) : value_of<arrow::DoubleType>(a, i);
      if (!std::isfinite(x)) return column(c) + " " + std::to_string(x) + " is not a finite number";
    }
    if (col.transform == NumericTransform::kLog1p) x = std::log1p(std::max(x, 0.0));
    if (std::fabs(x) > std::numeric_limits<float>::max()) return column(c) + " is outside the float range";
    v = static_cast<float>(x);
    return "";
  }

  std::string categorical(size_t c, CtrRecord& out, size_t k) const {
    const SchemaColumn& col = schema_.columns[c];
    if (arrays_[c]->IsNull(row_)) {
      out.ids[k] = kCriteoMissingId;
      out.counts[k] = 1;
      return "";
    }
    int64_t i = row_;
    const arrow::Array& a = resolve(*arrays_[c], i);
    if (!is_list_type(a.type_id())) {
      const std::string_view text = value_text(a, i, scratch_);
      const std::string problem = schema_categorical(col, text, out, k);
      return problem.empty() ? "" : column(c) + " " + quote_field(text) + problem;
    }
    return list(c, a, i, out, k);
  }

  // A list value: each element one ID; an empty list is the missing ID (as an empty field).
  std::string list(size_t c, const arrow::Array& a, int64_t i, CtrRecord& out, size_t k) const {
    const SchemaColumn& col = schema_.columns[c];
    int64_t begin = 0, n = 0;
    std::shared_ptr<arrow::Array> values;
    if (a.type_id() == Type::LIST) {
      const auto& l = static_cast<const arrow::ListArray&>(a);
      begin = l.value_offset(i), n = l.value_length(i), values = l.values();
    } else {
      const auto& l = static_cast<const arrow::LargeListArray&>(a);
      begin = l.value_offset(i), n = l.value_length(i), values = l.values();
    }
    out.counts[k] = 1;
    out.ids[k] = kCriteoMissingId;
    if (n == 0) return "";
    if (static_cast<size_t>(n) > kSchemaMaxIds) {
      return column(c) + " lists " + std::to_string(n) + " values, more than " +
             std::to_string(kSchemaMaxIds) + " (the most one field may hold)";
    }
    const size_t first = out.lists.size();
    for (int64_t e = 0; e < n; ++e) {
      if (values->IsNull(begin + e))
        return column(c) + ": value " + std::to_string(e + 1) + " of " + std::to_string(n) + " is null";
      int64_t at = begin + e;
      const arrow::Array& v = resolve(*values, at);
      const std::string problem = append_list_id(col, value_text(v, at, scratch_), static_cast<size_t>(e + 1),
                                                 static_cast<size_t>(n), "", out);
      if (!problem.empty()) return column(c) + problem;
    }
    out.ids[k] = out.lists[first];
    out.counts[k] = static_cast<uint32_t>(n);
    if (n == 1) out.lists.resize(first);  // one value is a field of one ID, as in a text file
    return "";
  }

  std::string path_;
  const FeatureSchema& schema_;
  std::unique_ptr<parquet::arrow::FileReader> reader_;  // outlives batches_
  std::shared_ptr<arrow::Schema> file_schema_;
  std::vector<int> fields_;  // per schema column its field in the file, or -1
  std::unique_ptr<arrow::RecordBatchReader> batches_;
  std::shared_ptr<arrow::RecordBatch> batch_;
  std::vector<std::shared_ptr<arrow::Array>> arrays_;  // per schema column, the batch's (or null)
  int64_t row_ = 0;
  uint64_t number_ = 0;
  bool labelled_ = false;
  mutable std::string scratch_;
};

}  // namespace

bool parquet_built() { return true; }

std::unique_ptr<CtrRows> parquet_rows(const std::string& path, const FeatureSchema& schema) {
  return std::make_unique<ParquetRows>(path, schema);
}

}  // namespace pstrain
