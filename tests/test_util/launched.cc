#include "test_util/launched.h"

#include <signal.h>

#include <cstdlib>
#include <sstream>

#include "test_util/process.h"

namespace pstrain::test {

std::vector<pid_t> launched_pids(const std::string& run_dir) {
  std::vector<pid_t> pids;
  std::istringstream lines(read_file(run_dir + "/cmd.txt"));
  std::string line;
  while (std::getline(lines, line)) {
    const size_t tab = line.find('\t');
    const long pid = tab != std::string::npos ? std::atol(line.c_str() + tab + 1) : 0;
    if (pid > 0) pids.push_back(static_cast<pid_t>(pid));  // never 0 or -1: kill() would take them as groups
  }
  return pids;
}

pid_t pid_of(const std::string& run_dir, const std::string& name) {
  std::istringstream lines(read_file(run_dir + "/cmd.txt"));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + "\t", 0) == 0) return static_cast<pid_t>(std::atol(line.c_str() + name.size() + 1));
  }
  return -1;
}

bool signal_launched(const std::string& run_dir, const std::string& name, int sig) {
  pid_t pid = -1;
  wait_until([&] { return (pid = pid_of(run_dir, name)) > 0; }, 60);
  return pid > 0 && ::kill(pid, sig) == 0;
}

bool wait_for_step(pid_t launcher, const std::string& run_dir, int step) {
  const std::string text = "(global " + std::to_string(step) + ")";
  const auto logged = [&] { return read_file(run_dir + "/w0.log").find(text) != std::string::npos; };
  wait_until([&] { return logged() || !alive(launcher); }, 60);
  return logged();
}

}  // namespace pstrain::test
