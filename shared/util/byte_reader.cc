#include "shared/util/byte_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace pstrain {

ByteReader::ByteReader(const std::string& bytes) : bytes_(bytes.data()), length_(bytes.size()) {}

ByteReader::ByteReader(const std::string& path, uint64_t offset, uint64_t length)
    : path_(path), offset_(offset), length_(length) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error_ = "cannot open " + path + ": " + std::strerror(errno);
    return;
  }
  fd_ = std::shared_ptr<const int>(new int(fd), [](const int* f) {
    ::close(*f);
    delete f;
  });
}

ByteReader::ByteReader(const ByteReader& other, uint64_t position)
    : bytes_(other.bytes_),
      fd_(other.fd_),
      path_(other.path_),
      offset_(other.offset_),
      length_(other.length_),
      position_(std::min(position, other.length_)),
      error_(other.fd_ || other.bytes_ ? "" : other.error_) {}

bool ByteReader::fill() {
  if (!buffer_) buffer_.reset(new char[kBufferBytes]);
  buffer_at_ = position_;
  buffered_ = 0;
  const size_t want = static_cast<size_t>(std::min<uint64_t>(kBufferBytes, left()));
  while (buffered_ < want) {
    const ssize_t n = ::pread(*fd_, buffer_.get() + buffered_, want - buffered_,
                              static_cast<off_t>(offset_ + buffer_at_ + buffered_));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = "cannot read " + path_ + ": " + (n < 0 ? std::strerror(errno) : "it ended early (truncated)");
      return false;
    }
    buffered_ += static_cast<size_t>(n);
  }
  return true;
}

bool ByteReader::read(void* out, size_t n) {
  if (n > left() || !error_.empty()) return false;
  if (bytes_ != nullptr) {
    std::memcpy(out, bytes_ + position_, n);
    position_ += n;
    return true;
  }
  char* to = static_cast<char*>(out);
  const uint64_t start = position_;
  while (n > 0) {
    if (position_ < buffer_at_ || position_ >= buffer_at_ + buffered_) {
      if (!fill()) {
        position_ = start;
        return false;
      }
    }
    const size_t at = static_cast<size_t>(position_ - buffer_at_);
    const size_t take = std::min(n, buffered_ - at);
    std::memcpy(to, buffer_.get() + at, take);
    to += take;
    n -= take;
    position_ += take;
  }
  return true;
}

bool ByteReader::skip(uint64_t n) {
  if (n > left() || !error_.empty()) return false;
  position_ += n;
  return true;
}

}  // namespace pstrain
