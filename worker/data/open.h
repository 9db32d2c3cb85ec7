// Opening the job's training and test data from its options: --train-data / --test-data (.npy
// pairs, IDX pairs, CSV, Criteo TSV), else the IDX files of --data-dir (docs/data.md).
#pragma once

#include <memory>
#include <string>

#include "shared/util/modes.h"
#include "worker/data/dataset.h"

namespace pstrain {

// The data flags (filled from the job's flags in main: worker/options_from_job.h).
struct DataOptions {
  std::string data_dir;      // --data-dir: IDX files; empty: $FASHION_MNIST_DIR or Debian's package dir
  std::string cache_dir;     // --cache-dir: uncompressed data cache; empty: $XDG_CACHE_HOME/pstrain
  std::string train_data;    // --train-data FEATURES,LABELS (.npy or IDX) or one .csv; empty: data_dir's IDX
  std::string test_data;     // --test-data: the same for the test set
  double scale = 0;          // --scale: uint8 features are multiplied by this (0: 1/255)
  std::string label_column;  // --label-column: CSV: the label's column, by name or 0-based index ("": last)
  std::string data_format = "auto";  // --data-format: auto (by extension) | criteo; "schema" with --schema
  std::string schema;                // --schema: a JSON feature schema file or "criteo" (docs/data.md)
  bool skip_bad_lines = false;       // --skip-bad-lines: Criteo lines that do not parse are skipped and counted
  int classes = 0;           // --classes: number of classes (0: from the training labels; 10 for IDX)
  bool evaluate = false;     // --evaluate: no training set (the test set is checked against the model)
  bool predict = false;      // --predict: the test set may lack labels (a CTR file without its label column)
  // --loss: other than softmax, the labels file (.npy) or --label-column's columns (CSV) are float
  // targets (docs/data.md, "Targets"); IDX and Criteo data have none
  Loss loss = Loss::kSoftmax;
};

// The training set. Throws pstrain::Error naming the file and what is wrong.
std::unique_ptr<Dataset> open_training_data(const DataOptions& o);
// With float targets (o.loss not softmax): the test set's targets must be `classes` wide, the
// training set's width (pstrain::UsageError naming both files and shapes).
// The test set, whose labels must be below `classes` (the training set's num_classes()) and
// whose records must have the training set's sample_shape() (checked from the training files'
// headers; not under --evaluate, which has no training set). Throws pstrain::Error naming the
// file and what is wrong.
std::unique_ptr<Dataset> open_test_data(const DataOptions& o, int classes);
// Where the training data comes from, for the worker's log ("directory D", "F,L", "file.csv").
std::string training_data_source(const DataOptions& o);

}  // namespace pstrain
