#include "bench/bench_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>

namespace pstrain::bench {
namespace {

void read_exact(int fd, void* data, size_t size) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n <= 0) {
      std::fprintf(stderr, "bench: a child process ended without reporting\n");
      std::exit(1);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void write_exact(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n <= 0) std::_Exit(1);
    p += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

pid_t fork_child(const std::function<void()>& body) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(1);
  }
  if (pid == 0) {
    int code = 0;
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench child: %s\n", e.what());
      code = 1;
    }
    std::fflush(stdout);
    std::_Exit(code);
  }
  return pid;
}

void wait_child(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "bench: child %d failed\n", static_cast<int>(pid));
    std::exit(1);
  }
}

Pipe::Pipe() {
  if (::pipe(fds_) != 0) {
    std::perror("pipe");
    std::exit(1);
  }
}

Pipe::~Pipe() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

Pipe::Pipe(Pipe&& other) noexcept {
  std::copy(other.fds_, other.fds_ + 2, fds_);
  other.fds_[0] = other.fds_[1] = -1;
}

void Pipe::write_string(const std::string& text) {
  const size_t size = text.size();
  write_exact(fds_[1], &size, sizeof size);
  write_exact(fds_[1], text.data(), size);
}

std::string Pipe::read_string() {
  size_t size = 0;
  read_exact(fds_[0], &size, sizeof size);
  std::string text(size, '\0');
  read_exact(fds_[0], &text[0], size);
  return text;
}

void Pipe::write_doubles(const std::vector<double>& values) {
  const size_t size = values.size();
  write_exact(fds_[1], &size, sizeof size);
  write_exact(fds_[1], values.data(), size * sizeof(double));
}

std::vector<double> Pipe::read_doubles() {
  size_t size = 0;
  read_exact(fds_[0], &size, sizeof size);
  std::vector<double> values(size);
  read_exact(fds_[0], values.data(), size * sizeof(double));
  return values;
}

void usage_error(const std::string& message) {
  std::fprintf(stderr, "bench: %s (see --help)\n", message.c_str());
  std::exit(2);
}

int parse_positive(const std::string& text, const std::string& flag) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || value <= 0) usage_error(flag + ": '" + text + "' is not a positive integer");
  return static_cast<int>(value);
}

}  // namespace pstrain::bench
