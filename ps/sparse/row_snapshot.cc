#include "ps/sparse/row_snapshot.h"

#include <cstring>

namespace pstrain {

RowSnapshot::RowSnapshot(size_t floats_per_row, int shift, const std::vector<float*>& values,
                         const std::vector<RowMeta*>& meta, size_t taken, const std::vector<uint32_t>& free_rows)
    : floats_per_row_(floats_per_row),
      shift_(shift),
      values_(values),
      meta_(meta),
      taken_(taken),
      state_(taken, kPending),
      blocks_(values.size()) {
  for (uint32_t row : free_rows) state_[row] = kNotCaptured;
}

void RowSnapshot::before_write(uint32_t row) {
  if (row >= taken_) return;  // a row taken after the capture: not in it
  Block& b = blocks_[block(row)];
  std::lock_guard<std::mutex> lock(b.mutex);
  if (state_[row] != kPending) return;
  Copy copy{std::make_unique<float[]>(floats_per_row_), meta_[block(row)][offset(row)]};
  std::memcpy(copy.values.get(), values_[block(row)] + offset(row) * floats_per_row_, floats_per_row_ * sizeof(float));
  b.copies.emplace(static_cast<uint32_t>(offset(row)), std::move(copy));
  state_[row] = kCopied;
}

std::vector<std::pair<uint64_t, uint32_t>> RowSnapshot::live_rows() {
  std::vector<std::pair<uint64_t, uint32_t>> rows;
  const size_t per_block = size_t{1} << shift_;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    std::lock_guard<std::mutex> lock(blocks_[b].mutex);
    for (size_t i = 0; i < per_block && b * per_block + i < taken_; ++i) {
      const uint32_t row = static_cast<uint32_t>(b * per_block + i);
      if (state_[row] == kNotCaptured) continue;
      const RowMeta& m = state_[row] == kCopied ? blocks_[b].copies.at(static_cast<uint32_t>(i)).meta : meta_[b][i];
      rows.emplace_back(m.id, row);
    }
  }
  return rows;
}

void RowSnapshot::read(uint32_t row, float* values, RowMeta* meta) {
  Block& b = blocks_[block(row)];
  std::lock_guard<std::mutex> lock(b.mutex);
  if (state_[row] == kCopied) {
    auto it = b.copies.find(static_cast<uint32_t>(offset(row)));
    std::memcpy(values, it->second.values.get(), floats_per_row_ * sizeof(float));
    *meta = it->second.meta;
    b.copies.erase(it);  // read once: its memory goes back as the writer goes
  } else {
    std::memcpy(values, values_[block(row)] + offset(row) * floats_per_row_, floats_per_row_ * sizeof(float));
    *meta = meta_[block(row)][offset(row)];
  }
  state_[row] = kRead;
}

size_t RowSnapshot::copied() {
  size_t n = 0;
  for (Block& b : blocks_) {
    std::lock_guard<std::mutex> lock(b.mutex);
    n += b.copies.size();
  }
  return n;
}

}  // namespace pstrain
