#include "ps/sparse/row_arena.h"

#include <algorithm>

#include "ps/sparse/row_snapshot.h"
#include "shared/util/error.h"

namespace pstrain {
namespace {

constexpr size_t kBlockTarget = size_t{1} << 20;  // bytes of rows per block by default

// The largest power of two of rows within kBlockTarget (at least 1).
size_t default_rows(size_t floats_per_row) {
  const size_t fit = kBlockTarget / (floats_per_row * sizeof(float) + sizeof(RowMeta));
  size_t rows = 1;
  while (2 * rows <= fit) rows *= 2;
  return rows;
}

int log2_of(size_t power_of_two) {
  PSTRAIN_CHECK(power_of_two != 0 && (power_of_two & (power_of_two - 1)) == 0);
  int shift = 0;
  while ((size_t{1} << shift) < power_of_two) ++shift;
  return shift;
}

}  // namespace

RowArena::RowArena(size_t floats_per_row, size_t rows_per_block)
    : floats_per_row_(floats_per_row),
      rows_per_block_(rows_per_block > 0 ? rows_per_block : default_rows(floats_per_row)),
      shift_(log2_of(rows_per_block_)) {
  PSTRAIN_CHECK_LE(size_t{1}, floats_per_row);
}

uint32_t RowArena::allocate() {
  if (!free_.empty()) {
    const uint32_t row = free_.back();
    free_.pop_back();
    return row;
  }
  PSTRAIN_CHECK_LT(taken_, size_t{UINT32_MAX});
  if (taken_ == values_.size() * rows_per_block_) {
    values_.push_back(std::make_unique<float[]>(rows_per_block_ * floats_per_row_));
    meta_.push_back(std::make_unique<RowMeta[]>(rows_per_block_));
  }
  return static_cast<uint32_t>(taken_++);
}

void RowArena::release(uint32_t row) {
  PSTRAIN_CHECK_LT(size_t{row}, taken_);
  free_.push_back(row);
}

std::shared_ptr<RowSnapshot> RowArena::snapshot() {
  std::vector<float*> values;
  std::vector<RowMeta*> meta;
  for (size_t b = 0; b < values_.size(); ++b) {
    values.push_back(values_[b].get());
    meta.push_back(meta_[b].get());
  }
  snapshot_ = std::make_shared<RowSnapshot>(floats_per_row_, shift_, values, meta, taken_, free_);
  return snapshot_;
}

void RowArena::write_with_snapshot(uint32_t row) {
  if (snapshot_->finished()) {
    snapshot_.reset();
    return;
  }
  snapshot_->before_write(row);
}

size_t RowArena::block_bytes() const {
  return rows_per_block_ * (floats_per_row_ * sizeof(float) + sizeof(RowMeta));
}

size_t RowArena::bytes() const {
  return values_.size() * block_bytes() + free_.capacity() * sizeof(uint32_t) +
         (values_.capacity() + meta_.capacity()) * sizeof(void*);
}

size_t RowArena::bytes_to_add(size_t rows) const {
  const size_t spare = free_.size() + (values_.size() * rows_per_block_ - taken_);
  if (rows <= spare) return 0;
  const size_t blocks = (rows - spare + rows_per_block_ - 1) / rows_per_block_;
  return blocks * (block_bytes() + 2 * sizeof(void*));
}

}  // namespace pstrain
