#include "test_util/process.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "test_util/build_paths.h"

extern char** environ;

namespace pstrain::test {
namespace {

using Clock = std::chrono::steady_clock;

// Condition polling for another process (not synchronisation between threads of this one).
constexpr auto kPollInterval = std::chrono::milliseconds(5);

}  // namespace

pid_t spawn(const std::vector<std::string>& argv, const std::string& log_path, const Env& env) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> variables;  // built before fork: the child only execs
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v = *e;
    const bool cluster = v.rfind("TF_CONFIG=", 0) == 0 || v.rfind("SLURM_", 0) == 0 || v.rfind("SLURMD_", 0) == 0 ||
                         v.rfind("OMPI_", 0) == 0 || v.rfind("PSTRAIN_ROLE_", 0) == 0;
    if (!cluster) variables.push_back(v);
  }
  for (const auto& [name, value] : env) variables.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& v : variables) envp.push_back(v.data());
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  return pid;
}

ExitStatus wait_for(pid_t pid, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  ExitStatus status;
  for (;;) {
    int raw = 0;
    const pid_t r = waitpid(pid, &raw, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(raw)) status.code = WEXITSTATUS(raw);
      if (WIFSIGNALED(raw)) status.signal = WTERMSIG(raw);
      return status;
    }
    if (r < 0) return status;
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &raw, 0);
      status.timed_out = true;
      return status;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::vector<int> free_tcp_ports(int n, bool consecutive) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::vector<int> fds, ports;
    const auto bind_port = [&](int port) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      address.sin_port = htons(static_cast<uint16_t>(port));
      socklen_t size = sizeof address;
      if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
          getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
        if (fd >= 0) close(fd);
        return false;
      }
      fds.push_back(fd);
      ports.push_back(ntohs(address.sin_port));
      return true;
    };
    bool ok = true;
    for (int i = 0; i < n && ok; ++i) {
      ok = bind_port(consecutive && i > 0 ? ports[0] + i : 0);
      if (ok && consecutive && i == 0 && ports[0] + n - 1 > 65535) ok = false;
    }
    for (int fd : fds) close(fd);
    if (ok) return ports;
  }
  throw std::runtime_error("found no free TCP ports on 127.0.0.1");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string wait_for_file(const std::string& path, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    std::ifstream in(path);
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) return line;
    std::this_thread::sleep_for(kPollInterval);
  }
  throw std::runtime_error("timed out waiting for " + path);
}

bool JobResult::ok() const {
  for (const auto& s : ps) {
    if (!s.ok()) return false;
  }
  for (const auto& s : workers) {
    if (!s.ok()) return false;
  }
  return true;
}

namespace {

// An abstract ipc name unique to this test process and job directory.
std::string ipc_name(const Job& job, int shard) {
  return "@pstrain-test-" + std::to_string(::getpid()) + "-" + std::to_string(std::hash<std::string>{}(job.dir) % 1000000007) +
         "-ps" + std::to_string(shard);
}

}  // namespace

std::vector<std::string> start_servers(const Job& job, std::vector<pid_t>* pids) {
  std::vector<std::string> addresses;
  for (int s = 0; s < job.num_ps; ++s) {
    const std::string port_file = job.dir + "/ps" + std::to_string(s) + ".addr";
    std::remove(port_file.c_str());  // a previous job's address must not be read
    std::vector<std::string> argv = {PSTRAIN_PS_BIN, "--index", std::to_string(s), "--num-ps",
                                     std::to_string(job.num_ps), "--num-workers",
                                     std::to_string(job.num_workers), "--port-file", port_file};
    if (job.ipc) argv.insert(argv.end(), {"--ipc", ipc_name(job, s)});
    argv.insert(argv.end(), job.args.begin(), job.args.end());
    pids->push_back(spawn(argv, job.dir + "/ps" + std::to_string(s) + ".log"));
  }
  for (int s = 0; s < job.num_ps; ++s) {
    const std::string tcp = wait_for_file(job.dir + "/ps" + std::to_string(s) + ".addr", 30);  // bound: ready
    addresses.push_back(job.ipc ? "ipc://" + ipc_name(job, s) : tcp);
  }
  return addresses;
}

std::vector<std::string> worker_argv(const Job& job, int index, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {PSTRAIN_WORKER_BIN, "--index", std::to_string(index), "--num-ps",
                                   std::to_string(job.num_ps), "--num-workers", std::to_string(job.num_workers)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), job.args.begin(), job.args.end());
  const auto own = job.worker_args.find(index);
  if (own != job.worker_args.end()) argv.insert(argv.end(), own->second.begin(), own->second.end());
  return argv;
}

namespace {

JobResult collect(const Job& job, const std::vector<pid_t>& worker_pids, const std::vector<pid_t>& ps_pids) {
  JobResult result;
  for (pid_t pid : worker_pids) result.workers.push_back(wait_for(pid, job.timeout_s));
  for (pid_t pid : ps_pids) result.ps.push_back(wait_for(pid, 10));
  for (size_t s = 0; s < ps_pids.size(); ++s) result.logs += read_file(job.dir + "/ps" + std::to_string(s) + ".log");
  for (int i = 0; i < job.num_workers; ++i) result.logs += read_file(job.dir + "/w" + std::to_string(i) + ".log");
  return result;
}

}  // namespace

StartedJob start_job(const Job& job) {
  StartedJob started;
  const std::vector<std::string> addresses = start_servers(job, &started.ps);
  std::string hosts;
  for (const auto& a : addresses) hosts += (hosts.empty() ? "" : ",") + a;
  for (int i = 0; i < job.num_workers; ++i) {
    started.workers.push_back(
        spawn(worker_argv(job, i, {"--ps-hosts", hosts}), job.dir + "/w" + std::to_string(i) + ".log"));
  }
  return started;
}

JobResult finish_job(const Job& job, const StartedJob& started) { return collect(job, started.workers, started.ps); }

JobResult run_job(const Job& job) { return finish_job(job, start_job(job)); }

JobResult run_job_stopping_servers(const Job& job) {
  const StartedJob started = start_job(job);
  std::vector<ExitStatus> workers;
  bool failed = false;
  for (pid_t pid : started.workers) {
    workers.push_back(wait_for(pid, job.timeout_s));
    failed |= !workers.back().ok();
  }
  if (failed) {
    for (pid_t pid : started.ps) kill(pid, SIGTERM);
  }
  JobResult result = finish_job(job, started);  // the workers are reaped: their status is kept here
  result.workers = workers;
  return result;
}

JobResult run_allreduce_job(const Job& job, const std::string& collective) {
  const std::string port_file = job.dir + "/w0.addr";
  std::remove(port_file.c_str());
  const std::vector<std::string> mode = {"--mode", "allreduce", "--collective", collective};
  std::vector<std::string> chief = mode;
  chief.insert(chief.end(), {"--coordinator", "127.0.0.1:0", "--port-file", port_file});
  std::vector<pid_t> worker_pids = {spawn(worker_argv(job, 0, chief), job.dir + "/w0.log")};
  if (job.num_workers > 1) {
    std::vector<std::string> others = mode;
    others.insert(others.end(), {"--coordinator", wait_for_file(port_file, 30)});
    for (int i = 1; i < job.num_workers; ++i) {
      worker_pids.push_back(spawn(worker_argv(job, i, others), job.dir + "/w" + std::to_string(i) + ".log"));
    }
  }
  return collect(job, worker_pids, {});
}

std::vector<std::string> shm_segments_of(pid_t pid) {
  std::vector<std::string> names;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return names;
  const std::string mark = "-" + std::to_string(pid) + "-";
  while (const dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind("pstrain-", 0) == 0 && name.find(mark) != std::string::npos) names.push_back(name);
  }
  closedir(dir);
  return names;
}

bool alive(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

bool wait_until(const std::function<bool()>& condition, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool wait_for_text(const std::string& path, const std::string& text, double timeout_s) {
  return wait_until([&] { return read_file(path).find(text) != std::string::npos; }, timeout_s);
}

long child_peak_rss_kib(const std::function<void()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 0;
    try {
      std::ofstream("/proc/self/clear_refs") << "5";
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child failed: %s\n", e.what());
      code = 1;
    }
    ::_exit(code);
  }
  int status = 0;
  struct rusage usage {};
  EXPECT_EQ(::wait4(pid, &status, 0, &usage), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  return usage.ru_maxrss;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

Children::~Children() {
  for (pid_t pid : pids_) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
}

pid_t Children::add(pid_t pid) {
  pids_.push_back(pid);
  return pid;
}

ExitStatus Children::wait(pid_t pid, double timeout_s) {
  pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
  return wait_for(pid, timeout_s);
}

std::string Children::start_ps(const Job& j, pid_t* pid) {
  std::vector<pid_t> pids;
  const std::string address = start_servers(j, &pids).at(0);
  *pid = add(pids.at(0));
  return address;
}

}  // namespace pstrain::test
