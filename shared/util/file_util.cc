#include "shared/util/file_util.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "shared/util/error.h"

namespace pstrain {
namespace {

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string os_error(const std::string& what) { return what + ": " + std::strerror(errno); }

constexpr size_t kWriteBuffer = size_t{1} << 20;  // what a FileWriter holds before it writes

}  // namespace

FileWriter::FileWriter(std::string path, bool durable)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), durable_(durable) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(os_error("cannot create '" + tmp_ + "'"));
  buffer_.reserve(kWriteBuffer);
}

FileWriter::~FileWriter() {
  if (fd_ < 0) return;  // committed, or failed (and removed)
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void FileWriter::fail(const std::string& what) {
  const std::string why = os_error(what);  // errno before close and unlink change it
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  throw Error(why);
}

void FileWriter::append(const void* data, size_t n) {
  PSTRAIN_CHECK(fd_ >= 0);
  bytes_ += n;
  if (buffer_.size() + n > kWriteBuffer) flush();
  if (n >= kWriteBuffer) {  // a large piece goes straight to the file
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail("cannot write '" + tmp_ + "'");
      p += w;
      n -= static_cast<size_t>(w);
      wrote(static_cast<size_t>(w));
    }
    return;
  }
  buffer_.append(static_cast<const char*>(data), n);
}

// A durable file of gigabytes (a checkpoint's shard file) is sent to the disk as it is written,
// 32 MiB at a time, and the pieces on the disk dropped from the page cache: the dirty pages
// never pile up to the kernel's limit, where every process that allocates memory waits for the
// writeback (issue 48: a background checkpoint stalled the training steps for seconds). The
// fsync at commit() still decides durability; these calls only pace the writeback.
void FileWriter::wrote(size_t n) {
  in_file_ += n;
#ifdef __linux__
  constexpr uint64_t kPiece = uint64_t{32} << 20;
  if (!durable_ || in_file_ - started_ < kPiece) return;
  if (started_ > synced_) {  // the previous piece: wait for it, then let its pages go
    ::sync_file_range(fd_, static_cast<off_t>(synced_), static_cast<off_t>(started_ - synced_),
                      SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    ::posix_fadvise(fd_, static_cast<off_t>(synced_), static_cast<off_t>(started_ - synced_), POSIX_FADV_DONTNEED);
    synced_ = started_;
  }
  ::sync_file_range(fd_, static_cast<off_t>(started_), static_cast<off_t>(in_file_ - started_), SYNC_FILE_RANGE_WRITE);
  started_ = in_file_;
#endif
}

void FileWriter::flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t w = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("cannot write '" + tmp_ + "'");
    done += static_cast<size_t>(w);
  }
  wrote(buffer_.size());
  buffer_.clear();
}

void FileWriter::commit() {
  PSTRAIN_CHECK(fd_ >= 0);
  flush();
  if (durable_ && ::fsync(fd_) != 0) fail("cannot flush '" + tmp_ + "' to disk");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const std::string why = os_error("cannot write '" + tmp_ + "'");
    ::unlink(tmp_.c_str());
    throw Error(why);
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string why = os_error("cannot rename '" + tmp_ + "' to '" + path_ + "'");
    ::unlink(tmp_.c_str());
    throw Error(why);
  }
  if (!durable_) return;
  const int dir = ::open(parent_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) throw Error(os_error("cannot open the directory of '" + path_ + "'"));
  const int synced = ::fsync(dir);
  ::close(dir);
  if (synced != 0) throw Error(os_error("cannot flush the directory of '" + path_ + "'"));
}

void write_file_atomically(const std::string& path, const std::string& content) {
  FileWriter out(path, false);
  out.append(content.data(), content.size());
  out.commit();
}

void write_file_durably(const std::string& path, const std::string& content) {
  FileWriter out(path, true);
  out.append(content.data(), content.size());
  out.commit();
}

bool read_whole_file(const std::string& path, std::string* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return (*error = std::string("cannot open: ") + std::strerror(errno), false);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return (*error = std::string("cannot read: ") + std::strerror(errno), false);
  *out = buffer.str();
  return true;
}

std::string cpu_usage_text() {
  struct rusage u {};
  if (getrusage(RUSAGE_SELF, &u) != 0) return "cpu_s=?";
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  char text[160];
  std::snprintf(text, sizeof text, "cpu_s=%.3f (user %.3f + sys %.3f) switches=%ld+%ld",
                seconds(u.ru_utime) + seconds(u.ru_stime), seconds(u.ru_utime), seconds(u.ru_stime), u.ru_nvcsw,
                u.ru_nivcsw);
  return text;
}

namespace {

long status_kib(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(status, line)) {
    if (line.compare(0, n, field) == 0) return std::atol(line.c_str() + n);
  }
  return 0;
}

}  // namespace

long peak_rss_kib() { return status_kib("VmHWM:"); }

long rss_kib() { return status_kib("VmRSS:"); }

}  // namespace pstrain
