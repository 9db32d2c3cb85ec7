// pstrain-worker: one worker of a training job.
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <vector>

#include "shared/config/cluster_env.h"
#include "shared/config/job_topology.h"
#include "shared/config/part_options.h"
#include "shared/net/shared_memory.h"
#include "shared/net/zmq_util.h"
#include "shared/util/dir_lock.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "shared/util/run_main.h"
#include "worker/connections.h"
#include "worker/cpu/cpu_gemm.h"
#include "worker/model/layers.h"
#include "worker/options_from_job.h"
#include "worker/train/evaluation.h"
#include "worker/train/stop_request.h"
#include "worker/train/trainer.h"

namespace {

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
    // The --model grammar before any data is read: a typo is a usage error at once, not after
    // the training set's parse.
    if (!o.model.empty()) pstrain::parse_model(o.model);
    if (run_saved_model(o)) return 0;
    // Before any work, the chief claims the checkpoint directory (a second job there is refused
    // at once) and checks that --save-params can be written.
    pstrain::DirLock checkpoint_lock;
    if (o.index == 0 && !o.checkpoint_dir.empty()) checkpoint_lock = pstrain::claim_checkpoint_dir(o);
    if (o.index == 0 && !o.save_params.empty()) pstrain::check_writable_dir(o.save_params, "--save-params");
    pstrain::keep_message_memory();
    // Every worker removes the names of its shared-memory segments before SIGTERM, SIGINT or
    // SIGHUP ends it (a worker stopped before its PS mapped them leaves nothing in /dev/shm); the
    // chief of a checkpointing job takes SIGTERM as a stop request (worker/train/stop_request.h).
    pstrain::remove_segments_on_termination();
    const std::atomic<bool>* stop_requested = nullptr;
    if (!o.checkpoint_dir.empty() && o.index == 0) stop_requested = pstrain::take_sigterm_as_stop_request();
    pstrain::WorkerConnections connections(o);
    pstrain::train(pstrain::train_options(o), [&](uint64_t total, pstrain::Replica& replica) {
      return connections.make_exchange(total, replica);
    }, stop_requested);
    return 0;
  });
}
