#include "worker/data/npy_dataset.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "shared/util/error.h"
#include "worker/data/npy_file.h"

namespace pstrain {
namespace {

constexpr size_t kFeatureChunk = 4096;           // uint8 feature bytes converted per pread
constexpr size_t kCheckChunk = size_t{1} << 20;  // bytes streamed per pread by the checks at open

const NpyTypes& feature_types() {
  static const NpyTypes types{
      {NpyType::kFloat32, NpyType::kUint8},
      "features must be float32 ('<f4') or uint8 ('|u1'), e.g. x.astype(numpy.float32)"};
  return types;
}

const NpyTypes& label_types() {
  static const NpyTypes types{
      {NpyType::kInt8, NpyType::kUint8, NpyType::kInt16, NpyType::kUint16, NpyType::kInt32, NpyType::kUint32,
       NpyType::kInt64, NpyType::kUint64},
      "labels must be integers (int8 to int64 or uint8 to uint64, little-endian), e.g. "
      "y.astype(numpy.int64)"};
  return types;
}

const NpyTypes& target_types() {
  static const NpyTypes types{
      {NpyType::kFloat32, NpyType::kFloat64, NpyType::kInt8, NpyType::kUint8, NpyType::kInt16, NpyType::kUint16,
       NpyType::kInt32, NpyType::kUint32, NpyType::kInt64, NpyType::kUint64},
      "targets must be float32, float64 or integers (little-endian), e.g. y.astype(numpy.float32)"};
  return types;
}

// One little-endian integer of `type` at p, as int64 (uint64 values above its range saturate).
int64_t load_label(NpyType type, const uint8_t* p) {
  uint64_t u = 0;
  std::memcpy(&u, p, 8);  // the caller's buffer holds at least 8 bytes
  switch (type) {
    case NpyType::kUint8:
      return static_cast<uint8_t>(u);
    case NpyType::kInt8:
      return static_cast<int8_t>(u);
    case NpyType::kUint16:
      return static_cast<uint16_t>(u);
    case NpyType::kInt16:
      return static_cast<int16_t>(u);
    case NpyType::kUint32:
      return static_cast<uint32_t>(u);
    case NpyType::kInt32:
      return static_cast<int32_t>(u);
    case NpyType::kInt64:
      return static_cast<int64_t>(u);
    case NpyType::kUint64:
      return u > uint64_t{INT64_MAX} ? INT64_MAX : static_cast<int64_t>(u);
    case NpyType::kFloat32:
    case NpyType::kFloat64:
      break;
  }
  throw Error("not an integer dtype");
}

// One little-endian value of `type` at p as double (the caller's buffer holds at least 8 bytes).
double load_target(NpyType type, const uint8_t* p) {
  if (type == NpyType::kFloat32) {
    float f = 0;
    std::memcpy(&f, p, 4);
    return f;
  }
  if (type == NpyType::kFloat64) {
    double d = 0;
    std::memcpy(&d, p, 8);
    return d;
  }
  return static_cast<double>(load_label(type, p));
}

// (N, C, H, W) -> {C, H, W}; (N, H, W) -> {1, H, W}; (N, D) -> {D}; (N,) -> {1}.
std::vector<size_t> sample_shape_of(const std::vector<size_t>& s) {
  if (s.size() == 3) return {1, s[1], s[2]};
  if (s.size() == 4) return {s[1], s[2], s[3]};
  return {s.size() == 2 ? s[1] : 1};
}

std::string record_text(uint64_t record) { return "record " + std::to_string(record); }

class NpyDataset final : public Dataset {
 public:
  // `targets` null: class labels in `range`; else float targets under that rule.
  NpyDataset(const std::string& features, const std::string& labels, const std::string& cache_dir,
             double scale, const LabelRange& range, const TargetRule* targets)
      : x_(features, cache_dir, feature_types()),
        y_(labels, cache_dir, targets != nullptr ? target_types() : label_types()),
        scale_(uint8_scale_table(scale)) {
    if (targets != nullptr) target_width_ = static_cast<size_t>(y_.record_items());
    check_shapes();
    if (targets != nullptr) {
      check_targets(*targets);
    } else {
      check_labels(range);
    }
    if (x_.type() == NpyType::kFloat32) check_finite();
  }

  size_t size() const override { return x_.count(); }
  size_t feature_dim() const override { return x_.record_items(); }
  std::vector<size_t> sample_shape() const override { return sample_shape_of(x_.shape()); }
  int num_classes() const override { return target_width_ > 0 ? static_cast<int>(target_width_) : classes_; }
  size_t target_width() const override { return target_width_; }
  std::string target_source() const override { return y_.name() + " (shape " + shape_text(y_.shape()) + ")"; }

  void read_targets(const size_t* records, size_t count, float* targets) const override {
    PSTRAIN_CHECK(target_width_ > 0);
    std::vector<uint8_t> buf(y_.record_bytes() + 8);
    for (size_t i = 0; i < count; ++i) {
      if (records[i] >= size()) {
        throw Error(y_.name() + ": record " + std::to_string(records[i]) + " out of range (" +
                    std::to_string(size()) + " records)");
      }
      y_.read_data(records[i] * y_.record_bytes(), y_.record_bytes(), buf.data());
      for (size_t k = 0; k < target_width_; ++k) {
        targets[i * target_width_ + k] = static_cast<float>(load_target(y_.type(), buf.data() + k * y_.item_bytes()));
      }
    }
  }

  void read(const size_t* records, size_t count, float* features, int32_t* labels) const override {
    for (size_t i = 0; i < count; ++i) {
      if (records[i] >= size()) {
        throw Error(x_.name() + ": record " + std::to_string(records[i]) + " out of range (" +
                    std::to_string(size()) + " records)");
      }
      read_features(records[i], features + i * feature_dim());
      labels[i] = target_width_ > 0 ? 0 : read_label(records[i]);
    }
  }

 private:
  void check_shapes() const {
    const std::vector<size_t>& s = x_.shape();
    if (s.empty() || s.size() > 4) {
      throw Error(x_.name() +
                  ": features must have a shape (N, ...) of 1 to 4 dimensions, e.g. (N, D) or (N, C, H, W); "
                  "this one is " +
                  shape_text(s));
    }
    if (x_.count() > 0 && x_.record_items() == 0)
      throw Error(x_.name() + ": records of shape " + shape_text(s) + " are empty");
    if (target_width_ > 0) {
      if (y_.shape().size() != 1 && y_.shape().size() != 2) {
        throw UsageError(y_.name() + ": targets must have shape (N,) or (N, K), this one is " + shape_text(y_.shape()));
      }
      if (y_.shape().size() == 2 && y_.shape()[1] == 0) throw UsageError(y_.name() + ": targets of shape (N, 0)");
    } else if (y_.shape().size() != 1) {
      throw Error(y_.name() + ": labels must have shape (N,), this one is " + shape_text(y_.shape()) +
                  (y_.shape().size() == 2 && y_.shape()[1] == 1 ? " (y.reshape(-1) makes it (N,))" : ""));
    }
    if (y_.count() != x_.count()) {
      throw Error(y_.name() + ": has " + std::to_string(y_.count()) + " labels but " + x_.name() + " has " +
                  std::to_string(x_.count()) + " records");
    }
    if (x_.count() == 0) throw Error(x_.name() + ": has no records");
  }

  // Streams the labels once so that a bad one is reported at open, not mid-training.
  void check_labels(const LabelRange& range) {
    LabelCheck check(range, y_.name(), record_text);
    std::vector<uint8_t> buf(kCheckChunk + 8);
    const uint64_t per_chunk = kCheckChunk / y_.item_bytes();
    for (uint64_t first = 0; first < y_.count(); first += per_chunk) {
      const uint64_t n = std::min(per_chunk, y_.count() - first);
      y_.read_data(first * y_.item_bytes(), n * y_.item_bytes(), buf.data());
      for (uint64_t i = 0; i < n; ++i)
        check.add(load_label(y_.type(), buf.data() + i * y_.item_bytes()), first + i);
    }
    classes_ = check.classes();
  }

  // Streams the targets once: a value the rule refuses is an error at open, naming its record.
  void check_targets(const TargetRule& rule) const {
    std::vector<uint8_t> buf(kCheckChunk + 8);
    const uint64_t per_chunk = kCheckChunk / y_.item_bytes(), total = y_.count() * target_width_;
    for (uint64_t first = 0; first < total; first += per_chunk) {
      const uint64_t n = std::min(per_chunk, total - first);
      y_.read_data(first * y_.item_bytes(), n * y_.item_bytes(), buf.data());
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t at = first + i;
        check_target(load_target(y_.type(), buf.data() + i * y_.item_bytes()), rule, y_.name(), at / target_width_,
                     at % target_width_, target_width_);
      }
    }
  }

  // Streams the features once: a NaN or infinity is an error at open, naming its record.
  void check_finite() const {
    std::vector<float> buf(kCheckChunk / sizeof(float));
    const uint64_t total = x_.count() * x_.record_items();
    for (uint64_t first = 0; first < total; first += buf.size()) {
      const uint64_t n = std::min<uint64_t>(buf.size(), total - first);
      x_.read_data(first * sizeof(float), n * sizeof(float), buf.data());
      for (uint64_t i = 0; i < n; ++i) {
        if (std::isfinite(buf[i])) continue;
        const uint64_t at = first + i;
        throw Error(x_.name() + ": record " + std::to_string(at / x_.record_items()) +
                    " has a non-finite value (" +
                    (std::isnan(buf[i]) ? "nan"
                     : buf[i] > 0       ? "inf"
                                        : "-inf") +
                    ") at element " + std::to_string(at % x_.record_items()) + " of its " +
                    std::to_string(x_.record_items()));
      }
    }
  }

  void read_features(size_t record, float* out) const {
    const size_t dim = feature_dim();
    if (x_.type() == NpyType::kFloat32) {
      x_.read_data(record * x_.record_bytes(), dim * sizeof(float), out);
      return;
    }
    uint8_t buf[kFeatureChunk];
    for (size_t done = 0; done < dim; done += kFeatureChunk) {
      const size_t len = std::min(kFeatureChunk, dim - done);
      x_.read_data(record * dim + done, len, buf);
      for (size_t j = 0; j < len; ++j) out[done + j] = scale_[buf[j]];
    }
  }

  int32_t read_label(size_t record) const {
    uint8_t buf[8] = {};
    y_.read_data(record * y_.item_bytes(), y_.item_bytes(), buf);
    const int64_t label = load_label(y_.type(), buf);
    if (label < 0 || label >= classes_) {
      throw Error(y_.name() + ": label " + std::to_string(label) + " of record " + std::to_string(record) +
                  " is not in [0, " + std::to_string(classes_) + ") (the file changed after it was opened?)");
    }
    return static_cast<int32_t>(label);
  }

  NpyFile x_, y_;
  std::array<float, 256> scale_;
  int classes_ = 0;
  size_t target_width_ = 0;  // float targets per record (0: class labels)
};

}  // namespace

std::vector<size_t> npy_sample_shape(const std::string& features, const std::string& cache_dir) {
  return sample_shape_of(NpyFile(features, cache_dir, feature_types()).shape());
}

std::unique_ptr<Dataset> open_npy_dataset(const std::string& features, const std::string& labels,
                                          const std::string& cache_dir, double scale,
                                          const LabelRange& labels_range) {
  return std::make_unique<NpyDataset>(features, labels, cache_dir, scale, labels_range, nullptr);
}

std::unique_ptr<Dataset> open_npy_target_dataset(const std::string& features, const std::string& targets,
                                                 const std::string& cache_dir, double scale, const TargetRule& rule) {
  return std::make_unique<NpyDataset>(features, targets, cache_dir, scale, LabelRange{}, &rule);
}

}  // namespace pstrain
