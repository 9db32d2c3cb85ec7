#include "worker/data/dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <vector>

#include "shared/util/error.h"
#include "worker/data/idx.h"
#include "worker/data/records.h"

namespace pstrain {
namespace {

constexpr size_t kFeatureChunk = 65536;   // bytes of a run of consecutive records read per pread
constexpr size_t kLabelChunk = 4096;      // labels validated per pread
// Labels are kept in memory (one byte a record, read once at open) up to this many records:
// half of the reader's syscalls otherwise. Beyond it they are read by pread like the features.
constexpr uint64_t kLabelsInMemory = uint64_t{1} << 26;

class IdxDataset final : public Dataset {
 public:
  IdxDataset(const std::string& images, const std::string& labels, const std::string& cache_dir,
             int num_classes, double scale)
      : images_(images, cache_dir, 3), labels_(labels, cache_dir, 1), num_classes_(num_classes),
        scale_(uint8_scale_table(scale)) {
    if (labels_.count() != images_.count()) {
      throw Error(labels_.name() + ": has " + std::to_string(labels_.count()) + " labels but " +
                  images_.name() + " has " + std::to_string(images_.count()) + " images");
    }
    check_labels();
  }

  size_t size() const override { return images_.count(); }
  size_t feature_dim() const override { return images_.record_bytes(); }
  std::vector<size_t> sample_shape() const override {
    std::vector<size_t> shape = {1};  // one channel
    for (size_t d = 1; d < images_.dims().size(); ++d) shape.push_back(images_.dims()[d]);
    return shape;
  }
  int num_classes() const override { return num_classes_; }

  // Consecutive records (the test set in order, an unshuffled epoch) are read as one run: one
  // pread per 64 KiB instead of one per record (the evaluation's 10k records: 120 preads, not 10k).
  void read(const size_t* records, size_t count, float* features, int32_t* labels) const override {
    for (size_t i = 0; i < count;) {
      size_t run = 0;
      do {
        if (records[i + run] >= size()) {
          throw Error(images_.name() + ": record " + std::to_string(records[i + run]) + " out of range (" +
                      std::to_string(size()) + " records)");
        }
        labels[i + run] = read_label(records[i + run]);
        ++run;
      } while (i + run < count && records[i + run] == records[i] + run);
      read_features(records[i], run, features + i * feature_dim());
      i += run;
    }
  }

 private:
  // Records [first, first + n) into out, n * feature_dim() floats.
  void read_features(size_t first, size_t n, float* out) const {
    uint8_t buf[kFeatureChunk];
    const uint64_t bytes = static_cast<uint64_t>(n) * feature_dim();
    for (uint64_t done = 0; done < bytes; done += kFeatureChunk) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(kFeatureChunk, bytes - done));
      images_.read_data(first * feature_dim() + done, len, buf);
      for (size_t j = 0; j < len; ++j) out[done + j] = scale_[buf[j]];
    }
  }

  int32_t read_label(size_t record) const {
    if (!label_values_.empty()) return label_values_[record];  // checked at open
    uint8_t label = 0;
    labels_.read_data(record, 1, &label);
    check_label(label, record);
    return label;
  }

  void check_label(uint8_t label, uint64_t record) const {
    if (label >= num_classes_) {
      throw Error(labels_.name() + ": label " + std::to_string(label) + " of record " +
                  std::to_string(record) + " is not < num_classes " +
                  std::to_string(num_classes_));
    }
  }

  // Streams the labels once so that a bad value is reported at open, not mid-training, and keeps
  // them when there are at most kLabelsInMemory.
  void check_labels() {
    const bool keep = labels_.count() <= kLabelsInMemory;
    if (keep) label_values_.resize(labels_.count());
    uint8_t buf[kLabelChunk];
    for (uint64_t first = 0; first < labels_.count(); first += kLabelChunk) {
      const size_t len = std::min<uint64_t>(kLabelChunk, labels_.count() - first);
      labels_.read_data(first, len, buf);
      for (size_t i = 0; i < len; ++i) check_label(buf[i], first + i);
      if (keep) std::copy(buf, buf + len, label_values_.begin() + static_cast<long>(first));
    }
  }

  IdxFile images_;
  IdxFile labels_;
  std::vector<uint8_t> label_values_;  // all labels, when kept in memory (else empty)
  int num_classes_;
  std::array<float, 256> scale_;
};

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// DIR/name if it exists, else DIR/name.gz.
std::string find_idx(const std::string& dir, const std::string& name) {
  const std::string plain = dir + "/" + name;
  if (is_file(plain)) return plain;
  if (is_file(plain + ".gz")) return plain + ".gz";
  throw Error("data directory " + dir + ": missing " + name + " (or " + name + ".gz)");
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

}  // namespace

std::unique_ptr<Dataset> Dataset::open_idx(const std::string& images, const std::string& labels,
                                           const std::string& cache_dir, int num_classes, double scale) {
  if (num_classes < 1 || num_classes > 256) {
    throw Error(labels + ": num_classes must be in [1, 256] for uint8 labels, got " +
                std::to_string(num_classes));
  }
  return std::make_unique<IdxDataset>(images, labels, cache_dir, num_classes, scale);
}

std::unique_ptr<Dataset> Dataset::open_mnist_dir(const std::string& dir, const std::string& split,
                                                 const std::string& cache_dir, int num_classes,
                                                 double scale) {
  if (split != "train" && split != "t10k") {
    throw Error("data directory " + dir + ": unknown split '" + split + "' (train or t10k)");
  }
  const std::string images = find_idx(dir, split + "-images-idx3-ubyte");
  const std::string labels = find_idx(dir, split + "-labels-idx1-ubyte");
  return open_idx(images, labels, cache_dir, num_classes, scale);
}

void Dataset::read_targets(const size_t*, size_t, float*) const {
  throw Error("this data has class labels, not float targets (docs/data.md, \"Targets\")");
}

void Dataset::read_ids(const size_t*, size_t, IdLists*) const {
  throw Error("this data has no categorical IDs (only Criteo data has them: docs/data.md)");
}

std::string default_data_dir() {
  const std::string env = env_or_empty("FASHION_MNIST_DIR");
  return env.empty() ? "/usr/share/datasets/fashion-mnist" : env;
}

std::string default_cache_dir() {
  const std::string xdg = env_or_empty("XDG_CACHE_HOME");
  if (!xdg.empty()) return xdg + "/pstrain";
  const std::string home = env_or_empty("HOME");
  if (!home.empty()) return home + "/.cache/pstrain";
  return "/tmp/pstrain-cache";
}

}  // namespace pstrain
