// The job's shape, resolved once from its parsed flags: which processes there are, the mode each
// side speaks, whether the job is hybrid, where its tables and checkpoints live, and every choice
// of the flags as an enum. The converters (ps/options_from_job.h, worker/options_from_job.h,
// shared/config/part_options.h) read it instead of deriving these again, and the binaries print
// it (--check-config --json) for launch.sh, which needs the same answers (docs/operations.md, "The resolved job").
#pragma once

#include <string>
#include <vector>

#include "shared/config/data_files.h"  // DataKind: --data-format / --schema / the files' names, resolved
#include "shared/config/options.h"

namespace pstrain {


struct JobChoices {  // the flags' words as enums (parse_job_choices)
  EmbeddingTables embedding_tables = EmbeddingTables::kShared;
  EmbeddingPool embedding_pool = EmbeddingPool::kSum;
  TableOptimizer embedding_optimizer = TableOptimizer::kAdagrad;
  DeviceKind device = DeviceKind::kAuto;
  int device_index = -1;  // cuda:K's K; -1: none given
  DataKind data = DataKind::kIdx;  // of --train-data (else --test-data; IDX from --data-dir without either)
};

struct JobTopology {
  Role role = Role::kWorker;
  int index = 0;
  Mode mode = Mode::kSync;     // --mode: what the workers run
  // Hybrid mode: --mode allreduce with embedding tables. The workers all-reduce the dense
  // parameters; the PS shards hold the tables, whose steps are sync steps.
  bool hybrid = false;
  bool has_ps = true;          // PS shards exist: every mode but plain allreduce
  Mode ps_mode = Mode::kSync;  // what the PS shards (and a worker's PS client) speak: mode, sync when hybrid
  int num_workers = 1;
  int num_ps = 1;              // PS shards the job starts (0 without: plain allreduce)
  std::vector<std::string> tables;  // embedding tables in id order (embedding_table_names)
  // A checkpoint's files: the PS shards' (sync); allreduce: the chief's one file, and in hybrid
  // mode before it each table shard's (table_shards of them, 0 otherwise).
  int table_shards = 0;
  int checkpoint_shards = 1;
  JobChoices choices;
};

// The enums of o's text choices; throws pstrain::UsageError with the flag's message for a word
// outside its list ("--embedding-pool: 'max' is not one of sum, mean"). validate() calls it, so
// after parse_job_options it cannot throw.
JobChoices parse_job_choices(const JobOptions& o);
JobTopology job_topology(const JobOptions& o);


// --check-config --json: one JSON object of the resolved job (keys in docs/operations.md, "The resolved job"), no newline.
std::string job_json(const JobOptions& o, const JobTopology& t);

}  // namespace pstrain
