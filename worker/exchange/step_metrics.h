// What a step's exchange carries besides parameters and gradients, in the words of the trainer,
// the exchanges and the progress lines: a worker's figures riding with its gradient (PushInfo),
// the global step's figures coming back with the parameters (StepMetrics), and their parts. Kept
// apart from the PS client so that what only reads them need not know how they travel.
#pragma once

#include <cstdint>
#include <vector>

#include "shared/wire/protocol.h"

namespace pstrain {

// Sums over a share of the test set: records evaluated, their loss and correct predictions.
struct EvalSums {
  uint64_t samples = 0;
  double loss_sum = 0;
  uint64_t correct = 0;
};

// A PS shard's own figures since it started, from its PARAMS (the first chunk of its slice):
// time spent applying updates, and message frame bytes received and sent on its sockets (not the
// payloads that go through shared memory).
struct ShardFigures {
  uint64_t apply_us = 0, bytes_in = 0, bytes_out = 0;
};

struct StepMetrics {  // of one global step, over all workers (from shard 0)
  uint64_t samples = 0;
  double loss_sum = 0;
  uint64_t correct = 0;
  StepTimes times;          // summed over workers: divide by N for the mean
  uint32_t slowest = 0;     // the worker with the largest busy time
  uint64_t slowest_us = 0;
  bool stop = false;        // the job stops after this version (a final checkpoint was asked)
  uint64_t write_us = 0;    // the longest shard's checkpoint stall at this version (part of the wait)
  // Every checkpoint version up to this one is on disk on every shard (the PS shards' `durable`,
  // the least of them; where nothing writes in the background, all of them are).
  uint64_t durable = UINT64_MAX;
  // Where the worker goes on: the parameters received are at least `version` (the least advanced
  // chunk's), and the worker's next step is next_step (step + 1, except with backup workers when
  // the job moved on without this worker: then the version received).
  uint64_t version = 0, next_step = 0;
  // async and ssp (from shard 0's first chunk): gradients applied since this worker's last pull,
  // their staleness (async: updates applied between the pull a gradient was computed on and its
  // own; ssp: its step minus the version it was computed on), summed and the largest, and in ssp
  // the largest lead of a pushing worker over the slowest. Backup workers: late pushes dropped.
  uint64_t stale_sum = 0, stale_count = 0, stale_max = 0, lead_max = 0, dropped = 0;
  EvalSums eval{};  // the workers' shares of the test set, evaluated after the step before (summed)
  std::vector<ShardFigures> shards{};  // PS exchange: shard s's figures, cumulative; else empty
};

struct PushInfo {  // what rides along with this worker's gradient chunks
  uint64_t samples = 0;
  double loss_sum = 0;
  uint64_t correct = 0;
  StepTimes times;  // of this worker's previous step
  EvalSums eval{};  // its share of the test set, evaluated after that step (samples 0: none)
  uint64_t checkpoint = 0;  // chief: the PS shards checkpoint version step+1 (0 = no)
  bool stop = false;        // chief: ...and the job stops after it
};

}  // namespace pstrain
