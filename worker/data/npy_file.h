// NumPy .npy arrays read by random access: the header is checked strictly at open (worker/data/npy_format.h),
// then bytes of the data are read with pread, never mapped, so a reader's memory does not grow
// with the file. A gzip file is decompressed once into the cache directory, as IDX files are
// (worker/data/idx.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/data/npy_format.h"

namespace pstrain {

class RandomAccessFile;

class NpyFile {
 public:
  // Throws pstrain::Error naming the file for anything read_npy_header refuses.
  NpyFile(const std::string& path, const std::string& cache_dir, const NpyTypes& accepted);
  ~NpyFile();
  NpyFile(const NpyFile&) = delete;
  NpyFile& operator=(const NpyFile&) = delete;

  const std::string& name() const { return name_; }  // for messages: source (and cache) path
  NpyType type() const { return header_.type; }
  size_t item_bytes() const { return header_.item_bytes; }
  const std::vector<size_t>& shape() const { return header_.shape; }
  uint64_t count() const { return shape().empty() ? 1 : shape()[0]; }  // records: the first dimension
  uint64_t record_items() const { return header_.record_items; }       // product of the other dimensions
  uint64_t record_bytes() const { return header_.record_items * header_.item_bytes; }

  // Reads bytes [offset, offset + len) of the data section. Safe to call concurrently. Throws
  // pstrain::Error on an I/O error or short read.
  void read_data(uint64_t offset, size_t len, void* out) const;

 private:
  std::string name_;
  std::unique_ptr<RandomAccessFile> file_;
  NpyHeader header_;
};

}  // namespace pstrain
