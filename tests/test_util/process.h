// Helpers for multi-process tests: spawn the real binaries on loopback, wait with deadlines.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace pstrain::test {

struct ExitStatus {
  bool timed_out = false;  // the process was still running at the deadline (then killed)
  int code = -1;           // exit code if it exited
  int signal = 0;          // signal number if it was killed
  bool ok() const { return !timed_out && signal == 0 && code == 0; }
};

// Variables for a spawned process, added to the test's own environment less every variable
// that would place the process in a cluster (TF_CONFIG, SLURM_*, OMPI_*, PSTRAIN_ROLE_*), so a
// test run inside a Slurm step or a Kubeflow pod starts the same processes as anywhere else.
using Env = std::vector<std::pair<std::string, std::string>>;

// Starts argv[0] with stdout and stderr written to log_path (truncated first); returns its pid.
pid_t spawn(const std::vector<std::string>& argv, const std::string& log_path, const Env& env = {});
// Waits for pid until timeout_s; on timeout kills it (SIGKILL) and reports timed_out.
ExitStatus wait_for(pid_t pid, double timeout_s);
std::string read_file(const std::string& path);
// n different TCP ports of 127.0.0.1 that were free a moment ago (bound together, then released
// for the processes that will bind them); `consecutive`: n ports in a row, for --base-port.
std::vector<int> free_tcp_ports(int n, bool consecutive = false);
// Waits (bounded) until `path` contains `text`: another process's progress, not a sleep.
bool wait_for_text(const std::string& path, const std::string& text, double timeout_s);
// Polls `condition` (about another process's state) until it holds or timeout_s has passed.
bool wait_until(const std::function<bool()>& condition, double timeout_s);
// Waits until `path` exists and is non-empty (a PS's --port-file); returns its first line.
std::string wait_for_file(const std::string& path, double timeout_s);
// Names in /dev/shm that process `pid` created (SharedMemory::create puts the creator's pid in
// every name: pstrain-<what>-<pid>-<random>).
std::vector<std::string> shm_segments_of(pid_t pid);
// Whether `pid` exists and is not a zombie (an orphan may stay unreaped in a container).
bool alive(pid_t pid);

// A whole job: S pstrain-ps and N pstrain-worker processes, all with `args`.
struct Job {
  int num_ps = 1;
  int num_workers = 1;
  std::vector<std::string> args;
  std::string dir;          // logs and port files go here
  double timeout_s = 120;
  std::map<int, std::vector<std::string>> worker_args;  // more flags for one worker (by index)
  // The PSes also listen at ipc://@NAME and the workers connect there (as launch.sh runs a job on
  // one host: the same-host local channel), not to their TCP port.
  bool ipc = false;
};
struct JobResult {
  std::vector<ExitStatus> ps, workers;
  std::string logs;  // every process's log, concatenated, for failure messages
  bool ok() const;
};
JobResult run_job(const Job& job);
// run_job in two halves, for a test that acts on the processes while they run.
struct StartedJob {
  std::vector<pid_t> ps, workers;
};
StartedJob start_job(const Job& job);
JobResult finish_job(const Job& job, const StartedJob& started);
// run_job for a job that may fail: once every worker has exited, and one of them failed, the PSes
// (which wait for every worker's DONE) get SIGTERM, so a failed job costs its workers' deadline.
JobResult run_job_stopping_servers(const Job& job);
// The same without parameter servers: N workers in --mode allreduce --collective `collective`,
// worker 0 the rendezvous coordinator on a free port (job.num_ps is ignored).
JobResult run_allreduce_job(const Job& job, const std::string& collective = "ring");
// Starts the PS processes only; returns their addresses ("host:port", or "ipc://@NAME" with
// job.ipc) and pids.
std::vector<std::string> start_servers(const Job& job, std::vector<pid_t>* pids);
// Runs `body` in a forked child and returns the child's peak RSS in KiB (wait4); a failed
// expectation if the child fails. The child first resets the high-water mark it inherits from
// this process, so every child starts from one base.
long child_peak_rss_kib(const std::function<void()>& body);

// How many times `what` occurs in `text` (e.g. a log line in a process's log).
size_t count_of(const std::string& text, const std::string& what);

// Child processes a test owns: any still running when the test ends (a failed assertion) are
// killed and reaped.
class Children {
 public:
  Children() = default;
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;
  ~Children();
  pid_t add(pid_t pid);
  // Waits for `pid` (as wait_for), which this no longer owns.
  ExitStatus wait(pid_t pid, double timeout_s);
  // Starts job `j`'s one PS, which this then owns: its address, and its pid in *pid.
  std::string start_ps(const Job& j, pid_t* pid);

 private:
  std::vector<pid_t> pids_;
};

// Worker `index`'s command line in `job` (its binary, index and counts, `extra`, the job's flags
// and its own), for a test that starts workers itself.
std::vector<std::string> worker_argv(const Job& job, int index, const std::vector<std::string>& extra);

}  // namespace pstrain::test
