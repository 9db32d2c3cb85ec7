// NumPy .npy arrays (format versions 1.0, 2.0 and 3.0) read by random access: the header is
// checked strictly at open, then bytes of the data are read with pread, never mapped, so a
// reader's memory does not grow with the file. A gzip file is decompressed once into the cache
// directory, as IDX files are (worker/data/idx.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstrain {

class RandomAccessFile;

// The little-endian numeric element types this reader knows ('|u1', '<i4', '<f4', ...).
enum class NpyType { kUint8, kInt8, kUint16, kInt16, kUint32, kInt32, kUint64, kInt64, kFloat32 };

// What one file may hold: its element types, and the sentence that says so in messages
// ("features must be float32 ('<f4') or uint8 ('|u1')").
struct NpyTypes {
  std::vector<NpyType> types;
  std::string rule;
};

class NpyFile {
 public:
  // Throws pstrain::Error naming the file for anything that is not a valid C-order array of one
  // of `accepted`'s types whose size is the header's plus exactly the data its shape describes
  // (magic, version, header syntax and keys, fortran_order, dtype, shape, truncation).
  NpyFile(const std::string& path, const std::string& cache_dir, const NpyTypes& accepted);
  ~NpyFile();
  NpyFile(const NpyFile&) = delete;
  NpyFile& operator=(const NpyFile&) = delete;

  const std::string& name() const { return name_; }  // for messages: source (and cache) path
  NpyType type() const { return type_; }
  size_t item_bytes() const { return item_bytes_; }
  const std::vector<uint64_t>& shape() const { return shape_; }
  uint64_t count() const { return shape_.empty() ? 1 : shape_[0]; }  // records: the first dimension
  uint64_t record_items() const { return record_items_; }            // product of the other dimensions
  uint64_t record_bytes() const { return record_items_ * item_bytes_; }

  // Reads bytes [offset, offset + len) of the data section. Safe to call concurrently. Throws
  // pstrain::Error on an I/O error or short read.
  void read_data(uint64_t offset, size_t len, void* out) const;

 private:
  void parse(const NpyTypes& accepted);

  std::string name_;
  std::unique_ptr<RandomAccessFile> file_;
  NpyType type_ = NpyType::kFloat32;
  size_t item_bytes_ = 0;
  std::vector<uint64_t> shape_;
  uint64_t record_items_ = 1;
  uint64_t header_bytes_ = 0;
};

// "(3, 4)", "(3,)" or "()", as NumPy writes shapes.
std::string npy_shape_text(const std::vector<uint64_t>& shape);
// "float32", "uint8", ...
const char* npy_type_name(NpyType type);

}  // namespace pstrain
