// A job's checkpoint options (docs/checkpoints.md), filled from its flags in main: where and when
// checkpoints are written, how many are kept, whether and from what a job resumes, and the job
// they belong to (the inputs of its fingerprint).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/checkpoint/job_fingerprint.h"
#include "shared/util/modes.h"

namespace pstrain {

struct CheckpointOptions {
  std::string dir;           // --checkpoint-dir: shard files and manifests; empty = no checkpoints
  int64_t every = 0;         // --checkpoint-every: chief: every this many steps (0 = not by steps)
  double secs = 0;           // --checkpoint-secs: chief: and this long after the last (0 = not by time)
  int keep = 3;              // --keep-checkpoints: chief: complete checkpoints kept (older ones removed)
  bool resume = false;       // --resume: start from the newest usable checkpoint in dir
  bool resume_auto = false;  // --resume auto: ... when dir holds a complete one, else fresh
  // --resume-allow: the fingerprint keys (or "all") a resumed checkpoint may differ in.
  std::vector<std::string> resume_allow;
  OnError errors = OnError::kStop;  // --checkpoint-errors: a failed write stops the job | warn, go on
  JobIdentity job;  // what the manifests' fingerprint is made of (and the shard files' optimizer)
  // Hybrid mode (--mode allreduce with tables): the PS shards, this many, write only their tables
  // (tables<s>of<S>.ckpt) beside the chief's file of the dense vector. 0 in every other mode.
  int table_shards = 0;
  // --resume: keep the saved shards' embedding tables (ShardCheckpoint::tables) for the caller.
  // A PS needs them (it re-slices them); a hybrid job's worker only checks that they are intact,
  // reading one file at a time, and keeps none (the tables never live on a worker).
  bool keep_tables = true;
};

}  // namespace pstrain
