#include "worker/train/stop_request.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "shared/net/shared_memory.h"

namespace pstrain {
namespace {

// The handler only sets the flag, or removes the shared-memory names and dies.
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
  remove_segment_names();
  ::signal(SIGTERM, SIG_DFL);
  ::raise(SIGTERM);  // delivered, with the default action, when this handler returns
}

}  // namespace

DirLock claim_checkpoint_dir(const JobOptions& o) {
  const char* run_dir = std::getenv("PSTRAIN_RUN_DIR");  // set by launch.sh
  return DirLock(o.checkpoint_dir, ".pstrain-checkpoint.lock", "--checkpoint-dir",
                 "w0, the chief of a job checkpointing there" +
                     (run_dir != nullptr ? std::string(" (run directory ") + run_dir + ")" : std::string()));
}

const std::atomic<bool>* take_sigterm_as_stop_request() {
  struct sigaction action {};
  action.sa_handler = on_sigterm;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  // SIGTERM is blocked in this thread before it starts any other, so some thread takes it
  // however many threads the process has (OpenBLAS may have none): this one, started first.
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
  return &g_stop_requested;
}

}  // namespace pstrain
