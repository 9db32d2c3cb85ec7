// pstrain-worker: one worker of a training job.
#include <exception>
#include <vector>

#include "shared/error.h"
#include "shared/log.h"
#include "worker/trainer.h"

int main(int argc, char** argv) {
  try {
    const auto options = pstrain::parse_job_options(pstrain::Role::kWorker, argc, argv);
    if (!options) return 0;
    std::vector<std::string> servers;
    for (const auto& hp : options->ps_hosts) servers.push_back(hp.host + ":" + std::to_string(hp.port));
    zmq::context_t context(1);
    auto endpoint = pstrain::make_zmq_client(context, servers);
    pstrain::train(*options, *endpoint);
    return 0;
  } catch (const pstrain::UsageError& e) {
    PSLOG(ERROR) << "pstrain-worker: " << e.what() << " (see --help)";
    return 2;
  } catch (const pstrain::Error& e) {
    PSLOG(ERROR) << "pstrain-worker: " << e.what();
    return 1;
  } catch (const std::exception& e) {
    PSLOG(ERROR) << "pstrain-worker: unexpected error: " << e.what();
    return 1;
  }
}
