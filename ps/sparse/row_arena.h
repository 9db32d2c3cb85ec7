// The rows of one embedding table: fixed-size rows of floats (weights, then the optimizer's
// slots) in blocks of a power of two of rows (a row's block and place are a shift and a mask, not
// a division: the PS's sparse apply finds rows by the ten thousand a step), allocated as the
// table grows, never moved, and per-row bookkeeping beside
// them. A released row's index is reused before a new one is taken, so the memory a table holds
// is its live rows rounded up to whole blocks (docs/sparse.md, "Memory").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace pstrain {

class RowSnapshot;

struct RowMeta {
  uint64_t id = 0;
  uint64_t last_touched = 0;  // the last step that updated (or created) the row
  uint64_t updates = 0;       // updates applied to the row (lazy Adam's t)
};

class RowArena {
 public:
  // Rows of `floats_per_row` floats, `rows_per_block` (a power of two) to a block (0: the largest
  // power of two within 1 MiB of rows).
  RowArena(size_t floats_per_row, size_t rows_per_block);

  uint32_t allocate();  // a row index whose contents the caller fills
  void release(uint32_t row);
  float* values(uint32_t row) { return values_[block(row)].get() + offset(row) * floats_per_row_; }
  const float* values(uint32_t row) const { return values_[block(row)].get() + offset(row) * floats_per_row_; }
  RowMeta& meta(uint32_t row) { return meta_[block(row)][offset(row)]; }
  const RowMeta& meta(uint32_t row) const { return meta_[block(row)][offset(row)]; }

  // A checkpoint's capture of the rows now (ps/sparse/row_snapshot.h); until the writer finishes
  // it, before_write copies a row aside before its first change. Apply thread only.
  std::shared_ptr<RowSnapshot> snapshot();
  void before_write(uint32_t row) {
    if (snapshot_ != nullptr) write_with_snapshot(row);
  }

  size_t live() const { return taken_ - free_.size(); }
  size_t bytes() const;                      // blocks and the free list, as allocated
  size_t bytes_to_add(size_t rows) const;    // what allocating `rows` more rows would add
  size_t block_bytes() const;

 private:
  size_t block(uint32_t row) const { return row >> shift_; }
  size_t offset(uint32_t row) const { return row & (rows_per_block_ - 1); }
  void write_with_snapshot(uint32_t row);

  const size_t floats_per_row_;
  const size_t rows_per_block_;
  const int shift_;  // log2(rows_per_block_)
  std::vector<std::unique_ptr<float[]>> values_;
  std::vector<std::unique_ptr<RowMeta[]>> meta_;
  std::vector<uint32_t> free_;  // released rows, reused last-in first-out
  size_t taken_ = 0;            // rows ever handed out (the high-water mark)
  std::shared_ptr<RowSnapshot> snapshot_;  // a checkpoint being written, if any
};

}  // namespace pstrain
