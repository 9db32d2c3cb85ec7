#include "worker/data/npy_file.h"

#include "worker/data/file_io.h"
#include "worker/data/idx.h"

namespace pstrain {

NpyFile::NpyFile(const std::string& path, const std::string& cache_dir, const NpyTypes& accepted) {
  const std::string data_path = uncompressed_path(path, cache_dir);
  name_ = data_path == path ? path : path + " (decompressed " + data_path + ")";
  file_ = std::make_unique<RandomAccessFile>(data_path, name_);
  const RandomAccessFile& file = *file_;
  header_ =
      read_npy_header([&file](uint64_t offset, size_t len, void* out) { file.read_exact(offset, len, out); },
                      file.size(), name_, accepted);
}

NpyFile::~NpyFile() = default;

void NpyFile::read_data(uint64_t offset, size_t len, void* out) const {
  file_->read_exact(header_.data_offset + offset, len, out);
}

}  // namespace pstrain
