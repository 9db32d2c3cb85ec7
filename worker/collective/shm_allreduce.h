// The all-reduce through shared memory (docs/collective.md, "Same host"): when every rank of the
// ring runs on one host, the ranks write their buffers into one shared segment, each sums its
// segment of all of them, and each copies the sum back: two barriers per call, no socket and no
// other thread on the data path. The ring it wraps does the rendezvous, the broadcast, the vote
// on whether every rank could map the segment (else the ring itself all-reduces), and buffers
// larger than the segment made for the first call.
#pragma once

#include <memory>

#include "worker/collective/collective.h"

namespace pstrain {

// `ring`: the connected ring collective of this rank (world > 1). `try_shared_memory` false makes
// this rank vote against shared memory (as a rank on another host does), so all ranks use the ring.
std::unique_ptr<Collective> make_shared_memory_collective(std::unique_ptr<Collective> ring, double timeout_s,
                                                          bool try_shared_memory = true);

}  // namespace pstrain
