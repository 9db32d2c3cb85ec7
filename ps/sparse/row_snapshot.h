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
// it without copying. Each captured row has an atomic state: whichever thread takes a pending
// row (to copy it, or to read it) holds it for one row's memcpy, and the other waits for that
// (a lock over a block of rows, held by a writer the scheduler preempted, stalled the steps for
// whole time slices on a loaded machine). The memory taken beside the tables is 9 bytes a
// captured row and the copies of the rows changed before the writer reached them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ps/sparse/row_arena.h"

namespace pstrain {

class RowSnapshot {
 public:
  // Called by RowArena::snapshot: the arena's blocks, its rows ever taken and its free rows.
  RowSnapshot(size_t floats_per_row, int shift, const std::vector<float*>& values,
              const std::vector<RowMeta*>& meta, size_t taken, const std::vector<uint32_t>& free_rows);
  ~RowSnapshot();
  RowSnapshot(const RowSnapshot&) = delete;
  RowSnapshot& operator=(const RowSnapshot&) = delete;

  // The apply thread, before it changes row `row` (its floats or its bookkeeping).
  void before_write(uint32_t row);

  // The writer: the captured rows' (ID, row) pairs, in row order.
  std::vector<std::pair<uint64_t, uint32_t>> live_rows();
  // The writer: row `row` as captured, into values (floats_per_row floats) and *meta.
  void read(uint32_t row, float* values, RowMeta* meta);

  // The writer is done with it (the arena drops it at its next write).
  void finish() { done_.store(true, std::memory_order_release); }
  bool finished() const { return done_.load(std::memory_order_acquire); }

 private:
  enum State : uint8_t { kPending = 0, kBusy = 1, kCopied = 2, kRead = 3, kNotCaptured = 4 };
  struct Copy {
    std::unique_ptr<float[]> values;
    RowMeta meta;
  };
  State take(size_t row);  // kPending: now kBusy, this thread's; else the state it is in
  const float* row_values(uint32_t row) const { return values_[row >> shift_] + (row & mask_) * floats_per_row_; }
  const RowMeta& row_meta(uint32_t row) const { return meta_[row >> shift_][row & mask_]; }

  const size_t floats_per_row_;
  const int shift_;
  const size_t mask_;
  const std::vector<float*> values_;
  const std::vector<RowMeta*> meta_;
  const size_t taken_;
  std::unique_ptr<std::atomic<uint8_t>[]> state_;  // per captured row
  std::unique_ptr<Copy*[]> copies_;                // per captured row: its copy while kCopied
  std::atomic<bool> done_{false};
};

}  // namespace pstrain
