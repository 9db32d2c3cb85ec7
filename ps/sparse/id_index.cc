#include "ps/sparse/id_index.h"

#include <algorithm>
#include <random>

#include "shared/util/error.h"

namespace pstrain {
namespace {

constexpr size_t kMinSlots = 16;

// SplitMix64's finaliser: every bit of the ID moves every bit of the slot.
uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t process_salt() {
  static const uint64_t salt = [] {
    std::random_device device;
    return uint64_t{device()} << 32 | device();
  }();
  return salt;
}

}  // namespace

IdIndex::IdIndex() : salt_(process_salt()) {}

size_t IdIndex::slots_for(size_t n) {
  if (n == 0) return 0;
  size_t slots = kMinSlots;
  while (slots / 2 < n) slots *= 2;
  return slots;
}

size_t IdIndex::home(uint64_t id) const { return static_cast<size_t>(mix(id ^ salt_)) & mask_; }

uint32_t IdIndex::find(uint64_t id) const {
  if (size_ == 0) return kAbsent;
  for (size_t i = home(id);; i = (i + 1) & mask_) {
    if (values_[i] == kAbsent) return kAbsent;
    if (ids_[i] == id) return values_[i];
  }
}

uint32_t IdIndex::find_or_insert(uint64_t id, uint32_t value) {
  PSTRAIN_CHECK_LT(value, kAbsent);
  if (values_.size() / 2 < size_ + 1) grow(slots_for(size_ + 1));
  size_t i = home(id);
  for (; values_[i] != kAbsent; i = (i + 1) & mask_) {
    if (ids_[i] == id) return values_[i];
  }
  ids_[i] = id;
  values_[i] = value;
  ++size_;
  return kAbsent;
}

void IdIndex::erase(uint64_t id) {
  if (size_ == 0) return;
  size_t i = home(id);
  for (; ids_[i] != id || values_[i] == kAbsent; i = (i + 1) & mask_) {
    if (values_[i] == kAbsent) return;
  }
  // Backward shift: move later IDs of the run into the hole when their home is not between the
  // hole and them (cyclically), so every ID stays reachable from its home without tombstones.
  for (size_t j = (i + 1) & mask_; values_[j] != kAbsent; j = (j + 1) & mask_) {
    const size_t h = home(ids_[j]);
    const bool between = i <= j ? (i < h && h <= j) : (i < h || h <= j);
    if (between) continue;
    ids_[i] = ids_[j];
    values_[i] = values_[j];
    i = j;
  }
  values_[i] = kAbsent;
  --size_;
}

void IdIndex::clear() {
  if (size_ == 0) return;
  std::fill(values_.begin(), values_.end(), kAbsent);
  size_ = 0;
}

void IdIndex::reserve(size_t n) {
  if (values_.size() / 2 < n) grow(slots_for(n));
}

size_t IdIndex::bytes_with(size_t extra) const {
  const size_t n = size_ + extra;
  return values_.size() / 2 >= n ? bytes() : slots_bytes(slots_for(n));
}

void IdIndex::grow(size_t slots) {
  std::vector<uint64_t> ids(slots);
  std::vector<uint32_t> values(slots, kAbsent);
  ids_.swap(ids);
  values_.swap(values);
  mask_ = slots - 1;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] == kAbsent) continue;
    size_t j = home(ids[i]);
    while (values_[j] != kAbsent) j = (j + 1) & mask_;
    ids_[j] = ids[i];
    values_[j] = values[i];
  }
}

}  // namespace pstrain
