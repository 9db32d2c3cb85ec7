#include "ps/options_from_job.h"

#include "shared/config/part_options.h"

namespace pstrain {

ServerOptions server_options(const JobOptions& o) {
  ServerOptions s;
  s.index = o.index;
  s.num_ps = o.num_ps;
  s.num_workers = o.num_workers;
  s.mode = o.mode;
  s.staleness = o.staleness;
  s.backup_workers = o.backup_workers;
  s.optimizer = o.optimizer;
  s.chunk_kib = o.chunk_kib;
  s.shared_memory = o.shared_memory;
  s.allow_rejoin = o.allow_rejoin;
  s.max_shard_mib = o.max_shard_mib;
  s.stall_report_s = o.stall_report_s;
  s.ipc = o.ipc;
  s.checkpoint = checkpoint_options(o);
  return s;
}

}  // namespace pstrain
