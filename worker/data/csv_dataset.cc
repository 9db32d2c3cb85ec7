#include "worker/data/csv_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "shared/util/error.h"
#include "worker/data/csv_table.h"

namespace pstrain {
namespace {

constexpr size_t kCheckFloats = (size_t{1} << 20) / sizeof(float);  // floats streamed per pread at open

// Streams every row of `table` once, kCheckFloats at a time: f(row index, its columns' values).
template <typename F>
void for_each_row(const CsvTable& table, F f) {
  const uint64_t per_chunk = std::max<uint64_t>(1, kCheckFloats / table.columns());
  std::vector<float> rows(per_chunk * table.columns());
  for (uint64_t first = 0; first < table.rows(); first += per_chunk) {
    const uint64_t n = std::min(per_chunk, table.rows() - first);
    table.read_rows(first, n, rows.data());
    for (uint64_t r = 0; r < n; ++r) f(first + r, &rows[r * table.columns()]);
  }
}

std::string value_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// The label's column: a header name, else a 0-based index, else (empty) the last column.
size_t label_column_of(const CsvTable& table, const std::string& spec) {
  if (spec.empty()) return table.columns() - 1;
  const auto& names = table.names();
  const auto count = std::count(names.begin(), names.end(), spec);
  if (count > 1) {
    throw UsageError("--label-column '" + spec + "': " + table.path() + " has " + std::to_string(count) +
                     " columns of that name; give a 0-based index");
  }
  if (count == 1) return static_cast<size_t>(std::find(names.begin(), names.end(), spec) - names.begin());
  if (spec.size() <= 9 && spec.find_first_not_of("0123456789") == std::string::npos) {
    const size_t index = std::stoul(spec);
    if (index < table.columns()) return index;
    throw UsageError("--label-column " + spec + ": " + table.path() + " has " +
                     std::to_string(table.columns()) + " columns (0 to " +
                     std::to_string(table.columns() - 1) + ")");
  }
  std::string listed;
  for (size_t c = 0; c < names.size() && c < 12; ++c) listed += (c > 0 ? ", '" : "'") + names[c] + "'";
  if (names.size() > 12) listed += ", ...";
  throw UsageError(
      "--label-column '" + spec + "': " + table.path() + " has no column of that name" +
      (names.empty() ? " (it has no header row; give a 0-based index)" : " (its columns: " + listed + ")"));
}

class CsvDataset final : public Dataset {
 public:
  CsvDataset(const std::string& path, const std::string& label_column, const std::string& cache_dir,
             const LabelRange& range)
      : table_(path, cache_dir), label_(label_column_of(table_, label_column)) {
    if (const uint64_t line = table_.first_non_integer_line(label_)) {
      float row_label = 0;
      std::vector<float> row(table_.columns());
      table_.read_rows(line - table_.line_of(0), 1, row.data());
      row_label = row[label_];
      throw Error(table_.path() + " line " + std::to_string(line) + ", " + table_.column_text(label_) +
                  ": label " + value_text(row_label) +
                  " is not an integer (labels are class indices 0, 1, ...)");
    }
    check_labels(range);
  }

  size_t size() const override { return table_.rows(); }
  size_t feature_dim() const override { return table_.columns() - 1; }
  int num_classes() const override { return classes_; }

  void read(const size_t* records, size_t count, float* features, int32_t* labels) const override {
    std::vector<float> row(table_.columns());
    const size_t dim = feature_dim();
    for (size_t i = 0; i < count; ++i) {
      if (records[i] >= size()) {
        throw Error(table_.path() + ": record " + std::to_string(records[i]) + " out of range (" +
                    std::to_string(size()) + " records)");
      }
      table_.read_rows(records[i], 1, row.data());
      float* out = features + i * dim;
      std::copy(row.begin(), row.begin() + static_cast<long>(label_), out);
      std::copy(row.begin() + static_cast<long>(label_) + 1, row.end(), out + label_);
      const float label = row[label_];
      if (!(label >= 0 && label < static_cast<float>(classes_))) {
        throw Error(table_.path() + " line " + std::to_string(table_.line_of(records[i])) + ": label " +
                    value_text(label) + " is not in [0, " + std::to_string(classes_) +
                    ") (the cache file changed after it was opened?)");
      }
      labels[i] = static_cast<int32_t>(label);
    }
  }

 private:
  // Streams the label column once so that a bad label is reported at open, naming its line.
  void check_labels(const LabelRange& range) {
    LabelCheck check(range, table_.path(), [this](uint64_t row) {
      return "line " + std::to_string(table_.line_of(row)) + ", " + table_.column_text(label_);
    });
    for_each_row(table_, [&](uint64_t row, const float* values) {
      const float v = values[label_];
      check.add(v >= 9.2e18f ? INT64_MAX : static_cast<int64_t>(v), row);  // integral: checked above
    });
    classes_ = check.classes();
  }

  CsvTable table_;
  size_t label_;
  int classes_ = 0;
};

// The target columns of --label-column "a,b,..." (each a name or an index; "": the last column),
// in the order given, each once.
std::vector<size_t> target_columns_of(const CsvTable& table, const std::string& spec) {
  std::vector<size_t> columns;
  size_t from = 0;
  do {
    const size_t comma = std::min(spec.find(',', from), spec.size());
    const size_t c = label_column_of(table, spec.substr(from, comma - from));
    if (std::find(columns.begin(), columns.end(), c) != columns.end()) {
      throw UsageError("--label-column '" + spec + "': " + table.column_text(c) + " of " + table.path() +
                       " is named twice");
    }
    columns.push_back(c);
    from = comma + 1;
  } while (from <= spec.size() && !spec.empty());
  if (columns.size() >= table.columns()) {
    throw UsageError("--label-column '" + spec + "': all " + std::to_string(table.columns()) + " columns of " +
                     table.path() + " would be targets, leaving no features");
  }
  return columns;
}

// Float targets (--loss bce | mse | huber): the columns of --label-column, the others the features.
class CsvTargetDataset final : public Dataset {
 public:
  CsvTargetDataset(const std::string& path, const std::string& label_column, const std::string& cache_dir,
                   const TargetRule& rule)
      : table_(path, cache_dir), targets_(target_columns_of(table_, label_column)), is_target_(table_.columns()) {
    for (size_t c : targets_) is_target_[c] = true;
    check_targets(rule);
  }

  size_t size() const override { return table_.rows(); }
  size_t feature_dim() const override { return table_.columns() - targets_.size(); }
  int num_classes() const override { return static_cast<int>(targets_.size()); }
  size_t target_width() const override { return targets_.size(); }
  std::string target_source() const override {
    std::string names;
    for (size_t c : targets_) names += (names.empty() ? "" : ", ") + table_.column_text(c);
    return table_.path() + " (" + std::to_string(targets_.size()) + " target column" +
           (targets_.size() > 1 ? "s: " : ": ") + names + ")";
  }

  void read(const size_t* records, size_t count, float* features, int32_t* labels) const override {
    std::vector<float> row(table_.columns());
    for (size_t i = 0; i < count; ++i) {
      read_row(records[i], row.data());
      float* out = features + i * feature_dim();
      for (size_t c = 0; c < row.size(); ++c) {
        if (!is_target_[c]) *out++ = row[c];
      }
      labels[i] = 0;
    }
  }

  void read_targets(const size_t* records, size_t count, float* targets) const override {
    std::vector<float> row(table_.columns());
    for (size_t i = 0; i < count; ++i) {
      read_row(records[i], row.data());
      for (size_t k = 0; k < targets_.size(); ++k) targets[i * targets_.size() + k] = row[targets_[k]];
    }
  }

 private:
  void read_row(size_t record, float* row) const {
    if (record >= size()) {
      throw Error(table_.path() + ": record " + std::to_string(record) + " out of range (" +
                  std::to_string(size()) + " records)");
    }
    table_.read_rows(record, 1, row);
  }

  // Streams the target columns once so that a bad value is reported at open, naming its line.
  void check_targets(const TargetRule& rule) const {
    for_each_row(table_, [&](uint64_t row, const float* values) {
      for (size_t k = 0; k < targets_.size(); ++k) {
        check_target(values[targets_[k]], rule, table_.path() + " line " + std::to_string(table_.line_of(row)), row, k,
                     targets_.size());
      }
    });
  }

  CsvTable table_;
  std::vector<size_t> targets_;
  std::vector<bool> is_target_;
};

}  // namespace

size_t csv_target_count(const std::string& label_column) {
  return static_cast<size_t>(std::count(label_column.begin(), label_column.end(), ',')) + 1;
}

std::unique_ptr<Dataset> open_csv_target_dataset(const std::string& path, const std::string& label_column,
                                                 const std::string& cache_dir, const TargetRule& rule) {
  return std::make_unique<CsvTargetDataset>(path, label_column, cache_dir, rule);
}

std::unique_ptr<Dataset> open_csv_dataset(const std::string& path, const std::string& label_column,
                                          const std::string& cache_dir, const LabelRange& labels_range) {
  return std::make_unique<CsvDataset>(path, label_column, cache_dir, labels_range);
}

}  // namespace pstrain
