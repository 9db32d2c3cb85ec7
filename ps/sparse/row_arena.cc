#include "ps/sparse/row_arena.h"

#include <algorithm>

#include "shared/util/error.h"

namespace pstrain {
namespace {

constexpr size_t kBlockTarget = size_t{1} << 20;  // bytes of rows per block by default

size_t default_rows(size_t floats_per_row) {
  return std::max<size_t>(1, kBlockTarget / (floats_per_row * sizeof(float) + sizeof(RowMeta)));
}

}  // namespace

RowArena::RowArena(size_t floats_per_row, size_t rows_per_block)
    : floats_per_row_(floats_per_row),
      rows_per_block_(rows_per_block > 0 ? rows_per_block : default_rows(floats_per_row)) {
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
