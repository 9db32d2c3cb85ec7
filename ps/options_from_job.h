// The job's parsed flags as a PS shard's options: the one place in ps/, besides main, that sees
// JobOptions (shared/config/options.h).
#pragma once

#include <string>

#include "ps/server_options.h"
#include "shared/config/options.h"

namespace pstrain {

// --max-shard-mib 0 becomes the shard's share of this host (ps/shard_memory.h).
ServerOptions server_options(const JobOptions& o);
// The shards sharing this host's memory: --shards-on-host, else every one of --num-ps.
int shards_on_host(const JobOptions& o);
// The shard's bound and where it comes from, for its first log line.
std::string max_shard_text(const JobOptions& o);

}  // namespace pstrain
