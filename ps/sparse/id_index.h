// A hash map from 64-bit ID to a 32-bit number (an embedding table's row, a place in a list):
// open addressing with linear probing in one flat array of 16-byte slots (ID, number), a
// power-of-two number of slots at most half full, deletion by backward shift (no tombstones). A
// lookup usually touches one cache line, where std::unordered_map chases a node per lookup and
// allocates one per insert: the PS's sparse apply and pulls spend most of their time here, and
// prefetch() lets a loop over many IDs ask for the lines ahead (docs/sparse.md, "Memory"). The
// slot of an ID is a mix of it with a per-process salt, so a peer cannot pick IDs that share
// slots. Single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pstrain {

class IdIndex {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;  // not a value: find()'s "no such ID"

  IdIndex();

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The value of `id`, or kAbsent.
  uint32_t find(uint64_t id) const;
  // A hint that find(id) or find_or_insert(id) comes soon: its slot's cache line is fetched.
  void prefetch(uint64_t id) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[home(id)]);
  }
  bool contains(uint64_t id) const { return find(id) != kAbsent; }
  // The value of `id` when it has one (nothing changes); else `id` gets `value` (< kAbsent) and
  // kAbsent is returned.
  uint32_t find_or_insert(uint64_t id, uint32_t value);
  // Removes `id` (if held).
  void erase(uint64_t id);
  // Removes every ID; keeps the slots (a scratch map reused step after step).
  void clear();
  // Room for n IDs without growing.
  void reserve(size_t n);

  // f(id, value) for every ID, in slot order (no order a caller may rely on).
  template <class F>
  void for_each(F&& f) const {
    for (const Slot& s : slots_) {
      if (s.value != kAbsent) f(s.id, s.value);
    }
  }

  // The slots' bytes now, and after `extra` more IDs (the slots double when they would be more
  // than half full).
  size_t bytes() const { return slots_bytes(slots_.size()); }
  size_t bytes_with(size_t extra) const;

 private:
  struct Slot {
    uint64_t id = 0;
    uint32_t value = kAbsent;  // kAbsent: an empty slot
  };
  static size_t slots_bytes(size_t slots) { return slots * sizeof(Slot); }
  static size_t slots_for(size_t n);  // the power of two a map of n IDs has (0 for n = 0)
  size_t home(uint64_t id) const { return static_cast<size_t>(mix(id ^ salt_)) & mask_; }
  // SplitMix64's finaliser: every bit of the ID moves every bit of the slot.
  static uint64_t mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
  }
  void grow(size_t slots);

  std::vector<Slot> slots_;
  size_t size_ = 0;
  size_t mask_ = 0;
  uint64_t salt_;
};

}  // namespace pstrain
