#include "shared/train/sparse_ids.h"

#include "shared/util/error.h"
#include "shared/util/splitmix.h"

namespace pstrain {

uint64_t mix_id(uint64_t id) { return splitmix64(id); }

int shard_of(uint64_t id, int num_ps) {
  PSTRAIN_CHECK_LE(1, num_ps);
  return static_cast<int>(mix_id(id) % static_cast<uint64_t>(num_ps));
}

}  // namespace pstrain
