// pstrain-keygen PATH [--force]: writes a new job key pair (ZeroMQ CURVE, docs/security.md) to
// PATH, readable by its owner only (0600), atomically. launch.sh makes RUNDIR/job.key with it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "shared/net/curve.h"
#include "shared/util/error.h"

int main(int argc, char** argv) {
  std::string path;
  bool force = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--force") {
      force = true;
    } else if (arg == "-h" || arg == "--help") {
      std::printf("usage: pstrain-keygen PATH [--force]\nWrites a new pstrain job key (CURVE) to PATH, mode 0600.\n"
                  "--force replaces an existing file. Give the file to every process with --curve-key-file PATH\n"
                  "or PSTRAIN_CURVE_KEY_FILE (docs/security.md).\n");
      return 0;
    } else if (path.empty() && arg[0] != '-') {
      path = arg;
    } else {
      std::fprintf(stderr, "pstrain-keygen: unexpected argument '%s' (see --help)\n", arg.c_str());
      return 2;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "pstrain-keygen: give the key file's path (see --help)\n");
    return 2;
  }
  struct stat st {};
  if (!force && ::stat(path.c_str(), &st) == 0) {
    std::fprintf(stderr, "pstrain-keygen: %s exists; --force replaces it\n", path.c_str());
    return 1;
  }
  try {
    const std::string text = pstrain::make_key_file_text();
    const std::string tmp = path + ".tmp";
    ::unlink(tmp.c_str());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()) || ::fsync(fd) != 0 ||
        ::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
      std::fprintf(stderr, "pstrain-keygen: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
      return 1;
    }
  } catch (const pstrain::Error& e) {
    std::fprintf(stderr, "pstrain-keygen: %s\n", e.what());
    return 1;
  }
  return 0;
}
