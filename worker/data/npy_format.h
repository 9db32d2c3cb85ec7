// NumPy .npy files: one strict reader of their header (format versions 1.0, 2.0 and 3.0), which
// the data sets (worker/data/npy_file.h, by pread and with a gzip cache) and the parameter files
// of --init-params (read_npy) share, and the writer of --save-params (write_npy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pstrain {

// The little-endian numeric element types the reader knows ('|u1', '<i4', '<f4', ...).
enum class NpyType { kUint8, kInt8, kUint16, kInt16, kUint32, kInt32, kUint64, kInt64, kFloat32, kFloat64 };

// What one file may hold: its element types, and the sentence that says so in messages
// ("features must be float32 ('<f4') or uint8 ('|u1')").
struct NpyTypes {
  std::vector<NpyType> types;
  std::string rule;
};

// A checked header: the data, C order, starts at data_offset and fills the rest of the file.
struct NpyHeader {
  NpyType type = NpyType::kFloat32;
  size_t item_bytes = 0;
  std::vector<size_t> shape;  // () for a scalar
  uint64_t record_items = 1;  // product of the dimensions after the first
  uint64_t data_offset = 0;   // the header's size
};

// Reads bytes [offset, offset + len) of the file, or throws.
using NpyReadAt = std::function<void(uint64_t offset, size_t len, void* out)>;

// Reads the header of a .npy file of `file_size` bytes through `read_at`. Throws pstrain::Error
// starting "<name>: " for anything that is not a valid C-order array of one of `accepted`'s
// types whose size is the header's plus exactly the data its shape describes (magic, version,
// header syntax and keys, fortran_order, dtype, shape, truncation or extra bytes).
NpyHeader read_npy_header(const NpyReadAt& read_at, uint64_t file_size, const std::string& name,
                          const NpyTypes& accepted);

// A shape as NumPy writes it: (784, 256), (10,), ().
std::string shape_text(const std::vector<size_t>& shape);

// A float32 C-order version 1.0 file's bytes (what write_npy writes; .npz members).
std::string npy_bytes(const std::vector<size_t>& shape, const float* data);
// Writes a float32 C-order version 1.0 file atomically (temporary file + rename); throws
// pstrain::Error.
void write_npy(const std::string& path, const std::vector<size_t>& shape, const float* data);

// Reads a float32 ('<f4') array, checked as read_npy_header checks it. Throws pstrain::Error
// "cannot open '<path>': <reason>", or one starting "<path>: " that says what is wrong.
std::vector<float> read_npy(const std::string& path, std::vector<size_t>* shape);

}  // namespace pstrain
