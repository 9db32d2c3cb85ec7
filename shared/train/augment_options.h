// What --augment-flip and --augment-shift ask for (worker/data/augment.h applies it), here in
// shared/ because the checkpoints' fingerprint records it too, in the same words as the logs.
#pragma once

#include <cstdint>
#include <string>

namespace pstrain {

struct AugmentOptions {
  bool flip = false;  // mirror left-right, half of the records
  int shift = 0;      // move by up to this many pixels each way (0: no move)
  uint64_t seed = 0;  // the job's --seed

  bool any() const { return flip || shift > 0; }
  // "flip shift 2", "shift 1", "": for the logs and the checkpoints' fingerprint.
  std::string text() const;
};

}  // namespace pstrain
