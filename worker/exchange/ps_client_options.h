// A worker's PS link's options (worker/ps_link/channel.h and its clients): what it needs of the
// job. Filled from the job's flags in main (worker/options_from_job.h).
#pragma once

#include <cstdint>

#include "shared/util/modes.h"

namespace pstrain {

struct PsClientOptions {
  int index = 0;                  // this worker's index
  int num_workers = 1;            // N (HELLO: the shards check it)
  int num_ps = 1;                 // S: the endpoint's peers, in shard order
  Mode mode = Mode::kSync;        // sync | async | ssp (HELLO: the shards check it); hybrid mode: sync
  int backup_workers = 0;         // sync: a PARAMS may carry a newer version than pulled
  uint64_t samples_per_step = 64;  // all workers' samples of a global step (HELLO: every worker must agree)
  double timeout_s = 60;          // --timeout: every wait but HELLO's
  double start_timeout_s = 0;     // --start-timeout: HELLO's wait for shards still starting (0 = timeout_s)
  bool shared_memory = true;      // --shared-memory auto: offer same-host shards a segment | off
  // --embedding-dim: the floats of every table's rows (0: no tables), so that even the job's first
  // SPARSE_PULL is cut into parts by its answer's size, which a shard refuses past its chunk.
  uint32_t row_dim = 0;
};

}  // namespace pstrain
