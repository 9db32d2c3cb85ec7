// A hash map from 64-bit ID to a 32-bit number (an embedding table's row, a place in a list):
// open addressing with linear probing in two flat arrays (IDs, numbers), a power-of-two number of
// slots at most half full, deletion by backward shift (no tombstones). One probe usually touches
// one cache line of each array, where std::unordered_map chases a node per lookup and allocates
// one per insert: the PS's sparse apply and pulls spend most of their time here (docs/sparse.md,
// "Memory" and "Speed"). The slot of an ID is a mix of it with a per-process salt, so a peer
// cannot pick IDs that share slots. Single-threaded.
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
    for (size_t i = 0; i < values_.size(); ++i) {
      if (values_[i] != kAbsent) f(ids_[i], values_[i]);
    }
  }

  // The slots' bytes now, and after `extra` more IDs (the slots double when they would be more
  // than half full).
  size_t bytes() const { return slots_bytes(values_.size()); }
  size_t bytes_with(size_t extra) const;

 private:
  static size_t slots_bytes(size_t slots) { return slots * (sizeof(uint64_t) + sizeof(uint32_t)); }
  static size_t slots_for(size_t n);  // the power of two a map of n IDs has (0 for n = 0)
  size_t home(uint64_t id) const;
  void grow(size_t slots);

  std::vector<uint64_t> ids_;
  std::vector<uint32_t> values_;  // kAbsent: an empty slot
  size_t size_ = 0;
  size_t mask_ = 0;
  uint64_t salt_;
};

}  // namespace pstrain
