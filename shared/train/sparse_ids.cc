#include "shared/train/sparse_ids.h"

#include "shared/util/error.h"

namespace pstrain {

uint64_t mix_id(uint64_t id) {
  uint64_t x = id + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int shard_of(uint64_t id, int num_ps) {
  PSTRAIN_CHECK_LE(1, num_ps);
  return static_cast<int>(mix_id(id) % static_cast<uint64_t>(num_ps));
}

}  // namespace pstrain
