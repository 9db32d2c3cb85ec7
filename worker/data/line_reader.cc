#include "worker/data/line_reader.h"

#include <cerrno>
#include <cstring>

#include "shared/util/error.h"
#include "worker/data/file_io.h"

namespace pstrain {
namespace {

constexpr size_t kReadChunk = 64 << 10;

}  // namespace

LineReader::LineReader(const std::string& path, size_t max_line, bool cite_lines)
    : path_(path), max_line_(max_line), cite_lines_(cite_lines), buf_(kReadChunk) {
  file_ = gzopen(path.c_str(), "rb");
  if (file_ == nullptr) throw Error(path + ": cannot open: " + errno_text(errno != 0 ? errno : ENOMEM));
  gzbuffer(file_, kReadChunk);
}

LineReader::~LineReader() { gzclose(file_); }

bool LineReader::next(std::string& line) {
  line.clear();
  too_long_ = false;
  bool any = false;  // bytes of this line seen (kept or cut)
  for (;;) {
    if (at_ == len_ && !fill()) {
      if (!any) return false;
      break;
    }
    any = true;
    const char* start = buf_.data() + at_;
    const void* nl = std::memchr(start, '\n', len_ - at_);
    const size_t n = nl == nullptr ? len_ - at_ : static_cast<size_t>(static_cast<const char*>(nl) - start);
    size_t keep = n;
    if (max_line_ > 0 && line.size() + n > max_line_) {
      keep = max_line_ - line.size();
      too_long_ = true;
    }
    line.append(start, keep);
    at_ += nl == nullptr ? n : n + 1;
    if (nl != nullptr) break;
  }
  ++number_;
  if (!line.empty() && line.back() == '\r' && !too_long_) line.pop_back();
  return true;
}

bool LineReader::fill() {
  const int n = gzread(file_, buf_.data(), static_cast<unsigned>(buf_.size()));
  int err = Z_OK;
  const char* message = gzerror(file_, &err);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) {
    const std::string where = cite_lines_ ? path_ + ":" + std::to_string(number_ + 1) : path_;
    throw Error(where + ": " +
                (err == Z_BUF_ERROR ? std::string("truncated gzip data")
                 : err == Z_ERRNO   ? "read failed: " + errno_text(errno)
                                    : "corrupt gzip data: " + std::string(message)));
  }
  at_ = 0;
  len_ = static_cast<size_t>(n);
  return n > 0;
}

}  // namespace pstrain
