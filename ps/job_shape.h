// What every worker's HELLO must say alike about the job: learned from the first HELLO a PS
// shard serves (ps/membership.h checks the others against it), and what its store is made for.
#pragma once

#include <cstdint>

namespace pstrain {

struct JobShape {
  uint64_t total = 0;         // parameters of the model (0: no HELLO served yet)
  uint64_t total_steps = 0;   // updates of the job (HELLO's step field), for the lr schedule
  uint64_t global_batch = 0;  // samples of a global step (HELLO's samples field): the same for all
};

}  // namespace pstrain
