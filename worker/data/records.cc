#include "worker/data/records.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "shared/util/error.h"

namespace pstrain {

LabelCheck::LabelCheck(const LabelRange& range, std::string file, std::function<std::string(uint64_t)> where)
    : range_(range), file_(std::move(file)), where_(std::move(where)) {}

std::string LabelCheck::problem(int64_t label, uint64_t index) const {
  if (label >= 0 && label < (range_.classes > 0 ? range_.classes : kMaxClasses)) return "";
  const std::string at = file_ + ": label " + std::to_string(label) + " of " + where_(index);
  if (label < 0) return at + " is negative (labels are class indices 0, 1, ...)";
  if (range_.classes > 0 && label >= range_.classes) {
    return at + " is not in [0, " + std::to_string(range_.classes) + ")" +
           (range_.origin.empty() ? "" : " (" + range_.origin + ")");
  }
  if (label >= kMaxClasses) {
    return at + " is too large: at most " + std::to_string(kMaxClasses) + " classes are supported";
  }
  return "";
}

void LabelCheck::add(int64_t label, uint64_t index) {
  const std::string message = problem(label, index);
  if (!message.empty()) throw Error(message);
  max_ = std::max(max_, label);
}

int LabelCheck::classes() const {
  if (range_.classes > 0) return range_.classes;
  return static_cast<int>(std::max<int64_t>(max_ + 1, 2));
}

std::array<float, 256> uint8_scale_table(double scale) {
  // float(v * (1.0 / 255)) equals v / 255.0f for every v, so IDX's values are unchanged.
  const double s = scale == 0 ? 1.0 / 255 : scale;
  std::array<float, 256> table{};
  for (int v = 0; v < 256; ++v) table[static_cast<size_t>(v)] = static_cast<float>(v * s);
  return table;
}

void check_target(double value, const TargetRule& rule, const std::string& file, uint64_t record, size_t k,
                  size_t width) {
  // float32 in training: a double beyond its range would become infinite there.
  const bool finite = std::isfinite(value) && std::fabs(value) <= FLT_MAX;
  if (finite && (!rule.binary || value == 0 || value == 1)) return;
  std::string v = std::to_string(value);
  v.erase(v.find_last_not_of('0') + 1);
  if (!v.empty() && v.back() == '.') v.pop_back();
  if (!std::isfinite(value)) v = std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
  throw UsageError(file + ": target " + v + " of record " + std::to_string(record) +
                   (width > 1 ? " (value " + std::to_string(k) + " of its " + std::to_string(width) + ")" : "") +
                   (finite ? " is not 0 or 1 (" + rule.loss + " takes multi-label 0/1 targets)"
                           : " is not a finite float32 (" + rule.loss + ")"));
}

}  // namespace pstrain
