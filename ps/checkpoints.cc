#include "ps/checkpoints.h"

#include <chrono>
#include <utility>

#include "shared/net/transport.h"
#include "shared/util/clock.h"
#include "shared/util/error.h"

namespace pstrain {

ShardCheckpoints::ShardCheckpoints(const ServerOptions& options)
    : options_(options), files_(options.checkpoint, "ps" + std::to_string(options.index)) {}

void ShardCheckpoints::mark(const Header& push) {
  if (push.checkpoint != 0) checkpoint_at_ = push.checkpoint;  // the chief decides (docs/checkpoints.md)
  if (push.stop != 0) stop_at_ = push.step + 1;
}

void ShardCheckpoints::throw_failure() const {
  const std::string failure = writer_.failure();
  if (!failure.empty()) throw Error(failure);
}

void ShardCheckpoints::advanced(const Store& store, SparseStore* sparse) {
  throw_failure();
  // The job's last version: its PARAMS announce every write (the chief's last manifest).
  if (last_ != 0 && store.version() >= last_) {
    writer_.wait();
    throw_failure();
  }
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
  h->durable = writer_.durable();
}

// This shard at version checkpoint_at_: its slice and optimizer state, in one durable file,
// captured here and written in the background.
void ShardCheckpoints::write(const Store& store, SparseStore* sparse) {
  const auto start = Clock::now();
  writer_.wait();  // the previous checkpoint's write: a part of this one's stall
  throw_failure();
  ShardCheckpoint c;
  const uint64_t version = checkpoint_at_;
  c.shard = static_cast<uint32_t>(options_.index);
  c.num_shards = static_cast<uint32_t>(options_.num_ps);
  c.version = checkpoint_at_;
  c.optimizer = optimizer_kind_name(options_.optimizer.kind);
  store.save(&c);
  const bool hybrid = options_.checkpoint.table_shards > 0;
  // The tables go from the arena to the file as it is written: a row changed meanwhile is copied
  // aside first. Hybrid mode writes at once (the chief completes its checkpoint without `durable`).
  std::vector<TableSource> tables;
  if (sparse != nullptr) tables = hybrid ? sparse->table_sources() : sparse->snapshot_sources();
  if (hybrid) {
    // Hybrid mode: file s of S + 1, before the chief's dense vector (the last file): no slice of
    // it here, only the tables (docs/checkpoints.md, "Hybrid mode").
    c.num_shards = static_cast<uint32_t>(options_.checkpoint.table_shards + 1);
    c.offset = 0;
    c.values.clear();
    for (std::vector<float>& slot : c.slots) slot.clear();
  }
  checkpoint_at_ = 0;
  // A final checkpoint (a stop, the job's end) is on disk before its version is sent.
  const bool background = !hybrid && c.version != stop_at_ && (last_ == 0 || c.version < last_);
  writer_.start(std::move(c), std::move(tables), background);
  if (!background) throw_failure();
  written_ = version;
  write_us_ = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
}

}  // namespace pstrain
