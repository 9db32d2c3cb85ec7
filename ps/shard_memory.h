// What a PS shard may hold when --max-shard-mib is not given (docs/sparse.md, "Memory"): this
// host's memory shared among the job's PS shards on it, less a part for everything else on the
// host, less what a save of the tables needs beside them. The dense slice's state and the tables
// both count against it (the tables are refused a step past what the slice leaves).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ps/sparse/embedding_table.h"

namespace pstrain {

// This machine's physical memory in MiB (UINT64_MAX where it cannot be read).
uint64_t physical_memory_mib();

// Bytes a row of `t` takes at the least in the count the bound keeps: its weights and optimizer
// slots, its bookkeeping (ID, last step, updates) and its index slot (16 bytes, the index at most
// half full). The least of `tables`' (0: none).
uint64_t least_row_bytes(const std::vector<TableOptions>& tables);

// The bytes a save (a checkpoint, --save-params) holds beside a table, per row: the rows sorted
// by ID through (ID, row) pairs. Everything else it holds is bounded (a 64 KiB encoding buffer,
// a 1 MiB file buffer).
constexpr uint64_t kSaveBytesPerRow = 16;

// The default bound: `physical_mib` less an eighth (the OS, the workers on the host, buffers),
// shared evenly among `shards_on_host`, then less a save's share: a table of rows of at least
// `row_bytes` bytes (0: no tables) filling the bound needs kSaveBytesPerRow a row more to be saved.
uint64_t default_max_shard_mib(uint64_t physical_mib, int shards_on_host, uint64_t row_bytes);

// "10457 MiB (--max-shard-mib 0: 24576 MiB of this host, less 1/8, over 2 shards on it, less a
// save's 16 bytes a row beside rows of 568)" for the PS's first lines.
std::string default_max_shard_text(uint64_t physical_mib, int shards_on_host, uint64_t row_bytes);

}  // namespace pstrain
