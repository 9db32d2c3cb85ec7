// pstrain-ps: one parameter-server shard.
#include <iostream>

#include "ps/frame_bound.h"
#include "ps/options_from_job.h"
#include "ps/server.h"
#include "shared/config/cluster_env.h"
#include "shared/config/job_topology.h"
#include "shared/config/part_options.h"
#include "shared/net/curve.h"
#include "shared/util/dir_lock.h"
#include "shared/util/error.h"
#include "shared/net/fault_endpoint.h"
#include "shared/util/file_util.h"
#include "shared/util/log.h"
#include "shared/net/shared_memory.h"
#include "shared/net/zmq_transport.h"
#include "shared/net/zmq_util.h"
#include "shared/util/numeric.h"
#include "shared/util/run_main.h"

int main(int argc, char** argv) {
  return pstrain::run_main("pstrain-ps", [&]() -> int {
    const auto options = pstrain::parse_job_options(pstrain::Role::kPs, argc, argv);
    if (options && options->check_config) {  // launch.sh --dry-run: the options are fine; start nothing
      if (!options->inject_faults.empty()) pstrain::parse_fault_rules(options->inject_faults);
      if (options->check_config_json) {
        std::cout << pstrain::job_json(*options, pstrain::job_topology(*options)) << std::endl;
      } else {
        std::cout << "pstrain-ps: configuration OK" << std::endl;
      }
      return 0;
    }
    if (options && options->print_kernels) {
      std::cout << "pstrain-ps: element-wise loops: " << pstrain::numeric_isa() << std::endl;
      return 0;
    }
    if (!options || !pstrain::dispatch_role(pstrain::Role::kPs, *options, argv)) return 0;
    // Where this shard will write its checkpoints, found unwritable now rather than at the first one.
    if (!options->checkpoint_dir.empty()) pstrain::check_writable_dir(options->checkpoint_dir, "--checkpoint-dir");
    pstrain::keep_message_memory();
    pstrain::remove_segments_on_termination();  // the parameter area, if the launcher stops this PS
    PSLOG(INFO) << "ps" << options->index << ": " << pstrain::describe_placement(*options, "") << "; binding "
                << options->bind << ":" << options->port;
    PSLOG(INFO) << "ps" << options->index << ": memory bound " << pstrain::max_shard_text(*options);
    zmq::context_t context(1);
    const pstrain::Security security =
        pstrain::resolve_security(pstrain::security_options(*options), {options->bind + ":0"});
    const auto zap = pstrain::make_zap_handler(context, security);  // before the first CURVE socket
    // A peer whose frame passes what a legal message of the job holds is disconnected by ZeroMQ
    // before the frame is received (issue 50: a 2.7 GB SPARSE_PULL was received whole first).
    const pstrain::FrameBound bound =
        pstrain::frame_bound(options->chunk_kib, options->index == 0 && options->batchnorm_global);
    PSLOG(INFO) << "ps" << options->index << ": a peer sending a frame over " << bound.bytes
                << " bytes is disconnected (" << bound.why << ")";
    pstrain::ZmqServerOptions listen;
    listen.bind_host = options->bind;
    listen.port = options->port;
    listen.ipc_name = options->ipc;
    listen.security = security;
    listen.local_channel = options->shared_memory;
    listen.max_message_bytes = bound.bytes;
    listen.log_name = "ps" + std::to_string(options->index);
    auto endpoint = pstrain::make_zmq_server(context, listen);
    if (!options->port_file.empty()) pstrain::write_file_atomically(options->port_file, endpoint->address() + "\n");
    if (!options->inject_faults.empty()) {
      endpoint = pstrain::with_faults(std::move(endpoint), pstrain::parse_fault_rules(options->inject_faults));
    }
    pstrain::ParameterServer server(pstrain::server_options(*options), *endpoint);
    server.serve();
    // The job is over here: every worker said DONE and was answered (serve closed the endpoint,
    // waiting up to 5 s for the last answers to leave). What is left is teardown, which libzmq can
    // block forever after a socket monitor (seen once in ~800 PS exits of a CI run: the launcher
    // stopped the job 30 s later and called it failed): it gets 10 s.
    pstrain::end_within(10, "ps" + std::to_string(options->index), "ZeroMQ's teardown", 0);
    return 0;
  });
}
