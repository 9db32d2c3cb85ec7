// A RowArena's rows as they were at a step boundary, read by a checkpoint's background writer
// while the PS's apply goes on changing them (docs/checkpoints.md, "Background writes").
//
// Copy-on-write per row, not per block and not a copy of the arena: a CTR step's IDs are spread
// over every block of a large table, so copying a block on its first write after the capture
// would copy the whole arena within a step or two (a stall of seconds for gigabytes), where a
// row's copy costs about what its update does. fork() was not used: the PS has ZeroMQ's threads,
// and the child's copy of the address space would double the tables' pages as the parent
// writes them.
//
// The capture (on the apply thread) notes the rows that were live (every row under the
// high-water mark that was not on the free list) and the blocks' addresses (never moved nor
// freed while the arena lives). Before the apply thread changes a row the writer has not read
// yet (before_write), the row's floats and bookkeeping are copied aside; the writer reads a row
// from that copy or, untouched, from the arena, and marks it read, after which the apply writes
// it without copying. A per-block mutex orders the two threads on a row. The memory taken beside
// the tables is one byte a captured row and the copies of the rows changed before the writer
// reached them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ps/sparse/row_arena.h"

namespace pstrain {

class RowSnapshot {
 public:
  // Called by RowArena::snapshot: the arena's blocks, its rows ever taken and its free rows.
  RowSnapshot(size_t floats_per_row, int shift, const std::vector<float*>& values,
              const std::vector<RowMeta*>& meta, size_t taken, const std::vector<uint32_t>& free_rows);

  // The apply thread, before it changes row `row` (its floats or its bookkeeping).
  void before_write(uint32_t row);

  // The writer: the captured rows' (ID, row) pairs, in row order.
  std::vector<std::pair<uint64_t, uint32_t>> live_rows();
  // The writer: row `row` as captured, into values (floats_per_row floats) and *meta.
  void read(uint32_t row, float* values, RowMeta* meta);

  // The writer is done with it (the arena drops it at its next write).
  void finish() { done_.store(true, std::memory_order_release); }
  bool finished() const { return done_.load(std::memory_order_acquire); }
  // Rows copied aside so far (tests, the bench).
  size_t copied();

 private:
  enum State : uint8_t { kPending = 0, kCopied = 1, kRead = 2, kNotCaptured = 3 };
  struct Copy {
    std::unique_ptr<float[]> values;
    RowMeta meta;
  };
  struct Block {
    std::mutex mutex;
    std::unordered_map<uint32_t, Copy> copies;  // by the row's place in the block
  };
  size_t block(uint32_t row) const { return row >> shift_; }
  size_t offset(uint32_t row) const { return row & ((size_t{1} << shift_) - 1); }

  const size_t floats_per_row_;
  const int shift_;
  const std::vector<float*> values_;
  const std::vector<RowMeta*> meta_;
  const size_t taken_;
  std::vector<uint8_t> state_;  // per captured row; each guarded by its block's mutex
  std::vector<Block> blocks_;
  std::atomic<bool> done_{false};
};

}  // namespace pstrain
