#include "worker/report/auc.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "shared/util/error.h"

namespace pstrain {
namespace {

void check_labels(const int32_t* labels, size_t n, const char* what) {
  for (size_t i = 0; i < n; ++i) {
    if (labels[i] != 0 && labels[i] != 1) {
      throw Error(std::string(what) + ": record " + std::to_string(i) + " has label " +
                  std::to_string(labels[i]) + ", not 0 or 1");
    }
  }
}

}  // namespace

double exact_auc(const float* scores, const int32_t* labels, size_t n) {
  check_labels(labels, n, "AUC");
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::pair<float, int32_t>> ranked(n);
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(scores[i])) return kNaN;
    ranked[i] = {scores[i], labels[i]};
  }
  std::sort(ranked.begin(), ranked.end(),
            [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
              return a.first < b.first;
            });
  // Twice the Mann-Whitney U: per group of tied scores, 2 per (positive, lower negative) pair
  // plus 1 per (positive, tied negative) pair. Fits in 64 bits for n < 2^32.
  uint64_t twice_u = 0, negatives_below = 0, positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    uint64_t pos = 0, neg = 0;
    for (; j < n && ranked[j].first == ranked[i].first; ++j) (ranked[j].second == 1 ? pos : neg)++;
    twice_u += 2 * pos * negatives_below + pos * neg;
    negatives_below += neg;
    positives += pos;
    i = j;
  }
  if (positives == 0 || negatives_below == 0) return kNaN;
  return static_cast<double>(twice_u) /
         (2.0 * static_cast<double>(positives) * static_cast<double>(negatives_below));
}

double binary_logloss(const float* p, const int32_t* labels, size_t n) {
  check_labels(labels, n, "log loss");
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  constexpr double kEps = 1e-7;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const double q = std::clamp(static_cast<double>(p[i]), kEps, 1.0 - kEps);
    sum -= labels[i] == 1 ? std::log(q) : std::log1p(-q);
  }
  return sum / static_cast<double>(n);
}

}  // namespace pstrain
