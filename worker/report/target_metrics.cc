#include "worker/report/target_metrics.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "worker/backend/loss_math.h"
#include "worker/report/progress.h"

namespace pstrain {

TargetMetrics::TargetMetrics(Loss loss, float huber_delta, size_t width)
    : loss_(loss), delta_(huber_delta), width_(width), sum_(width, 0.0), sum_sq_(width, 0.0) {}

void TargetMetrics::add(const float* outputs, const float* targets, size_t rows) {
  for (size_t r = 0; r < rows; ++r) {
    double loss = 0;
    bool all_right = true;
    for (size_t k = 0; k < width_; ++k) {
      const float z = outputs[r * width_ + k], t = targets[r * width_ + k];
      loss += element_loss(loss_, z, t, delta_);
      const double d = static_cast<double>(z) - t;
      sq_err_ += d * d;
      abs_err_ += std::fabs(d);
      sum_[k] += t;
      sum_sq_[k] += static_cast<double>(t) * t;
      const bool right = (z >= 0) == (t >= 0.5f);
      right_ += right;
      all_right = all_right && right;
    }
    loss_sum_ += loss / static_cast<double>(width_);
    exact_ += all_right;
    ++samples_;
  }
}

double TargetMetrics::rmse() const {
  return samples_ == 0 ? 0 : std::sqrt(sq_err_ / static_cast<double>(samples_ * width_));
}
double TargetMetrics::mae() const { return samples_ == 0 ? 0 : abs_err_ / static_cast<double>(samples_ * width_); }

double TargetMetrics::r2() const {
  double sst = 0;
  const double n = static_cast<double>(samples_);
  for (size_t k = 0; k < width_; ++k) sst += sum_sq_[k] - sum_[k] * sum_[k] / n;
  return sst > 0 ? 1 - sq_err_ / sst : std::numeric_limits<double>::quiet_NaN();
}

double TargetMetrics::label_accuracy() const {
  return samples_ == 0 ? 0 : static_cast<double>(right_) / static_cast<double>(samples_ * width_);
}
double TargetMetrics::exact_match() const {
  return samples_ == 0 ? 0 : static_cast<double>(exact_) / static_cast<double>(samples_);
}

void TargetMetrics::fill(TrainSummary* s) const {
  s->loss = loss_;
  s->test_loss = samples_ == 0 ? 0 : loss_sum_ / static_cast<double>(samples_);
  if (loss_ == Loss::kBce) {
    s->test_label_accuracy = label_accuracy();
    s->test_exact_match = exact_match();
  } else {
    s->test_rmse = rmse();
    s->test_mae = mae();
    s->test_r2 = r2();
  }
}

std::string target_metrics_text(const TrainSummary& s, bool summary_keys) {
  const auto item = [summary_keys](const char* name, double value) {
    return summary_keys ? std::string(" test_") + name + "=" + fixed(value, 4) : std::string(" ") + name + " " + fixed(value, 4);
  };
  if (s.loss == Loss::kBce) {
    return summary_keys ? item("label_accuracy", s.test_label_accuracy) + item("exact_match", s.test_exact_match)
                        : item("label_acc", s.test_label_accuracy) + item("exact", s.test_exact_match);
  }
  if (s.loss == Loss::kMse || s.loss == Loss::kHuber) {
    return item("rmse", s.test_rmse) + item("mae", s.test_mae) + item("r2", s.test_r2);
  }
  return "";
}

void add_target_metrics(const TrainSummary& s, nlohmann::ordered_json* r) {
  if (s.loss == Loss::kBce) {
    (*r)["test_label_accuracy"] = s.test_label_accuracy;
    (*r)["test_exact_match"] = s.test_exact_match;
  } else if (s.loss == Loss::kMse || s.loss == Loss::kHuber) {
    (*r)["test_rmse"] = s.test_rmse;
    (*r)["test_mae"] = s.test_mae;
    if (std::isfinite(s.test_r2)) (*r)["test_r2"] = s.test_r2;
  }
}

}  // namespace pstrain
