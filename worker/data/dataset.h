// Random-access classification records (float features; uint8 pixels scaled, by default to
// [0, 1]) for the worker's data pipeline. Formats and rules: docs/data.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstrain {

// Categorical IDs of a batch (Dataset::read_ids): per record, per field, a list of one or more
// IDs. Every count is >= 1, so ids.size() == counts.size() exactly when each field holds one ID
// (then ids is record by record, field by field, as a fixed-width array would be).
struct IdLists {
  std::vector<uint64_t> ids;     // every field's IDs: record by record, field by field, in order
  std::vector<uint32_t> counts;  // per (record, field): how many of ids are its
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  // images/labels: IDX files (plain or gzip; magic 0x00000803 [n, rows, cols] and 0x00000801 [n]).
  // cache_dir: where gzip files are decompressed once (created when needed). Every label must be
  // < num_classes. Pixels are multiplied by `scale` (0: 1/255). Throws pstrain::Error naming the
  // file on any problem.
  static std::unique_ptr<Dataset> open_idx(const std::string& images, const std::string& labels,
                                           const std::string& cache_dir, int num_classes = 10,
                                           double scale = 0);
  // split "train" or "t10k": DIR/<split>-images-idx3-ubyte[.gz] and DIR/<split>-labels-idx1-ubyte[.gz],
  // preferring the plain file when both exist.
  static std::unique_ptr<Dataset> open_mnist_dir(const std::string& dir, const std::string& split,
                                                 const std::string& cache_dir, int num_classes = 10,
                                                 double scale = 0);

  virtual size_t size() const = 0;
  virtual size_t feature_dim() const = 0;
  // The shape of one record's features, outermost first: {channels, height, width} for images
  // (IDX: {1, rows, cols}), {feature_dim()} for flat records. Its product is feature_dim().
  virtual std::vector<size_t> sample_shape() const { return {feature_dim()}; }
  virtual int num_classes() const = 0;
  // Reads records[i] for i < count into features (count * feature_dim floats) and labels.
  // Throws pstrain::Error for a record index >= size() or a read failure. Does not mutate the
  // object; one thread may call it while others only read sizes.
  virtual void read(const size_t* records, size_t count, float* features,
                    int32_t* labels) const = 0;
  // Float targets (--loss bce | mse | huber; docs/data.md, "Targets"): values per record, 0 for
  // data of class labels (whose read() fills the labels; with targets it fills zeros). Data with
  // targets gives num_classes() = target_width(): the model's outputs.
  virtual size_t target_width() const { return 0; }
  // For messages: where the targets come from, with their shape ("y.npy (shape (1000, 3))").
  virtual std::string target_source() const { return ""; }
  // Reads records[i]'s target_width() targets for i < count (record by record). Throws
  // pstrain::Error for a record index >= size(), a read failure, or data without targets. Thread
  // rules as read().
  virtual void read_targets(const size_t* records, size_t count, float* targets) const;
  // True where the targets are the labels read() gives, as 0.0f / 1.0f (one per record: a CTR
  // model's clicks, worker/data/click_targets.h): a caller that read the labels takes them
  // instead of reading the records again.
  virtual bool targets_are_labels() const { return false; }
  // False for a file without labels (a CTR file without its label column, input to --predict
  // only: read() then gives label 0 for every record).
  virtual bool labelled() const { return true; }
  // Categorical fields per record, for embedding layers: 26 for Criteo data, 0 for the formats
  // without them.
  virtual size_t id_fields() const { return 0; }
  // Replaces *out with records[i]'s id_fields() fields' IDs for i < count: count * id_fields()
  // counts, and their IDs (a field may list several: docs/data.md). Throws pstrain::Error for a
  // record index >= size(), a read failure, or a format without IDs (id_fields() 0). Thread rules
  // as read().
  virtual void read_ids(const size_t* records, size_t count, IdLists* out) const;
  // read() and read_ids() of the same records together (the trainer's batch of a CTR model): the
  // same results, where a format keeping both in one record reads each record once (the CTR
  // cache: one pread per record instead of two). Thread rules as read().
  virtual void read_with_ids(const size_t* records, size_t count, float* features, int32_t* labels,
                             IdLists* out) const {
    read(records, count, features, labels);
    read_ids(records, count, out);
  }

 protected:
  Dataset() = default;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;
};

// $FASHION_MNIST_DIR if set, else /usr/share/datasets/fashion-mnist.
std::string default_data_dir();
// $XDG_CACHE_HOME/pstrain, else $HOME/.cache/pstrain, else /tmp/pstrain-cache.
std::string default_cache_dir();

}  // namespace pstrain
