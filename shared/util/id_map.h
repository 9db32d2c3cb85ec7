// A hash map from a 64-bit ID (IdMap<uint64_t>, alias IdIndex: an embedding table's ID -> row on
// the PS) or an ID in one of several tables (IdMap<TableId>: the worker's batch of keys -> its
// unique keys) to a 32-bit number. Both sides' hot loops live here (the PS's sparse apply and
// pulls, the worker's per-batch deduplication: bench/ctr.py), hence one map written for speed:
// open addressing with linear probing in one flat array of slots (16 bytes for a 64-bit ID), a
// power-of-two number of them at most half full, deletion by backward shift (no tombstones). A
// lookup usually touches one cache line, where std::unordered_map chases a node per lookup and
// allocates one per insert; prefetch() lets a loop over many IDs ask for the lines ahead
// (docs/sparse.md, "Memory"). A slot is live when its stamp is the map's: clear() forgets every
// ID in O(1) (a scratch map reused batch after batch). The slot of an ID is a mix of it with a
// per-process salt, so a peer cannot pick IDs that share slots. Single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/splitmix.h"

namespace pstrain {

// An ID in table `table` (the worker's key of a field's raw ID, docs/sparse.md).
struct TableId {
  uint64_t id;
  uint32_t table;
  friend bool operator==(const TableId& a, const TableId& b) { return a.id == b.id && a.table == b.table; }
};

// The bits a key's slot is mixed from: equal keys give equal bits.
inline uint64_t id_map_bits(uint64_t id) { return id; }
inline uint64_t id_map_bits(const TableId& key) { return key.id ^ key.table * kGolden; }

// The salt of this process's maps: random, drawn once.
uint64_t id_map_salt();

template <class Key>
class IdMap {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;  // not a value: find()'s "no such ID"

  // `salt` sets the slots; a test passes its own to make IDs share slots.
  explicit IdMap(uint64_t salt = id_map_salt()) : salt_(salt) {}

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The value of `key`, or kAbsent.
  uint32_t find(const Key& key) const {
    if (size_ == 0) return kAbsent;
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.stamp != stamp_) return kAbsent;
      if (s.key == key) return s.value;
    }
  }
  // A hint that find(key) or find_or_insert(key) comes soon: its slot's cache line is fetched.
  void prefetch(const Key& key) const {
    if (mask_ != 0) __builtin_prefetch(&slots_[home(key)]);
  }
  bool contains(const Key& key) const { return find(key) != kAbsent; }
  // The value of `key` when it has one (nothing changes); else `key` gets `value` (< kAbsent) and
  // kAbsent is returned.
  uint32_t find_or_insert(const Key& key, uint32_t value) {
    PSTRAIN_CHECK_LT(value, kAbsent);
    if (capacity() / 2 < size_ + 1) grow(slots_for(size_ + 1));
    size_t i = home(key);
    for (; slots_[i].stamp == stamp_; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return slots_[i].value;
    }
    slots_[i] = Slot{key, value, stamp_};
    ++size_;
    return kAbsent;
  }
  // Removes `key` (if held).
  void erase(const Key& key);
  // Removes every ID in O(1); keeps the slots.
  void clear();
  // Removes every ID and makes room for n without growing, in as few slots as that takes
  // (at least 16); the memory of more stays for later (a scratch map sized by each batch).
  void clear(size_t n);
  // Room for n IDs without growing.
  void reserve(size_t n) {
    if (capacity() / 2 < n) grow(slots_for(n));
  }

  // f(key, value) for every ID, in slot order (no order a caller may rely on).
  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < capacity(); ++i) {
      if (slots_[i].stamp == stamp_) f(slots_[i].key, slots_[i].value);
    }
  }

  // The slot where key's search starts (tests pick keys that share one); 0 without slots.
  size_t home_slot(const Key& key) const { return home(key); }

  // The slots' bytes now, and after `extra` more IDs (the slots double when they would be more
  // than half full).
  size_t bytes() const { return slots_bytes(slots_.size()); }
  size_t bytes_with(size_t extra) const {
    const size_t n = size_ + extra;
    return capacity() / 2 >= n ? bytes() : slots_bytes(slots_for(n));
  }

 private:
  struct Slot {
    Key key{};
    uint32_t value = 0;
    uint32_t stamp = 0;  // live when it is stamp_
  };
  static constexpr size_t kMinSlots = 16;
  static size_t slots_bytes(size_t slots) { return slots * sizeof(Slot); }
  // The power of two a map of n IDs has (0 for n = 0).
  static size_t slots_for(size_t n) {
    if (n == 0) return 0;
    size_t slots = kMinSlots;
    while (slots / 2 < n) slots *= 2;
    return slots;
  }
  size_t capacity() const { return mask_ == 0 ? 0 : mask_ + 1; }
  size_t home(const Key& key) const { return static_cast<size_t>(mix(id_map_bits(key) ^ salt_)) & mask_; }
  // SplitMix64's finaliser: every bit of the ID moves every bit of the slot.
  static uint64_t mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
  }
  void grow(size_t slots);

  std::vector<Slot> slots_;  // the map is slots_[0, mask_]; more may be kept by clear(n)
  size_t size_ = 0;
  size_t mask_ = 0;  // 0 while there are no slots
  uint32_t stamp_ = 1;
  uint64_t salt_;
};

using IdIndex = IdMap<uint64_t>;

template <class Key>
void IdMap<Key>::erase(const Key& key) {
  if (size_ == 0) return;
  size_t i = home(key);
  for (; slots_[i].stamp != stamp_ || !(slots_[i].key == key); i = (i + 1) & mask_) {
    if (slots_[i].stamp != stamp_) return;
  }
  // Backward shift: move later IDs of the run into the hole when their home is not between the
  // hole and them (cyclically), so every ID stays reachable from its home without tombstones.
  for (size_t j = (i + 1) & mask_; slots_[j].stamp == stamp_; j = (j + 1) & mask_) {
    const size_t h = home(slots_[j].key);
    const bool between = i <= j ? (i < h && h <= j) : (i < h || h <= j);
    if (between) continue;
    slots_[i] = slots_[j];
    i = j;
  }
  slots_[i].stamp = stamp_ - 1;
  --size_;
}

template <class Key>
void IdMap<Key>::clear() {
  size_ = 0;
  if (++stamp_ != 0) return;
  // Once in 2^32 clears: the stamps of 2^32 clears ago would look live.
  for (Slot& s : slots_) s.stamp = 0;
  stamp_ = 1;
}

template <class Key>
void IdMap<Key>::clear(size_t n) {
  clear();
  const size_t slots = slots_for(n < kMinSlots / 2 ? kMinSlots / 2 : n);
  if (slots > slots_.size()) {
    slots_.assign(slots, Slot{});  // nothing to keep: every stamp 0, dead
    stamp_ = 1;
  }
  mask_ = slots - 1;
}

template <class Key>
void IdMap<Key>::grow(size_t slots) {
  std::vector<Slot> old(slots);  // stamps 0: dead for any stamp_ (which is never 0)
  slots_.swap(old);
  const size_t old_capacity = capacity();
  mask_ = slots - 1;
  for (size_t k = 0; k < old_capacity; ++k) {
    const Slot& s = old[k];
    if (s.stamp != stamp_) continue;
    size_t j = home(s.key);
    while (slots_[j].stamp == stamp_) j = (j + 1) & mask_;
    slots_[j] = s;
  }
}

}  // namespace pstrain
