// Which PS shard holds a sparse table's row: a fixed 64-bit mix of the row's ID, modulo the
// number of shards. Workers route their IDs with it and shards check it, and checkpoints are
// re-sliced with it, so it is part of the format (docs/sparse.md): it must never change.
#pragma once

#include <cstdint>

namespace pstrain {

// SplitMix64's finaliser applied to id + 0x9e3779b97f4a7c15 (Steele, Lea and Flood 2014): a
// bijection of the 64-bit IDs whose output bits all depend on every input bit, so consecutive
// or patterned IDs spread evenly over the shards.
uint64_t mix_id(uint64_t id);

// mix_id(id) % num_ps; num_ps >= 1.
int shard_of(uint64_t id, int num_ps);

}  // namespace pstrain
