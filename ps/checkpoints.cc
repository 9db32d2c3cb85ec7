#include "ps/checkpoints.h"

#include <chrono>

#include "shared/net/transport.h"
#include "shared/util/clock.h"

namespace pstrain {

ShardCheckpoints::ShardCheckpoints(const ServerOptions& options)
    : options_(options), files_(options.checkpoint, "ps" + std::to_string(options.index)) {}

void ShardCheckpoints::mark(const Header& push) {
  if (push.checkpoint != 0) checkpoint_at_ = push.checkpoint;  // the chief decides (docs/checkpoints.md)
  if (push.stop != 0) stop_at_ = push.step + 1;
}

void ShardCheckpoints::advanced(const Store& store, const SparseStore* sparse) {
  if (checkpoint_at_ == 0) return;
  // Hybrid mode: the workers hold the dense vector (this store never advances); the tables alone.
  if (options_.checkpoint.table_shards > 0) {
    if (sparse != nullptr && sparse->version() == checkpoint_at_) write(store, sparse);
    return;
  }
  if (store.version() != checkpoint_at_) return;
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
  c.optimizer = optimizer_kind_name(options_.optimizer.kind);
  store.save(&c);
  // The tables go from the arena to the file as it is written: no copy of them is made.
  const std::vector<TableSource> tables =
      sparse != nullptr ? sparse->table_sources() : std::vector<TableSource>();
  if (options_.checkpoint.table_shards > 0) {
    // Hybrid mode: file s of S + 1, before the chief's dense vector (the last file): no slice of
    // it here, only the tables (docs/checkpoints.md, "Hybrid mode").
    c.num_shards = static_cast<uint32_t>(options_.checkpoint.table_shards + 1);
    c.offset = 0;
    c.values.clear();
    for (std::vector<float>& slot : c.slots) slot.clear();
  }
  checkpoint_at_ = 0;
  const auto start = Clock::now();
  files_.write(c, tables);
  written_ = c.version;
  write_us_ = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
}

}  // namespace pstrain
