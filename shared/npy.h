// NumPy .npy files (format version 1.0), float32, C order.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace pstrain {

// A shape as NumPy writes it: (784, 256), (10,), ().
std::string shape_text(const std::vector<size_t>& shape);

// Writes atomically (temporary file + rename); throws pstrain::Error.
void write_npy(const std::string& path, const std::vector<size_t>& shape, const float* data);

// Reads a little-endian float32 C-order .npy; throws pstrain::Error on anything else.
std::vector<float> read_npy(const std::string& path, std::vector<size_t>* shape);

}  // namespace pstrain
