// The test-set figures of a loss of float targets (--loss bce | mse | huber; docs/models.md,
// "Losses"), from the model's outputs and the targets on the host: the loss (worker/backend/loss_math.h's,
// in double), RMSE, MAE and R^2 for regression, per-label accuracy and exact match for bce; and
// how the chief's lines and records show them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/util/modes.h"

namespace pstrain {

struct TrainSummary;

class TargetMetrics {
 public:
  TargetMetrics(Loss loss, float huber_delta, size_t width);

  // outputs and targets: rows x width, host memory.
  void add(const float* outputs, const float* targets, size_t rows);

  uint64_t samples() const { return samples_; }
  double loss_sum() const { return loss_sum_; }  // the samples' losses summed (each the mean over its width)
  // sqrt and mean of the squared and absolute errors over every value.
  double rmse() const;
  double mae() const;
  // 1 - SSE / SST with SST summed over the columns, each about its own mean (scikit-learn's
  // r2_score(multioutput='variance_weighted'); for one column the plain R^2). NaN when every
  // target of every column is the same.
  double r2() const;
  // bce: an output predicts 1 where it is >= 0 (sigmoid >= 0.5). The fraction of values
  // predicted right, and of records with all of theirs right.
  double label_accuracy() const;
  double exact_match() const;
  // Sets summary->test_loss and the figures of this loss.
  void fill(TrainSummary* summary) const;

 private:
  Loss loss_;
  float delta_;
  size_t width_;
  uint64_t samples_ = 0, right_ = 0, exact_ = 0;
  double loss_sum_ = 0, sq_err_ = 0, abs_err_ = 0;
  std::vector<double> sum_, sum_sq_;  // per column: the targets' sum and sum of squares
};

// " rmse 0.1234 mae 0.0987 r2 0.9012" (mse, huber) or " label_acc 0.9 exact 0.6" (bce) after an
// epoch line's test loss; "" for softmax. `summary_keys`: the summary line's form instead
// (" test_rmse=0.1234 test_mae=... test_r2=...", " test_label_accuracy=... test_exact_match=...").
std::string target_metrics_text(const TrainSummary& s, bool summary_keys);
// The same figures as fields of a metrics record: test_rmse, test_mae, test_r2 or
// test_label_accuracy, test_exact_match (TensorBoard: test/rmse, ...).
void add_target_metrics(const TrainSummary& s, nlohmann::ordered_json* record);

}  // namespace pstrain
