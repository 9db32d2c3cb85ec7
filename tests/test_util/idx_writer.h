// Test helpers that write IDX files (plain or gzip) and synthetic MNIST-style data sets.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>

namespace pstrain {

// Writes a uint8 image file (magic 0x00000803, dims [n, rows, cols]); pixel(record, index) gives
// each byte. Streams: memory does not grow with n.
void write_idx_images(const std::string& path, uint32_t n, uint32_t rows, uint32_t cols,
                      const std::function<uint8_t(uint32_t record, uint32_t pixel)>& pixel,
                      bool gzip);
// Writes a uint8 label file (magic 0x00000801, dims [n]).
void write_idx_labels(const std::string& path, uint32_t n,
                      const std::function<uint8_t(uint32_t record)>& label, bool gzip);

// A fresh directory $TMPDIR/pstrain-<tag>-XXXXXX (or under /tmp). The caller removes it.
std::string make_temp_dir(const std::string& tag);

// A make_temp_dir directory removed (quietly, whatever it holds) when the test ends, pass or fail.
struct TempDir {
  explicit TempDir(const std::string& tag) : path(make_temp_dir(tag)) {}
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string path;
};

// A learnable 10-class set under the standard names DIR/<split>-{images-idx3,labels-idx1}-ubyte
// (+ ".gz" when gzip): each class has a random binary template, each record adds uniform noise.
// Deterministic in seed.
void write_synthetic_mnist(const std::string& dir, const std::string& split, uint32_t n,
                           uint32_t rows, uint32_t cols, uint64_t seed, bool gzip);

// The label write_synthetic_mnist gives `record` for `seed`.
uint8_t synthetic_label(uint64_t seed, uint32_t record);

}  // namespace pstrain
