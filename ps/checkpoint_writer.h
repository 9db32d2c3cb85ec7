// A PS shard's checkpoint file written on a thread of its own, so that training goes on while
// gigabytes of tables reach the disk (docs/checkpoints.md, "Background writes"). What it writes
// was captured at the step boundary: the dense slice and its slots copied (a few MB), the tables
// as copy-on-write snapshots (ps/sparse/row_snapshot.h). One write at a time: a start() while the
// previous write runs waits for it first (the caller counts that wait as the stall).
//
// The version it last wrote durably is announced to the chief in PARAMS (`durable`), and only
// then does the chief write the manifest. A failure with --checkpoint-errors stop is kept and
// handed to the apply thread (failure()), which stops the job at its next step with the error
// (the file, the version, the errno text); with warn it was logged and nothing is announced.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shared/checkpoint/checkpoint_store.h"

namespace pstrain {

class CheckpointWriter {
 public:
  explicit CheckpointWriter(const CheckpointStore& files) : files_(files) {}
  ~CheckpointWriter() { wait(); }
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Writes c and `tables` on the writer's thread (in the background = false: here, now).
  void start(ShardCheckpoint c, std::vector<TableSource> tables, bool background);
  // Until the write in progress, if any, is done.
  void wait();
  // The last version written durably (0: none).
  uint64_t durable() const { return durable_.load(std::memory_order_acquire); }
  // A write's error with --checkpoint-errors stop ("" if none): the job stops with it.
  std::string failure() const;
  // Tests: the writer's thread calls `gate` before it writes (to hold it while the apply goes on).
  void set_gate(std::function<void()> gate) { gate_ = std::move(gate); }

 private:
  void run(const ShardCheckpoint& c, const std::vector<TableSource>& tables);

  const CheckpointStore& files_;
  std::function<void()> gate_;
  std::thread thread_;
  std::atomic<uint64_t> durable_{0};
  mutable std::mutex mutex_;
  std::string failure_;
};

}  // namespace pstrain
