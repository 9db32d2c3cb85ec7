// Opening the job's training and test data from its options: --train-data / --test-data (.npy
// pairs, IDX pairs, CSV), else the IDX files of --data-dir (docs/data.md).
#pragma once

#include <memory>
#include <string>

#include "shared/config/options.h"
#include "worker/data/dataset.h"

namespace pstrain {

// The training set. Throws pstrain::Error naming the file and what is wrong.
std::unique_ptr<Dataset> open_training_data(const JobOptions& o);
// The test set, whose labels must be below `classes` (the training set's num_classes()) and
// whose records must have the training set's sample_shape() (checked from the training files'
// headers; not under --evaluate, which has no training set). Throws pstrain::Error naming the
// file and what is wrong.
std::unique_ptr<Dataset> open_test_data(const JobOptions& o, int classes);
// Where the training data comes from, for the worker's log ("directory D", "F,L", "file.csv").
std::string training_data_source(const JobOptions& o);

}  // namespace pstrain
