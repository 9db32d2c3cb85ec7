// The small job the in-process sparse-store tests run their shard in: 8 parameters, 10 steps,
// a global batch of 4.
#pragma once

#include "ps/job_shape.h"

namespace pstrain::test {

inline JobShape small_job_shape() {
  JobShape job;
  job.total = 8;
  job.total_steps = 10;
  job.global_batch = 4;
  return job;
}

}  // namespace pstrain::test
