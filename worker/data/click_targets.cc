#include "worker/data/click_targets.h"

#include <vector>

#include "shared/util/error.h"

namespace pstrain {
namespace {

class ClickTargets final : public Dataset {
 public:
  ClickTargets(std::unique_ptr<Dataset> labelled, std::string source)
      : data_(std::move(labelled)), source_(std::move(source)) {}

  size_t size() const override { return data_->size(); }
  size_t feature_dim() const override { return data_->feature_dim(); }
  std::vector<size_t> sample_shape() const override { return data_->sample_shape(); }
  int num_classes() const override { return 1; }
  void read(const size_t* records, size_t count, float* features, int32_t* labels) const override {
    data_->read(records, count, features, labels);
  }
  size_t target_width() const override { return 1; }
  bool targets_are_labels() const override { return true; }
  std::string target_source() const override { return source_ + " (its click labels, 0 or 1)"; }
  void read_targets(const size_t* records, size_t count, float* targets) const override {
    std::vector<float> features(count * data_->feature_dim());
    std::vector<int32_t> labels(count);
    data_->read(records, count, features.data(), labels.data());
    for (size_t i = 0; i < count; ++i) targets[i] = labels[i] == 1 ? 1.0f : 0.0f;
  }
  bool labelled() const override { return data_->labelled(); }
  size_t id_fields() const override { return data_->id_fields(); }
  void read_ids(const size_t* records, size_t count, IdLists* out) const override {
    data_->read_ids(records, count, out);
  }
  void read_with_ids(const size_t* records, size_t count, float* features, int32_t* labels,
                     IdLists* out) const override {
    data_->read_with_ids(records, count, features, labels, out);
  }

 private:
  std::unique_ptr<Dataset> data_;
  std::string source_;
};

}  // namespace

std::unique_ptr<Dataset> click_targets(std::unique_ptr<Dataset> labelled, const std::string& source) {
  if (labelled->num_classes() != 2) {
    throw UsageError(source + ": --loss bce on labelled data takes labels 0 and 1 (clicks), but it has " +
                     std::to_string(labelled->num_classes()) + " classes");
  }
  return std::make_unique<ClickTargets>(std::move(labelled), source);
}

}  // namespace pstrain
