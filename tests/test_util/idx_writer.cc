#include "tests/test_util/idx_writer.h"

#include <stdlib.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/splitmix.h"

namespace pstrain {
namespace {


// A plain or gzip output file.
class OutFile {
 public:
  OutFile(const std::string& path, bool gzip) : path_(path) {
    if (gzip) {
      gz_ = gzopen(path.c_str(), "wb1");
    } else {
      file_ = std::fopen(path.c_str(), "wb");
    }
    if (gz_ == nullptr && file_ == nullptr) throw Error(path + ": cannot create");
  }
  ~OutFile() {
    if (gz_ != nullptr) gzclose(gz_);
    if (file_ != nullptr) std::fclose(file_);
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;

  void write(const void* data, size_t len) {
    if (len == 0) return;
    const bool ok = gz_ != nullptr
                        ? gzwrite(gz_, data, static_cast<unsigned>(len)) == static_cast<int>(len)
                        : std::fwrite(data, 1, len, file_) == len;
    if (!ok) throw Error(path_ + ": write failed");
  }
  void write_be32(uint32_t v) {
    const uint8_t b[4] = {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
    write(b, 4);
  }
  void close() {
    const bool ok = gz_ != nullptr ? gzclose(gz_) == Z_OK : std::fclose(file_) == 0;
    gz_ = nullptr;
    file_ = nullptr;
    if (!ok) throw Error(path_ + ": close failed");
  }

 private:
  std::string path_;
  gzFile gz_ = nullptr;
  std::FILE* file_ = nullptr;
};

}  // namespace

void write_idx_images(const std::string& path, uint32_t n, uint32_t rows, uint32_t cols,
                      const std::function<uint8_t(uint32_t, uint32_t)>& pixel, bool gzip) {
  OutFile out(path, gzip);
  out.write_be32(0x00000803);
  out.write_be32(n);
  out.write_be32(rows);
  out.write_be32(cols);
  std::vector<uint8_t> record(static_cast<size_t>(rows) * cols);
  for (uint32_t r = 0; r < n; ++r) {
    for (uint32_t p = 0; p < record.size(); ++p) record[p] = pixel(r, p);
    out.write(record.data(), record.size());
  }
  out.close();
}

void write_idx_labels(const std::string& path, uint32_t n,
                      const std::function<uint8_t(uint32_t)>& label, bool gzip) {
  OutFile out(path, gzip);
  out.write_be32(0x00000801);
  out.write_be32(n);
  for (uint32_t r = 0; r < n; ++r) {
    const uint8_t v = label(r);
    out.write(&v, 1);
  }
  out.close();
}

std::string make_temp_dir(const std::string& tag) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/pstrain-" +
                     tag + "-XXXXXX";
  if (::mkdtemp(&path[0]) == nullptr) throw Error(path + ": mkdtemp failed");
  return path;
}

uint8_t synthetic_label(uint64_t seed, uint32_t record) {
  return static_cast<uint8_t>(splitmix64(seed ^ splitmix64(record)) % 10);
}

void write_synthetic_mnist(const std::string& dir, const std::string& split, uint32_t n,
                           uint32_t rows, uint32_t cols, uint64_t seed, bool gzip) {
  const uint32_t dim = rows * cols;
  std::vector<uint8_t> templates(10 * static_cast<size_t>(dim));
  for (size_t i = 0; i < templates.size(); ++i) {
    templates[i] = splitmix64(seed * 31 + i) % 4 == 0 ? 200 : 20;  // a quarter of each class's pixels lit
  }
  const std::string suffix = gzip ? ".gz" : "";
  write_idx_images(
      dir + "/" + split + "-images-idx3-ubyte" + suffix, n, rows, cols,
      [&](uint32_t r, uint32_t p) {
        const int noise = static_cast<int>(splitmix64(seed ^ ((uint64_t{r} << 32) | p)) % 81) - 40;
        const int v = templates[synthetic_label(seed, r) * size_t{dim} + p] + noise;
        return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
      },
      gzip);
  write_idx_labels(dir + "/" + split + "-labels-idx1-ubyte" + suffix, n,
                   [&](uint32_t r) { return synthetic_label(seed, r); }, gzip);
}

}  // namespace pstrain
