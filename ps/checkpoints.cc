#include "ps/checkpoints.h"

#include <chrono>

#include "shared/net/transport.h"

namespace pstrain {

ShardCheckpoints::ShardCheckpoints(const ServerOptions& options)
    : options_(options), files_(options.checkpoint, "ps" + std::to_string(options.index)) {}

void ShardCheckpoints::mark(const Header& push) {
  if (push.checkpoint != 0) checkpoint_at_ = push.checkpoint;  // the chief decides (docs/checkpoints.md)
  if (push.stop != 0) stop_at_ = push.step + 1;
}

void ShardCheckpoints::advanced(const Store& store, const SparseStore* sparse) {
  if (checkpoint_at_ == 0 || store.version() != checkpoint_at_) return;
  // Sync: the tables reach the version with the same step (their pushes may come after the dense
  // ones); async applies pushes as they come, and the tables are saved as they are.
  if (sparse != nullptr && options_.mode == Mode::kSync && sparse->version() != checkpoint_at_) return;
  write(store, sparse);
}

void ShardCheckpoints::stamp(Header* h) const {
  h->stop = stop_at_ != 0 && h->step == stop_at_ ? 1 : 0;
  h->write_us = written_ != 0 && h->step == written_ ? write_us_ : 0;  // the workers' wait includes it
}

// This shard at version checkpoint_at_: its slice and optimizer state, in one durable file.
void ShardCheckpoints::write(const Store& store, const SparseStore* sparse) {
  ShardCheckpoint c;
  c.shard = static_cast<uint32_t>(options_.index);
  c.num_shards = static_cast<uint32_t>(options_.num_ps);
  c.version = checkpoint_at_;
  c.optimizer = options_.optimizer.kind;
  store.save(&c);
  if (sparse != nullptr) sparse->save(&c.tables);
  checkpoint_at_ = 0;
  const auto start = Clock::now();
  files_.write(c);
  written_ = c.version;
  write_us_ = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
}

}  // namespace pstrain
