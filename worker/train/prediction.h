// --predict: the class probabilities of a saved model for every record of a data set, as a
// float32 .npy array of shape (records, classes) or a CSV file (docs/models.md).
#pragma once

#include <cstdint>
#include <string>

#include "worker/data/open.h"
#include "worker/train/evaluation.h"

namespace pstrain {

// What --predict needs (filled from the job's flags in main: worker/options_from_job.h).
struct PredictOptions {
  EvaluateOptions model;  // --init-params and the model flags, the device
  DataOptions data;       // data.test_data: --predict's INPUT (any form --test-data takes)
  std::string output;     // --predictions: OUT.npy or OUT.csv
};

struct PredictionSummary {
  size_t records = 0;
  int classes = 0;
  int64_t correct = 0;  // records whose most probable class is their label
};

// Loads the model, writes the softmax of its logits for every record of the input to `output`
// (atomically) and prints where and how many on stdout. Throws pstrain::Error.
PredictionSummary predict_saved_model(const PredictOptions& options);

}  // namespace pstrain
