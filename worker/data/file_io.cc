#include "worker/data/file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "shared/util/error.h"

namespace pstrain {
namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

RandomAccessFile::RandomAccessFile(const std::string& path, std::string name)
    : name_(name.empty() ? path : std::move(name)) {
  // O_NOATIME spares every pread an access-time check; only a file's owner (or root) may ask.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
  if (fd_ < 0 && errno == EPERM) fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(name_ + ": cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw Error(name_ + ": cannot stat: " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(name_ + ": not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

RandomAccessFile::~RandomAccessFile() {
  if (fd_ >= 0) ::close(fd_);
}

size_t RandomAccessFile::read_some(uint64_t offset, size_t len, void* out) const {
  auto* bytes = static_cast<uint8_t*>(out);
  size_t done = 0;
  while (done < len) {
    const ssize_t n = ::pread(fd_, bytes + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(name_ + ": read failed: " + errno_text(errno));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

void RandomAccessFile::read_exact(uint64_t offset, size_t len, void* out) const {
  if (read_some(offset, len, out) < len) {
    throw Error(name_ + ": short read of " + std::to_string(len) + " bytes at offset " +
                std::to_string(offset) + " (file truncated after it was opened?)");
  }
}

void write_all(int fd, const void* data, size_t len, const std::string& name) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (len > 0) {
    const ssize_t n = ::write(fd, bytes, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(name + ": write failed: " + errno_text(errno));
    bytes += n;
    len -= static_cast<size_t>(n);
  }
}

std::string cache_file_name(const std::string& path, const struct stat& st) {
  std::string base = std::filesystem::path(path).filename().string();
  if (base.size() > 3 && base.compare(base.size() - 3, 3, ".gz") == 0) base.resize(base.size() - 3);
  std::error_code ec;
  const std::string where = std::filesystem::absolute(path, ec).lexically_normal().string();
  const uint64_t mtime_ns =
      static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + static_cast<uint64_t>(st.st_mtim.tv_nsec);
  char suffix[96];
  std::snprintf(suffix, sizeof suffix, ".%llu.%llu.%016llx", static_cast<unsigned long long>(st.st_size),
                static_cast<unsigned long long>(mtime_ns), static_cast<unsigned long long>(fnv1a(where)));
  return base + suffix;
}

std::string parsed_cache_path(const std::string& path, const std::string& cache_dir, const std::string& suffix) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(path + ": cannot open: " + errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw Error(path + ": not a regular file");
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) throw Error(cache_dir + ": cannot create cache directory: " + ec.message());
  return cache_dir + "/" + cache_file_name(path, st) + suffix;
}

namespace {

// Finishes a written file: mode, data on disk, closed. Throws naming `name`.
void finish_file(int* fd, const std::string& name) {
  if (::fchmod(*fd, 0644) != 0 || ::fsync(*fd) != 0) throw Error(name + ": cannot finish cache file: " + errno_text(errno));
  const int closed = ::close(*fd);
  *fd = -1;
  if (closed != 0) throw Error(name + ": cannot finish cache file: " + errno_text(errno));
}

// The classic way, where the file system has no O_TMPFILE: a named temporary file beside dst.
// A process killed while it writes leaves that file behind (the unnamed one of O_TMPFILE dies
// with it).
void create_through_named_file(const std::string& dst, const std::function<void(int, const std::string&)>& write) {
  std::string tmp = dst + ".tmp-XXXXXX";
  int fd = ::mkostemp(&tmp[0], O_CLOEXEC);
  if (fd < 0) throw Error(dst + ": cannot create cache file: " + errno_text(errno));
  try {
    write(fd, tmp);
    finish_file(&fd, tmp);
    // Racing processes each write their own temporary file; rename replaces atomically.
    if (::rename(tmp.c_str(), dst.c_str()) != 0) {
      throw Error(dst + ": cannot rename cache file into place: " + errno_text(errno));
    }
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace

void create_file_atomically(const std::string& dst,
                            const std::function<void(int fd, const std::string& tmp_name)>& write) {
  const std::string dir = std::filesystem::path(dst).parent_path().string();
  // An unnamed file in dst's directory: nothing of it is left if this process fails, is stopped
  // or is killed (SIGKILL included) before it is linked in under its name.
  // (linked in through /proc/self/fd, which needs no privilege, unlike linkat's AT_EMPTY_PATH)
  int fd = ::access("/proc/self/fd", X_OK) == 0
               ? ::open(dir.empty() ? "." : dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600)
               : (errno = EOPNOTSUPP, -1);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL || errno == ENOENT)) {
    create_through_named_file(dst, write);  // no O_TMPFILE on this file system (or kernel)
    return;
  }
  if (fd < 0) throw Error(dst + ": cannot create cache file: " + errno_text(errno));
  const std::string name = dst + " (being written)";
  try {
    write(fd, name);
    if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0) throw Error(name + ": cannot finish cache file: " + errno_text(errno));
    // Linked under a unique name, then renamed over dst: racing processes each link their own
    // file, and rename replaces atomically (linkat itself refuses an existing name).
    const std::string proc = "/proc/self/fd/" + std::to_string(fd);
    std::string tmp;
    for (int attempt = 0;; ++attempt) {
      char suffix[48];
      std::snprintf(suffix, sizeof suffix, ".tmp-%d-%d", static_cast<int>(::getpid()), attempt);
      tmp = dst + suffix;
      if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) == 0) break;
      if (errno != EEXIST || attempt == 100) throw Error(dst + ": cannot link cache file into place: " + errno_text(errno));
    }
    try {
      const int closed = ::close(fd);
      fd = -1;
      if (closed != 0) throw Error(name + ": cannot finish cache file: " + errno_text(errno));
      if (::rename(tmp.c_str(), dst.c_str()) != 0) {
        throw Error(dst + ": cannot rename cache file into place: " + errno_text(errno));
      }
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  } catch (...) {
    if (fd >= 0) ::close(fd);
    throw;
  }
}

int open_scratch_file(const std::string& dir, const std::string& what) {
  const std::string where = dir.empty() ? "." : dir;
  int fd = ::open(where.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
    throw Error(what + ": cannot create: " + errno_text(errno));
  }
  std::string name = where + "/.pstrain-scratch-XXXXXX";  // no O_TMPFILE here: a unique name
  fd = ::mkostemp(&name[0], O_CLOEXEC);
  if (fd < 0) throw Error(what + ": cannot create: " + errno_text(errno));
  ::unlink(name.c_str());
  return fd;
}

}  // namespace pstrain
