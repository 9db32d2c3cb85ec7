// pstrain-ps: one parameter-server shard.
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>

#include "ps/server.h"
#include "shared/error.h"
#include "shared/log.h"

namespace {

void write_port_file(const std::string& path, const std::string& address) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << address << "\n";
    if (!out.flush()) throw pstrain::Error("cannot write --port-file '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw pstrain::Error("cannot rename '" + tmp + "' to '" + path + "'");
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto options = pstrain::parse_job_options(pstrain::Role::kPs, argc, argv);
    if (!options) return 0;
    zmq::context_t context(1);
    auto endpoint = pstrain::make_zmq_server(context, options->bind, options->port);
    if (!options->port_file.empty()) write_port_file(options->port_file, endpoint->address());
    pstrain::ParameterServer server(*options, *endpoint);
    server.serve();
    return 0;
  } catch (const pstrain::UsageError& e) {
    PSLOG(ERROR) << "pstrain-ps: " << e.what() << " (see --help)";
    return 2;
  } catch (const pstrain::Error& e) {
    PSLOG(ERROR) << "pstrain-ps: " << e.what();
    return 1;
  } catch (const std::exception& e) {
    PSLOG(ERROR) << "pstrain-ps: unexpected error: " << e.what();
    return 1;
  }
}
