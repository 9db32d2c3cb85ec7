// What the data readers share: the label rule (docs/data.md, "Classes") and uint8 scaling.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>

namespace pstrain {

// The labels a data set accepts: integers in [0, classes); classes 0 means "from the data":
// any label >= 0, the set's num_classes() then being its largest label + 1 (at least 2).
struct LabelRange {
  int classes = 0;
  std::string origin;  // why, for messages: "--classes 10", "the training set's 10 classes"
};

// The most classes a job may have (--classes' upper bound).
constexpr int64_t kMaxClasses = int64_t{1} << 24;

// Checks the labels of one file as they are streamed once at open. `where(i)` names the i-th
// label's place in messages ("record 7", "line 9").
class LabelCheck {
 public:
  LabelCheck(const LabelRange& range, std::string file, std::function<std::string(uint64_t)> where);
  // Throws pstrain::Error "<file>: label <v> of <where> ..." for a label outside the range.
  void add(int64_t label, uint64_t index);
  // range.classes, else the largest label seen + 1, at least 2.
  int classes() const;

 private:
  std::string problem(int64_t label, uint64_t index) const;  // "" when the label is in range

  LabelRange range_;
  std::string file_;
  std::function<std::string(uint64_t)> where_;
  int64_t max_ = -1;
};

// Float targets instead of class labels (--loss bce | mse | huber: docs/data.md, "Targets").
struct TargetRule {
  bool binary = false;  // --loss bce: every value 0 or 1
  std::string loss;     // the flag, for messages: "--loss bce"
};

// Throws pstrain::UsageError "<file>: target <v> of record <r> (value <k> of its <width>) is not 0
// or 1 (--loss bce takes multi-label 0/1 targets)" for such a value under a binary rule, and
// "... is not a finite float32" for NaN, infinity or a value beyond float32's range under any rule.
void check_target(double value, const TargetRule& rule, const std::string& file, uint64_t record, size_t k,
                  size_t width);

// value * scale as float for every uint8 value; scale 0 means 1/255 (then value / 255.0f exactly).
std::array<float, 256> uint8_scale_table(double scale);

}  // namespace pstrain
