// Small helpers shared by the benchmarks: child processes, pipes, timing, flag parsing.
#pragma once

#include <sys/types.h>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace pstrain::bench {

double now_seconds();
double median(std::vector<double> values);

// Forks a child that runs `body` and exits 0 (1 if body throws). No ZeroMQ context may exist in
// the parent when forking.
pid_t fork_child(const std::function<void()>& body);
void wait_child(pid_t pid);  // exits the benchmark with an error if the child failed

// A pipe from a child to the parent (or between children forked after it).
class Pipe {
 public:
  Pipe();
  ~Pipe();
  Pipe(Pipe&& other) noexcept;
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  void write_string(const std::string& text);
  std::string read_string();
  void write_doubles(const std::vector<double>& values);
  std::vector<double> read_doubles();

 private:
  int fds_[2] = {-1, -1};
};

[[noreturn]] void usage_error(const std::string& message);
int parse_positive(const std::string& text, const std::string& flag);

template <typename T>
std::vector<T> parse_list(const std::string& text, const std::string& flag) {
  std::vector<T> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(static_cast<T>(parse_positive(item, flag)));
  if (out.empty()) usage_error(flag + " needs a comma-separated list");
  return out;
}

}  // namespace pstrain::bench
