#include "worker/data/open.h"

#include "shared/error.h"

namespace pstrain {
namespace {

std::string data_dir(const JobOptions& o) { return o.data_dir.empty() ? default_data_dir() : o.data_dir; }
std::string cache_dir(const JobOptions& o) { return o.cache_dir.empty() ? default_cache_dir() : o.cache_dir; }

}  // namespace

std::unique_ptr<Dataset> open_training_data(const JobOptions& o) {
  if (!o.train_data.empty()) throw UsageError("--train-data is not supported yet");
  return Dataset::open_mnist_dir(data_dir(o), "train", cache_dir(o));
}

std::unique_ptr<Dataset> open_test_data(const JobOptions& o, int classes) {
  (void)classes;
  if (!o.test_data.empty()) throw UsageError("--test-data is not supported yet");
  return Dataset::open_mnist_dir(data_dir(o), "t10k", cache_dir(o));
}

std::string training_data_source(const JobOptions& o) {
  return o.train_data.empty() ? data_dir(o) : o.train_data;
}

}  // namespace pstrain
