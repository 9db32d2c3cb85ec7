// DenseStore's values on their way out: PARAMS' payload (zero-copy, or copied into a same-host
// worker's segment), a re-registered worker's segment let go, and the shard's parameter area
// that same-host workers compute from (plain sync).
#include <algorithm>
#include <cstring>
#include <string>

#include "ps/dense_chunk.h"
#include "shared/util/log.h"

namespace pstrain {

Frame DenseStore::payload(size_t part, uint64_t want) const {
  const Chunk& c = chunks_[part];
  if (c.in_area != nullptr) {  // the area changes at the next apply: a copy of it travels
    return Frame(c.in_area, c.range.length * sizeof(float));
  }
  // Zero-copy: the frame keeps the chunk's values alive until the transport has sent it.
  const std::shared_ptr<std::vector<float>>& values = previous(c, want) ? c.previous : c.values;
  return Frame(values, values->data(), c.range.length * sizeof(float));
}

void DenseStore::copy_values(size_t part, uint64_t want, float* slice_values) const {
  const Chunk& c = chunks_[part];
  const float* values = previous(c, want) ? c.previous->data() : c.data();
  std::copy(values, values + c.range.length, slice_values + c.local);
}

// Before `worker`'s segment is unmapped (it registered again): its pushes still waiting in a
// barrier are copied out of it.
void DenseStore::release_segment(int worker) {
  for (Chunk& c : chunks_) {
    for (Pending& p : c.pending) {
      for (Source& source : p.sources) {
        if (source.worker != worker || source.shm == nullptr) continue;
        source.frame = Frame(source.shm, c.range.length * sizeof(float));
        source.shm = nullptr;
      }
    }
  }
}

void DenseStore::share_values() {
  if (shared_area_ && !area_.mapped()) create_area();
}

// At the first same-host worker's HELLO in plain sync: the shard's values move into a segment
// that same-host workers map read-only (WELCOME shm 2). Not fatal when it cannot be made: the
// workers then get the values copied into their own segments (shm 1).
void DenseStore::create_area() {
  std::string why;
  if (!SharedMemory::create("pstrain-ps" + std::to_string(options_.index) + "-params", slice_.length * sizeof(float),
                            &area_, &why)) {
    PSLOG(INFO) << "ps" << options_.index << ": no shared parameter area (" << why
                << "): each same-host worker gets its own copy of the values";
    return;
  }
  float* area = static_cast<float*>(area_.data());
  for (Chunk& c : chunks_) {
    std::memcpy(area + c.local, c.data(), c.range.length * sizeof(float));
    c.in_area = area + c.local;
    c.values.reset();  // PARAMS still in flight hold their own reference
  }
  PSLOG(INFO) << "ps" << options_.index << ": values in shared memory (" << area_.name()
              << "): same-host workers compute from them, no copy per step";
}

// The area's name goes once every worker has registered and each that was offered the area has
// sent a message since (so it has mapped it, or given up on it; the loop asks ps/membership.h):
// nothing is left in /dev/shm, and a PS stopped before then removes it too
// (remove_segments_on_termination, ps/main.cc).
void DenseStore::release_area_name() {
  if (!area_.owns_name()) return;
  area_.unlink();
  PSLOG(INFO) << "ps" << options_.index << ": every worker has mapped the parameter area (or uses its own copy); "
              << "its name is removed";
}

}  // namespace pstrain
