// pstrain-worker: one worker of a training job.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <vector>

#include "shared/config/cluster_env.h"
#include "shared/config/job_topology.h"
#include "shared/config/part_options.h"
#include "shared/util/dir_lock.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "shared/net/shared_memory.h"
#include "shared/net/zmq_util.h"
#include "shared/util/run_main.h"
#include "worker/cpu/cpu_gemm.h"
#include "worker/connections.h"
#include "worker/evaluation.h"
#include "worker/layers.h"
#include "worker/options_from_job.h"
#include "worker/trainer.h"

namespace {

// Signals. Every worker removes the names of its shared-memory segments before SIGTERM, SIGINT
// or SIGHUP ends it, whenever they come (a worker stopped before its PS mapped them leaves
// nothing in /dev/shm).
//
// The chief of a job with --checkpoint-dir takes the first SIGTERM (the launcher's Ctrl-C,
// Slurm's preemption) as a request for a final checkpoint at the next step, after which the job
// stops everywhere (docs/checkpoints.md); a second SIGTERM ends it at once (the launcher sends
// one when it stops the job without a final checkpoint, so a chief blocked on a dead PS does not
// wait out the grace period). The handler only sets the flag, or removes the names and dies.
// SIGTERM is blocked in this thread before it starts any other (ZeroMQ's, the prefetcher), so no
// ZeroMQ wait is cut short with EINTR; a thread of its own, started first, keeps it unblocked,
// so some thread takes it however many threads the process has (OpenBLAS may have none).
std::atomic<bool> g_stop_requested{false};

void say(const char* line, size_t length) {  // async-signal-safe; the process ends anyway if it fails
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, line, length);
}

void on_sigterm(int) {
  static const char kFirst[] =
      "W w0: SIGTERM: a final checkpoint at the next step, then the job stops (a second SIGTERM stops it now)\n";
  static const char kSecond[] = "W w0: a second SIGTERM: stopping now, without the final checkpoint\n";
  if (!g_stop_requested.exchange(true)) return say(kFirst, sizeof(kFirst) - 1);
  say(kSecond, sizeof(kSecond) - 1);
  pstrain::remove_segment_names();
  ::signal(SIGTERM, SIG_DFL);
  ::raise(SIGTERM);  // delivered, with the default action, when this handler returns
}

void take_sigterm_as_stop_request() {
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  std::thread([] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    for (;;) pause();
  }).detach();
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

pstrain::DirLock claim_checkpoint_dir(const pstrain::JobOptions& o) {
  const char* run_dir = std::getenv("PSTRAIN_RUN_DIR");  // set by launch.sh
  return pstrain::DirLock(o.checkpoint_dir, ".pstrain-checkpoint.lock", "--checkpoint-dir",
                          "w0, the chief of a job checkpointing there" +
                              (run_dir != nullptr ? std::string(" (run directory ") + run_dir + ")" : std::string()));
}

// --check-config (launch.sh --dry-run): parse_job_options has checked the flags and the config
// file; the layer list and fault rules, parsed later in a start, are parsed here too. Starts nothing.
int check_config(const pstrain::JobOptions& o) {
  if (!o.model.empty()) pstrain::parse_model(o.model);
  pstrain::worker_fault_rules(o);
  if (o.check_config_json) {
    std::cout << pstrain::job_json(o, pstrain::job_topology(o)) << std::endl;
  } else {
    std::cout << "pstrain-worker: configuration OK" << std::endl;
  }
  return 0;
}

// --print-kernels: what the CPU backend's matrix products run on. Starts nothing.
int print_kernels() {
  const pstrain::CpuKernels k = pstrain::cpu_kernels();
  std::cout << "pstrain-worker: CPU kernels: " << k.text() << (k.generic ? " (generic: below this CPU's AVX2)" : "")
            << std::endl;
  return 0;
}

// --evaluate and --predict: a saved model on the test data, no job. False for a training job.
bool run_saved_model(const pstrain::JobOptions& o) {
  if (o.evaluate) {
    pstrain::evaluate_saved_model(pstrain::evaluate_options(o));
    return true;
  }
  if (o.predict.empty()) return false;
  pstrain::predict_saved_model(pstrain::predict_options(o));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  return pstrain::run_main("pstrain-worker", [&]() -> int {
    const auto options = pstrain::parse_job_options(pstrain::Role::kWorker, argc, argv);
    if (options && options->check_config) return check_config(*options);
    if (options && options->print_kernels) return print_kernels();
    if (!options || !pstrain::dispatch_role(pstrain::Role::kWorker, *options, argv)) return 0;
    const pstrain::JobOptions& o = *options;
    if (run_saved_model(o)) return 0;
    // Before any work, the chief claims the checkpoint directory (a second job there is refused
    // at once) and checks that --save-params can be written.
    pstrain::DirLock checkpoint_lock;
    if (o.index == 0 && !o.checkpoint_dir.empty()) checkpoint_lock = claim_checkpoint_dir(o);
    if (o.index == 0 && !o.save_params.empty()) pstrain::check_writable_dir(o.save_params, "--save-params");
    pstrain::keep_message_memory();
    pstrain::remove_segments_on_termination();
    if (!o.checkpoint_dir.empty() && o.index == 0) take_sigterm_as_stop_request();
    pstrain::WorkerConnections connections(o);
    pstrain::train(pstrain::train_options(o), [&](uint64_t total, pstrain::Replica& replica) {
      return connections.make_exchange(total, replica);
    }, &g_stop_requested);
    return 0;
  });
}
