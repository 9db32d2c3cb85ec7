// A PS shard's options: what its loop (ps/server.h), membership, store, consistency policy and
// checkpoints need of the job. Filled from the job's flags in main (ps/options_from_job.h);
// nothing in ps/ but that converter sees the flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ps/sparse/embedding_table.h"

#include "shared/checkpoint/checkpoint_options.h"
#include "shared/util/modes.h"
#include "shared/train/optimizer.h"

namespace pstrain {

struct ServerOptions {
  int index = 0;               // this shard's index, in [0, num_ps)
  int num_ps = 1;              // S: the shards the model is sliced over
  int num_workers = 1;         // N
  Mode mode = Mode::kSync;     // sync | async | ssp (allreduce has no PS: ConsistencyPolicy refuses it)
  int staleness = 2;           // ssp: a worker may run this many steps ahead of the slowest
  int backup_workers = 0;      // sync: a step is applied once N - backup_workers workers pushed it
  OptimizerOptions optimizer;  // applied to the slice
  int chunk_kib = 1024;        // largest message payload: the slice is sent in chunks of this
  bool shared_memory = true;   // same-host workers' segments are mapped (--shared-memory auto) | never
  bool allow_rejoin = false;   // a worker's HELLO from a new peer replaces it (launch.sh --max-restarts)
  int64_t max_shard_mib = 0;   // refuse a model whose shard state needs more (0 = physical memory)
  double stall_report_s = 10;  // report a barrier stalled longer than this
  std::string ipc;             // the ipc:// name it also listens on, for its first log line ("" = none)
  CheckpointOptions checkpoint;  // its checkpoint writes and --resume
  // Embedding tables (docs/sparse.md): each shard holds the rows of the IDs shard_of gives it.
  std::vector<TableOptions> tables;  // empty: a dense job
  double table_lr = 0;               // the tables' learning rate, on the dense one's schedule
  std::string save_params;           // --save-params DIR: the tables' rows go to DIR/embeddings at the end
  std::string init_params;           // --init-params DIR: a new job's tables start as DIR/embeddings' rows
};

}  // namespace pstrain
