// IDX files (the MNIST container format) read by random access. A gzip input is decompressed once
// into a cache directory; records are then read with pread, never mapped, so a reader's memory does
// not grow with the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstrain {

class RandomAccessFile;

// The path of the uncompressed bytes of `path`: `path` itself when it is not gzip data, otherwise
// a file in `cache_dir` (created if needed) named after the source's base name, size, mtime and
// location. The cache file is written under a temporary name and renamed into place, so processes
// racing to create it are safe. Decompression streams in fixed-size chunks.
std::string uncompressed_path(const std::string& path, const std::string& cache_dir);

// One validated IDX file of uint8 values: big-endian magic 0x000008<ndims>, ndims big-endian
// uint32 dims, then dims[0] records of dims[1]*...*dims[ndims-1] bytes, nothing more.
class IdxFile {
 public:
  // Throws pstrain::Error naming `path` if it cannot be opened or is not such a file.
  IdxFile(const std::string& path, const std::string& cache_dir, int ndims);
  ~IdxFile();
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;

  const std::string& name() const { return name_; }  // for messages: source (and cache) path
  const std::vector<uint32_t>& dims() const { return dims_; }
  uint64_t count() const { return dims_[0]; }
  uint64_t record_bytes() const { return record_bytes_; }

  // Reads bytes [offset, offset + len) of the data section (after the header). Safe to call
  // concurrently. Throws pstrain::Error on an I/O error or short read.
  void read_data(uint64_t offset, size_t len, uint8_t* out) const;

 private:
  void parse_header(int ndims);

  std::string name_;
  std::unique_ptr<RandomAccessFile> file_;
  std::vector<uint32_t> dims_;
  uint64_t header_bytes_ = 0;
  uint64_t record_bytes_ = 0;
};

}  // namespace pstrain
