#include "ps/options_from_job.h"

#include "ps/shard_memory.h"
#include "shared/config/job_topology.h"
#include "shared/config/part_options.h"
#include "shared/train/row_init.h"

namespace pstrain {

int shards_on_host(const JobOptions& o) { return o.shards_on_host > 0 ? o.shards_on_host : o.num_ps; }

std::string max_shard_text(const JobOptions& o) {
  if (o.max_shard_mib > 0) return std::to_string(o.max_shard_mib) + " MiB (--max-shard-mib)";
  return default_max_shard_text(physical_memory_mib(), shards_on_host(o),
                                least_row_bytes(server_options(o).tables));
}

ServerOptions server_options(const JobOptions& o) {
  const JobTopology topology = job_topology(o);
  ServerOptions s;
  s.index = o.index;
  s.num_ps = o.num_ps;
  s.num_workers = o.num_workers;
  s.mode = topology.ps_mode;  // hybrid mode: the tables' steps are sync steps
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
  const std::vector<std::string>& names = topology.tables;
  for (size_t t = 0; t < names.size(); ++t) {
    TableOptions table;
    table.name = names[t];
    table.id = static_cast<uint32_t>(t);
    table.dim = static_cast<size_t>(o.embedding_dim);
    table.optimizer.kind = topology.choices.embedding_optimizer;
    table.optimizer.beta1 = o.optimizer.beta1;
    table.optimizer.beta2 = o.optimizer.beta2;
    table.optimizer.epsilon = o.optimizer.epsilon;
    table.init.kind = row_init_for(topology.choices.embedding_optimizer);
    table.seed = o.seed;
    table.min_count = static_cast<uint32_t>(o.embedding_min_count);
    table.expiry_steps = static_cast<uint64_t>(o.embedding_expiry);
    s.tables.push_back(table);
  }
  if (o.max_shard_mib == 0) {  // the shard's share of this host (ps/shard_memory.h)
    s.max_shard_mib = static_cast<int64_t>(
        default_max_shard_mib(physical_memory_mib(), shards_on_host(o), least_row_bytes(s.tables)));
  }
  s.save_params = o.save_params;
  s.init_params = o.init_params;
  s.table_lr = o.embedding_lr > 0 ? o.embedding_lr : o.optimizer.lr;
  return s;
}

}  // namespace pstrain
