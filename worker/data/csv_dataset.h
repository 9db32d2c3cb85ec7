// A data set of one CSV file (docs/data.md, "CSV"): one record a row, the label in one column,
// the other columns the features, in order.
#pragma once

#include <memory>
#include <string>

#include "worker/data/dataset.h"
#include "worker/data/records.h"

namespace pstrain {

// `label_column`: a header name, else a 0-based index; "" is the last column (a name is looked
// up first, so a header column named "2" is found by that name). The file is parsed once into a
// cache file in cache_dir (worker/data/csv_table.h); every label is then checked against
// `labels_range` by streaming the cache once. sample_shape() is {columns - 1}. Throws
// pstrain::UsageError for a label column the file does not have, and pstrain::Error naming the
// file, line and column of any problem with the data (a label must be an integer).
std::unique_ptr<Dataset> open_csv_dataset(const std::string& path, const std::string& label_column,
                                          const std::string& cache_dir, const LabelRange& labels_range);

// The same with float targets instead of a label (--loss bce | mse | huber): `label_column` names
// one or more target columns, "a,b,..." (each a name or a 0-based index; "": the last column),
// the other columns being the features in order; each target is checked at open against `rule`
// (pstrain::UsageError naming the file, line and value). target_width() is the number of target
// columns.
std::unique_ptr<Dataset> open_csv_target_dataset(const std::string& path, const std::string& label_column,
                                                 const std::string& cache_dir, const TargetRule& rule);
// The target columns "a,b,..." names (1 for "").
size_t csv_target_count(const std::string& label_column);

}  // namespace pstrain
