#include "ps/sparse/id_index.h"

#include <algorithm>
#include <random>

#include "shared/util/error.h"

namespace pstrain {
namespace {

constexpr size_t kMinSlots = 16;

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

uint32_t IdIndex::find(uint64_t id) const {
  if (size_ == 0) return kAbsent;
  for (size_t i = home(id);; i = (i + 1) & mask_) {
    const Slot& s = slots_[i];
    if (s.value == kAbsent) return kAbsent;
    if (s.id == id) return s.value;
  }
}

uint32_t IdIndex::find_or_insert(uint64_t id, uint32_t value) {
  PSTRAIN_CHECK_LT(value, kAbsent);
  if (slots_.size() / 2 < size_ + 1) grow(slots_for(size_ + 1));
  size_t i = home(id);
  for (; slots_[i].value != kAbsent; i = (i + 1) & mask_) {
    if (slots_[i].id == id) return slots_[i].value;
  }
  slots_[i] = Slot{id, value};
  ++size_;
  return kAbsent;
}

void IdIndex::erase(uint64_t id) {
  if (size_ == 0) return;
  size_t i = home(id);
  for (; slots_[i].id != id || slots_[i].value == kAbsent; i = (i + 1) & mask_) {
    if (slots_[i].value == kAbsent) return;
  }
  // Backward shift: move later IDs of the run into the hole when their home is not between the
  // hole and them (cyclically), so every ID stays reachable from its home without tombstones.
  for (size_t j = (i + 1) & mask_; slots_[j].value != kAbsent; j = (j + 1) & mask_) {
    const size_t h = home(slots_[j].id);
    const bool between = i <= j ? (i < h && h <= j) : (i < h || h <= j);
    if (between) continue;
    slots_[i] = slots_[j];
    i = j;
  }
  slots_[i].value = kAbsent;
  --size_;
}

void IdIndex::clear() {
  if (size_ == 0) return;
  for (Slot& s : slots_) s.value = kAbsent;
  size_ = 0;
}

void IdIndex::reserve(size_t n) {
  if (slots_.size() / 2 < n) grow(slots_for(n));
}

size_t IdIndex::bytes_with(size_t extra) const {
  const size_t n = size_ + extra;
  return slots_.size() / 2 >= n ? bytes() : slots_bytes(slots_for(n));
}

void IdIndex::grow(size_t slots) {
  std::vector<Slot> old(slots);
  slots_.swap(old);
  mask_ = slots - 1;
  for (const Slot& s : old) {
    if (s.value == kAbsent) continue;
    size_t j = home(s.id);
    while (slots_[j].value != kAbsent) j = (j + 1) & mask_;
    slots_[j] = s;
  }
}

}  // namespace pstrain
