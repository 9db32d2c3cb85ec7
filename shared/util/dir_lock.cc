#include "shared/util/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <utility>
#include <vector>

#include "shared/util/error.h"

namespace pstrain {
namespace {

void make_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(what + ": cannot create directory " + dir + ": " + ec.message());
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &tm);
  return text;
}

std::string holder_of(int fd) {
  char text[512] = {};
  const ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
  std::string holder = n > 0 ? std::string(text, static_cast<size_t>(n)) : "";
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\r')) holder.pop_back();
  return holder.empty() ? "a process that has not said who it is yet" : holder;
}

}  // namespace

DirLock::DirLock(const std::string& dir, const std::string& file, const std::string& flag, const std::string& holder) {
  make_dir(dir, flag);
  const std::string path = dir + "/" + file;
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(flag + ": cannot create " + path + ": " + std::strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holding = err == EWOULDBLOCK ? holder_of(fd) : "";
    close(fd);
    if (err == EWOULDBLOCK) {
      throw UsageError(flag + ": " + dir + " is in use by another job: " + holding + " (" + path +
                       " is locked; give this job a directory of its own)");
    }
    throw Error(flag + ": cannot lock " + path + ": " + std::strerror(err));
  }
  const std::string text =
      "pid " + std::to_string(getpid()) + " on host " + host_name() + ": " + holder + ", since " + now_text() + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    const int err = errno;
    close(fd);
    throw Error(flag + ": cannot write " + path + ": " + std::strerror(err));
  }
  fd_ = fd;
}

DirLock::~DirLock() {
  if (fd_ >= 0) close(fd_);  // the lock goes with the descriptor; the file stays (it names no one then)
}

DirLock::DirLock(DirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void check_writable_dir(const std::string& dir, const std::string& flag) {
  // The directories made for the check go again while they are empty: a job that ends before it
  // saves leaves none, and nothing another process put there is touched. Several processes of a
  // job check one directory at once (the PS shards): one may remove it between another's mkdir
  // and its probe, which then makes it again (ENOENT).
  std::vector<std::filesystem::path> made;  // deepest first
  for (std::filesystem::path p = std::filesystem::absolute(dir); !p.empty() && !std::filesystem::exists(p);
       p = p.parent_path()) {
    made.push_back(p);
    if (p == p.parent_path()) break;
  }
  const std::string probe = dir + "/.pstrain-write-check." + std::to_string(getpid());
  int fd = -1, err = 0;
  std::error_code made_error;
  // Each failed attempt means another process removed the directory between this one's mkdir and
  // its probe; under load (a sanitiser's, many shards) that can happen many times in a row.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    made_error.clear();
    std::filesystem::create_directories(dir, made_error);
    // A parent went meanwhile; or another process made a level between create_directories' own
    // check and its mkdir, which libstdc++ reports as "File exists": both are worth another try
    // (a path that is a file stays one, and is reported after the attempts).
    if (made_error == std::errc::no_such_file_or_directory || made_error == std::errc::file_exists) continue;
    if (made_error) break;
    fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    err = errno;
    if (fd >= 0 || err != ENOENT) break;
  }
  if (made_error) throw Error(flag + ": cannot create directory " + dir + ": " + made_error.message());
  if (fd >= 0) {
    close(fd);
    unlink(probe.c_str());
  }
  for (const std::filesystem::path& p : made) {
    std::error_code ec;
    std::filesystem::remove(p, ec);  // rmdir: fails, harmlessly, where something is in it
  }
  if (fd < 0) throw Error(flag + ": cannot write into " + dir + ": " + std::strerror(err));
}

}  // namespace pstrain
