#include "ps/sparse/row_snapshot.h"

#include <cstring>
#include <thread>

namespace pstrain {

RowSnapshot::RowSnapshot(size_t floats_per_row, int shift, const std::vector<float*>& values,
                         const std::vector<RowMeta*>& meta, size_t taken, const std::vector<uint32_t>& free_rows)
    : floats_per_row_(floats_per_row),
      shift_(shift),
      mask_((size_t{1} << shift) - 1),
      values_(values),
      meta_(meta),
      taken_(taken),
      state_(new std::atomic<uint8_t>[taken]),
      copies_(new Copy*[taken]()) {
  for (size_t r = 0; r < taken; ++r) state_[r].store(kPending, std::memory_order_relaxed);
  for (uint32_t row : free_rows) state_[row].store(kNotCaptured, std::memory_order_relaxed);
}

RowSnapshot::~RowSnapshot() {
  for (size_t r = 0; r < taken_; ++r) delete copies_[r];  // rows a failed write never read
}

RowSnapshot::State RowSnapshot::take(size_t row) {
  for (;;) {
    uint8_t s = state_[row].load(std::memory_order_acquire);
    if (s == kPending) {
      if (state_[row].compare_exchange_weak(s, kBusy, std::memory_order_acquire)) return kPending;
      continue;
    }
    if (s != kBusy) return static_cast<State>(s);
    std::this_thread::yield();  // the other thread holds it for one row's memcpy
  }
}

void RowSnapshot::before_write(uint32_t row) {
  if (row >= taken_) return;  // a row taken after the capture: not in it
  const uint8_t s = state_[row].load(std::memory_order_acquire);
  if (s != kPending && s != kBusy) return;  // copied, read, or not captured
  if (take(row) != kPending) return;
  auto* copy = new Copy{std::make_unique<float[]>(floats_per_row_), row_meta(row)};
  std::memcpy(copy->values.get(), row_values(row), floats_per_row_ * sizeof(float));
  copies_[row] = copy;
  state_[row].store(kCopied, std::memory_order_release);
}

std::vector<std::pair<uint64_t, uint32_t>> RowSnapshot::live_rows() {
  std::vector<std::pair<uint64_t, uint32_t>> rows;
  for (size_t r = 0; r < taken_; ++r) {
    const uint32_t row = static_cast<uint32_t>(r);
    const State s = take(r);
    if (s == kPending) {
      rows.emplace_back(row_meta(row).id, row);
      state_[r].store(kPending, std::memory_order_release);
    } else if (s == kCopied) {
      rows.emplace_back(copies_[r]->meta.id, row);
    }
  }
  return rows;
}

void RowSnapshot::read(uint32_t row, float* values, RowMeta* meta) {
  const State s = take(row);
  if (s == kCopied) {
    Copy* copy = copies_[row];
    std::memcpy(values, copy->values.get(), floats_per_row_ * sizeof(float));
    *meta = copy->meta;
    copies_[row] = nullptr;
    delete copy;  // read once: its memory goes back as the writer goes
  } else {
    std::memcpy(values, row_values(row), floats_per_row_ * sizeof(float));
    *meta = row_meta(row);
  }
  state_[row].store(kRead, std::memory_order_release);
}

}  // namespace pstrain
