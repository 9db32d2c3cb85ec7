// A data set of class labels 0 and 1 (Criteo's clicks) seen as one float target per record, for
// a CTR model with one output trained with --loss bce (docs/sparse.md, "Training a CTR model"):
// p(click) = sigmoid(output). The wrapped set's features, labels and categorical IDs pass through.
#pragma once

#include <memory>
#include <string>

#include "worker/data/dataset.h"

namespace pstrain {

// target_width() 1, num_classes() 1 (the model's outputs), read_targets() each record's label as
// 0.0f or 1.0f; read() still fills the labels. `labelled` must have labels 0 and 1 only
// (num_classes() 2); otherwise throws pstrain::UsageError naming `source`.
std::unique_ptr<Dataset> click_targets(std::unique_ptr<Dataset> labelled, const std::string& source);

}  // namespace pstrain
