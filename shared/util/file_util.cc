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

#include "shared/util/error.h"

namespace pstrain {
namespace {

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string os_error(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

void write_file_atomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
    if (!out.flush()) throw Error("cannot write '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("cannot rename '" + tmp + "' to '" + path + "'");
}

void write_file_durably(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(os_error("cannot create '" + tmp + "'"));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = os_error("cannot write '" + tmp + "'");
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(why);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = os_error("cannot flush '" + tmp + "' to disk");
    ::unlink(tmp.c_str());
    throw Error(why);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = os_error("cannot rename '" + tmp + "' to '" + path + "'");
    ::unlink(tmp.c_str());
    throw Error(why);
  }
  const int dir = ::open(parent_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) throw Error(os_error("cannot open the directory of '" + path + "'"));
  const int synced = ::fsync(dir);
  ::close(dir);
  if (synced != 0) throw Error(os_error("cannot flush the directory of '" + path + "'"));
}

bool read_whole_file(const std::string& path, std::string* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return (*error = std::string("cannot open: ") + std::strerror(errno), false);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return (*error = "cannot read", false);
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
