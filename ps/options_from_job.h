// The job's parsed flags as a PS shard's options: the one place in ps/, besides main, that sees
// JobOptions (shared/config/options.h).
#pragma once

#include "ps/server_options.h"
#include "shared/config/options.h"

namespace pstrain {

ServerOptions server_options(const JobOptions& o);

}  // namespace pstrain
