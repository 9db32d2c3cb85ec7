#include "ps/checkpoint_writer.h"

#include <utility>

#include "shared/util/error.h"

namespace pstrain {

void CheckpointWriter::start(ShardCheckpoint c, std::vector<TableSource> tables, bool background) {
  wait();
  if (!background) return run(c, tables);
  thread_ = std::thread([this, c = std::move(c), tables = std::move(tables)]() { run(c, tables); });
}

void CheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::run(const ShardCheckpoint& c, const std::vector<TableSource>& tables) {
  if (gate_) gate_();
  try {
    if (files_.write(c, tables)) durable_.store(c.version, std::memory_order_release);
  } catch (const std::exception& e) {  // --checkpoint-errors stop: the file is absent
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = e.what();
  }
}

std::string CheckpointWriter::failure() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

}  // namespace pstrain
