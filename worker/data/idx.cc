#include "worker/data/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/data/file_io.h"

namespace pstrain {
namespace {

constexpr size_t kInChunk = 64 << 10;
constexpr size_t kOutChunk = 256 << 10;

// Owns a file descriptor of the decompression's input.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int open_or_throw(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + errno_text(errno));
  return fd;
}

size_t read_some(int fd, unsigned char* out, size_t len, const std::string& name) {
  for (;;) {
    const ssize_t n = ::read(fd, out, len);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) throw Error(name + ": read failed: " + errno_text(errno));
  }
}

bool is_gzip(int fd, const std::string& path) {
  uint8_t magic[2] = {0, 0};
  for (;;) {
    const ssize_t n = ::pread(fd, magic, 2, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(path + ": read failed: " + errno_text(errno));
    return n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  }
}

// Streams the gzip data of `in` (one or more members) into `out` in fixed-size chunks.
void inflate_stream(int in, int out, const std::string& src, const std::string& dst) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) throw Error(src + ": zlib init failed");
  std::vector<unsigned char> inbuf(kInChunk), outbuf(kOutChunk);
  int ret = Z_OK;
  bool out_full = false;
  try {
    for (;;) {
      if (zs.avail_in == 0 && !out_full) {
        const size_t n = read_some(in, inbuf.data(), inbuf.size(), src);
        if (n == 0) break;
        zs.next_in = inbuf.data();
        zs.avail_in = static_cast<uInt>(n);
      }
      if (ret == Z_STREAM_END) inflateReset(&zs);  // another gzip member follows
      zs.next_out = outbuf.data();
      zs.avail_out = static_cast<uInt>(outbuf.size());
      ret = inflate(&zs, Z_NO_FLUSH);
      if (ret != Z_OK && ret != Z_STREAM_END && ret != Z_BUF_ERROR) {
        throw Error(src + ": corrupt gzip data: " + (zs.msg ? zs.msg : zError(ret)));
      }
      write_all(out, outbuf.data(), outbuf.size() - zs.avail_out, dst);
      out_full = ret != Z_STREAM_END && zs.avail_out == 0;
    }
  } catch (...) {
    inflateEnd(&zs);
    throw;
  }
  inflateEnd(&zs);
  if (ret != Z_STREAM_END) throw Error(src + ": truncated gzip data");
}

void decompress_to(int in, const std::string& src, const std::string& dst) {
  create_file_atomically(dst, [&](int out, const std::string& tmp) { inflate_stream(in, out, src, tmp); });
}

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

std::string uncompressed_path(const std::string& path, const std::string& cache_dir) {
  Fd in(open_or_throw(path));
  struct stat st {};
  if (::fstat(in.get(), &st) != 0) throw Error(path + ": cannot stat: " + errno_text(errno));
  if (!is_gzip(in.get(), path)) return path;

  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) throw Error(cache_dir + ": cannot create cache directory: " + ec.message());
  const std::string dst = cache_dir + "/" + cache_file_name(path, st);
  if (::access(dst.c_str(), R_OK) == 0) return dst;

  PSLOG(INFO) << "decompressing " << path << " into " << dst;
  decompress_to(in.get(), path, dst);
  return dst;
}

IdxFile::IdxFile(const std::string& path, const std::string& cache_dir, int ndims) {
  const std::string data_path = uncompressed_path(path, cache_dir);
  name_ = data_path == path ? path : path + " (decompressed " + data_path + ")";
  file_ = std::make_unique<RandomAccessFile>(data_path, name_);
  parse_header(ndims);
}

IdxFile::~IdxFile() = default;

void IdxFile::parse_header(int ndims) {
  PSTRAIN_CHECK(ndims >= 1 && ndims <= 3);
  const uint64_t size = file_->size();
  header_bytes_ = 4 + 4 * static_cast<uint64_t>(ndims);
  const auto too_short = [&] {
    return Error(name_ + ": file is " + std::to_string(size) + " bytes, too short for an IDX header");
  };
  uint8_t head[16];
  if (file_->read_some(0, 4, head) < 4) throw too_short();
  const uint32_t magic = load_be32(head);
  const uint32_t expected = 0x800u | static_cast<uint32_t>(ndims);
  if (magic != expected) {
    throw Error(name_ + ": bad IDX magic " + hex32(magic) + " (expected " + hex32(expected) +
                ": uint8 data with " + std::to_string(ndims) + " dimensions)");
  }
  if (file_->read_some(0, header_bytes_, head) < header_bytes_) throw too_short();
  dims_.clear();
  record_bytes_ = 1;
  for (int d = 0; d < ndims; ++d) {
    dims_.push_back(load_be32(head + 4 + 4 * d));
    if (d == 0) continue;
    if (dims_[d] == 0) throw Error(name_ + ": dimension " + std::to_string(d) + " is 0");
    record_bytes_ *= dims_[d];  // at most two uint32 factors: no overflow
  }
  const uint64_t body = size - header_bytes_;
  if (count() > body / record_bytes_ || count() * record_bytes_ != body) {
    throw Error(name_ + ": file is " + std::to_string(size) + " bytes, but its header describes " +
                std::to_string(count()) + " records of " + std::to_string(record_bytes_) +
                " bytes after a " + std::to_string(header_bytes_) + "-byte header");
  }
}

void IdxFile::read_data(uint64_t offset, size_t len, uint8_t* out) const {
  file_->read_exact(header_bytes_ + offset, len, out);
}

}  // namespace pstrain
