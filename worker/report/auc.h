// Metrics of a binary classifier (CTR models): the exact ROC AUC and the log loss.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pstrain {

// The exact area under the ROC curve of `scores` (higher: more likely positive) for `labels`:
// the fraction of (positive, negative) pairs the scores rank correctly, a tie counting 1/2
// (the Mann-Whitney U statistic over P * N). O(n log n), exact integer pair counts. NaN when all
// labels are equal (or n is 0) and when a score is NaN. Throws pstrain::Error, naming the
// record, for a label other than 0 or 1.
double exact_auc(const float* scores, const int32_t* labels, size_t n);

// The mean binary cross-entropy -(y log p + (1 - y) log(1 - p)) of probabilities `p`, each clamped
// to [1e-7, 1 - 1e-7], computed in double. NaN for n 0. Throws pstrain::Error for a label other
// than 0 or 1.
double binary_logloss(const float* p, const int32_t* labels, size_t n);

}  // namespace pstrain
