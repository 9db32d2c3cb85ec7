#include "worker/data/open.h"

#include "shared/config/data_files.h"
#include "shared/util/error.h"
#include "worker/data/click_targets.h"
#include "worker/data/criteo.h"
#include "worker/data/criteo_dataset.h"
#include "worker/data/csv_dataset.h"
#include "worker/data/csv_table.h"
#include "worker/data/idx.h"
#include "worker/data/npy_dataset.h"
#include "worker/data/npy_format.h"
#include "worker/data/schema_dataset.h"

namespace pstrain {
namespace {

constexpr int kIdxClasses = 10;  // IDX data without --classes: Fashion-MNIST's 10

std::string data_dir(const DataOptions& o) { return o.data_dir.empty() ? default_data_dir() : o.data_dir; }
std::string cache_dir(const DataOptions& o) {
  return o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
}

TargetRule target_rule(const DataOptions& o) {
  return TargetRule{o.loss == Loss::kBce, std::string("--loss ") + loss_name(o.loss)};
}

// A CTR file without its label column is input to --predict only.
std::unique_ptr<Dataset> with_labels(std::unique_ptr<Dataset> data, const DataOptions& o, const std::string& flag,
                                     const std::string& file) {
  if (data->labelled() || o.predict) return data;
  throw Error(flag + " " + file + ": has no label column (" +
              (o.schema.empty() ? "39 fields, Criteo's without the label" : "the schema's label column is absent") +
              "): such a file can be scored (--init-params DIR --predict " + file +
              " --predictions OUT.csv) but not trained on or evaluated");
}

std::unique_ptr<Dataset> open_target_files(const DataFiles& f, const DataOptions& o, const std::string& flag) {
  if (f.format == DataKind::kNpy) return open_npy_target_dataset(f.features, f.labels, cache_dir(o), o.scale, target_rule(o));
  if (f.format == DataKind::kCsv) return open_csv_target_dataset(f.features, o.label_column, cache_dir(o), target_rule(o));
  if (f.format == DataKind::kCriteo && o.loss == Loss::kBce) {  // a CTR model of one output, p(click)
    return click_targets(open_criteo_dataset(f.features, cache_dir(o), o.skip_bad_lines, LabelRange{}), f.features);
  }
  if (f.format == DataKind::kSchema && o.loss == Loss::kBce) {
    return click_targets(
        open_schema_dataset(f.features, load_feature_schema(o.schema), cache_dir(o), o.skip_bad_lines, LabelRange{}),
        f.features);
  }
  throw UsageError(std::string("--loss ") + loss_name(o.loss) + " needs float targets: " + flag + " " +
                   f.features + " is " + (f.format == DataKind::kCriteo ? "Criteo" : f.format == DataKind::kSchema ? "--schema's CTR" : "IDX") +
                   " data, which has class labels only; give FEATURES.npy,TARGETS.npy or a .csv file (docs/data.md, "
                   "\"Targets\")" + (f.format == DataKind::kCriteo ? "; a CTR model trains with --loss bce (one output) or softmax" : ""));
}

std::unique_ptr<Dataset> open_files(const DataFiles& f, const DataOptions& o, const LabelRange& range) {
  switch (f.format) {
    case DataKind::kNpy: return open_npy_dataset(f.features, f.labels, cache_dir(o), o.scale, range);
    case DataKind::kCsv: return open_csv_dataset(f.features, o.label_column, cache_dir(o), range);
    case DataKind::kCriteo: return open_criteo_dataset(f.features, cache_dir(o), o.skip_bad_lines, range);
    case DataKind::kSchema:
      return open_schema_dataset(f.features, load_feature_schema(o.schema), cache_dir(o), o.skip_bad_lines, range);
    case DataKind::kIdx: break;
  }
  return Dataset::open_idx(f.features, f.labels, cache_dir(o),
                           range.classes > 0 ? range.classes : kIdxClasses, o.scale);
}

// The training records' shape from the headers alone (the training set was opened and checked
// before; this does not stream it again).
std::vector<size_t> training_sample_shape(const DataOptions& o) {
  if (o.train_data.empty()) {
    return Dataset::open_mnist_dir(data_dir(o), "train", cache_dir(o),
                                   o.classes > 0 ? o.classes : kIdxClasses, o.scale)
        ->sample_shape();
  }
  const DataFiles f = parse_data_files(o.train_data, "--train-data", o.data_format);
  if (f.format == DataKind::kCriteo) return {kCriteoDense};
  if (f.format == DataKind::kSchema) return {load_feature_schema(o.schema).dense()};
  if (f.format == DataKind::kNpy) return npy_sample_shape(f.features, cache_dir(o));
  if (f.format == DataKind::kCsv) {
    const size_t targets = o.loss == Loss::kSoftmax ? 1 : csv_target_count(o.label_column);
    return {CsvTable(f.features, cache_dir(o)).columns() - targets};
  }
  const IdxFile images(f.features, cache_dir(o), 3);
  return {1, images.dims()[1], images.dims()[2]};
}

void check_test_shape(const DataOptions& o, const Dataset& test) {
  if (o.evaluate) return;
  const std::vector<size_t> expected = training_sample_shape(o);
  if (test.sample_shape() != expected) {
    throw Error("test data " + (o.test_data.empty() ? data_dir(o) + " (t10k)" : o.test_data) + ": records of shape " +
                shape_text(test.sample_shape()) + ", but the training data's (" + training_data_source(o) + ") are " +
                shape_text(expected));
  }
}

std::unique_ptr<Dataset> open_target_test_data(const DataOptions& o, int width) {
  if (o.test_data.empty()) {
    throw UsageError(std::string("--loss ") + loss_name(o.loss) +
                     " needs float targets: give --test-data FEATURES.npy,TARGETS.npy or a .csv file too");
  }
  std::unique_ptr<Dataset> test =
      with_labels(open_target_files(parse_data_files(o.test_data, "--test-data", o.data_format), o, "--test-data"), o,
                  o.predict ? "--predict" : "--test-data", o.test_data);
  if (test->target_width() != static_cast<size_t>(width)) {
    throw UsageError("--test-data: " + test->target_source() + " has " + std::to_string(test->target_width()) +
                     " targets per record, but the model gives " + std::to_string(width) +
                     (o.evaluate ? "" : " (the training data's width)"));
  }
  check_test_shape(o, *test);
  return test;
}

}  // namespace

std::unique_ptr<Dataset> open_training_data(const DataOptions& o) {
  if (o.loss != Loss::kSoftmax) {
    if (o.train_data.empty()) {
      throw UsageError(std::string("--loss ") + loss_name(o.loss) +
                       " needs float targets: give --train-data FEATURES.npy,TARGETS.npy or a .csv file (--data-dir's "
                       "IDX files have class labels only)");
    }
    return with_labels(open_target_files(parse_data_files(o.train_data, "--train-data", o.data_format), o, "--train-data"),
                       o, "--train-data", o.train_data);
  }
  if (o.train_data.empty()) {
    return Dataset::open_mnist_dir(data_dir(o), "train", cache_dir(o),
                                   o.classes > 0 ? o.classes : kIdxClasses, o.scale);
  }
  const LabelRange range{o.classes, o.classes > 0 ? "--classes " + std::to_string(o.classes) : ""};
  return with_labels(open_files(parse_data_files(o.train_data, "--train-data", o.data_format), o, range), o,
                     "--train-data", o.train_data);
}

std::unique_ptr<Dataset> open_test_data(const DataOptions& o, int classes) {
  const LabelRange range{classes, o.classes > 0 ? "--classes " + std::to_string(o.classes)
                                  : o.evaluate  ? "the classes of the model in --init-params"
                                                : "the training set's classes; --classes sets their number"};
  if (o.loss != Loss::kSoftmax) return open_target_test_data(o, classes);
  std::unique_ptr<Dataset> test =
      o.test_data.empty() ? Dataset::open_mnist_dir(data_dir(o), "t10k", cache_dir(o), classes, o.scale)
                          : with_labels(open_files(parse_data_files(o.test_data, "--test-data", o.data_format), o, range),
                                        o, o.predict ? "--predict" : "--test-data", o.test_data);
  if (!o.evaluate) {
    const std::vector<size_t> expected = training_sample_shape(o);
    if (test->sample_shape() != expected) {
      throw Error("test data " + (o.test_data.empty() ? data_dir(o) + " (t10k)" : o.test_data) +
                  ": records of shape " + shape_text(test->sample_shape()) + ", but the training data's (" +
                  training_data_source(o) + ") are " + shape_text(expected));
    }
  }
  return test;
}

std::string training_data_source(const DataOptions& o) {
  return o.train_data.empty() ? data_dir(o) : o.train_data;
}

}  // namespace pstrain
