#include "ps/shard_memory.h"

#include <unistd.h>

#include <algorithm>

#include "ps/sparse/sparse_optimizer.h"

namespace pstrain {

uint64_t physical_memory_mib() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(pages) / (1024 * 1024 / static_cast<uint64_t>(page));
}

uint64_t least_row_bytes(const std::vector<TableOptions>& tables) {
  constexpr uint64_t kMeta = 3 * sizeof(uint64_t), kIndex = 2 * 16;
  uint64_t least = 0;
  for (const TableOptions& t : tables) {
    const uint64_t slots = make_sparse_optimizer(t.optimizer)->slots();
    const uint64_t row = kMeta + (1 + slots) * t.dim * sizeof(float) + kIndex;
    least = least == 0 ? row : std::min(least, row);
  }
  return least;
}

uint64_t default_max_shard_mib(uint64_t physical_mib, int shards_on_host, uint64_t row_bytes) {
  if (physical_mib == UINT64_MAX) return 0;  // unknown: no bound, as before
  const uint64_t share =
      (physical_mib - physical_mib / 8) / static_cast<uint64_t>(std::max(shards_on_host, 1));
  if (row_bytes == 0) return std::max<uint64_t>(share, 1);
  return std::max<uint64_t>(share * row_bytes / (row_bytes + kSaveBytesPerRow), 1);
}

std::string default_max_shard_text(uint64_t physical_mib, int shards_on_host, uint64_t row_bytes) {
  const uint64_t mib = default_max_shard_mib(physical_mib, shards_on_host, row_bytes);
  if (mib == 0) return "none (--max-shard-mib 0, and this host's memory is unknown)";
  std::string text = std::to_string(mib) + " MiB (--max-shard-mib 0: " + std::to_string(physical_mib) +
                     " MiB of this host, less 1/8, over " + std::to_string(std::max(shards_on_host, 1)) +
                     " PS shard(s) on it";
  if (row_bytes > 0) {
    text += ", less a save's " + std::to_string(kSaveBytesPerRow) + " bytes a row beside rows of " +
            std::to_string(row_bytes);
  }
  return text + ")";
}

}  // namespace pstrain
