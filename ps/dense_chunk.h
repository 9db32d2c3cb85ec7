// DenseStore's chunks and the pushes they keep (ps/dense_store.h): shared by the files of its
// methods: dense_store.cc (pushes, applies, pulls, checkpoints), dense_steps.cc (steps applied
// whole: held steps and --clip-norm's) and dense_values.cc (PARAMS' values, segments, the shared
// area). Only those include it.
#pragma once

#include <memory>
#include <vector>

#include "ps/dense_store.h"
#include "shared/util/clock.h"

namespace pstrain {

// One push's gradient kept until its step is applied (ordered sums, see ordered_sums_): in the
// worker's segment, or the push's own payload frame.
struct DenseStore::Source {
  int worker = 0;
  const float* shm = nullptr;  // in the worker's segment (else `frame`)
  Frame frame;
  double loss_sum = 0, eval_loss = 0;  // the push's sums that rounding makes order-dependent
  Header header;  // held steps: the push's metrics, summed once the step's workers are known
  const float* data() const { return shm != nullptr ? shm : frame.data_as<float>(); }
};

struct DenseStore::Pending {  // one step of a chunk that pushes are adding up for
  // Gradient sum: the first push's own message, the others added into it (a received message is
  // ours to write), so no push is ever copied.
  Frame accum;
  // Instead of accum where every worker pushes every step (ordered_sums_): the pushes in worker
  // order, whatever order they arrived in, summed in that order by apply() block by block, fused
  // with the update. So the same job always gives the same bits (docs/operations.md).
  std::vector<Source> sources;
  int pushes = 0;
  std::vector<bool> pushed;  // by worker
  Clock::time_point waiting_since;
  Header metrics;            // summed over its pushes (sent with PARAMS once applied)
  // --clip-norm: the pushes summed (in worker order where they are kept) once all arrived, whose
  // squares make the shard's part of the norm; applied once the whole norm is known.
  std::vector<float> sum;
  bool summed = false;
};

struct DenseStore::Chunk {
  Slice range;       // in the flat vector
  size_t local = 0;  // offset within the slice (and the optimizer's state)
  // Shared with PARAMS messages ZeroMQ has not sent yet: apply() copies it first if it is in use.
  // Null once the values moved into the shard's parameter area (in_area).
  std::shared_ptr<std::vector<float>> values;
  float* in_area = nullptr;  // the chunk's values in DenseStore::area_ (plain sync, same host)
  float* data() { return in_area != nullptr ? in_area : values->data(); }
  const float* data() const { return in_area != nullptr ? in_area : values->data(); }
  bool initialized = false;
  uint64_t version = 0;
  // The steps version, version + 1, ... that pushes arrived for (more than one only in ssp).
  std::vector<Pending> pending;  // a vector (a deque's move may throw, which vector<Chunk> refuses)
  Header last;           // metrics of the last applied step (sent with PARAMS in sync)
  uint64_t dropped = 0;  // late pushes dropped since the last step was applied (backup workers)
  // --allow-rejoin: the values and metrics of version - 1, for a replacement worker that redoes
  // the step its predecessor had pushed this chunk for (see next_step_of).
  std::shared_ptr<std::vector<float>> previous;
  Header previous_last;
};

}  // namespace pstrain
