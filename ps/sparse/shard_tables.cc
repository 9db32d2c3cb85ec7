#include "ps/sparse/shard_tables.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "shared/train/sparse_ids.h"
#include "shared/util/error.h"
#include "shared/util/numeric.h"

namespace pstrain {

// One table's gradients of a step: its unique IDs (first seen first) and their sums.
struct ShardTables::Merged {
  EmbeddingTable* table = nullptr;
  std::vector<uint64_t> ids;
  std::vector<float> sums;  // ids.size() * dim
  std::vector<uint32_t> rows;  // the table's row of each ID before the step (find_rows)
};

namespace {

// Loops over a message's IDs fetch the map slot of the ID kSlotAhead on, so that the cache misses
// of a map larger than the cache overlap (as EmbeddingTable's loops do).
constexpr size_t kSlotAhead = 16;

std::string mib(size_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << static_cast<double>(bytes) / (1024.0 * 1024.0);
  return os.str();
}

}  // namespace

ShardTables::ShardTables(const SparseShardOptions& options, const std::vector<TableOptions>& tables)
    : options_(options) {
  if (options.num_ps < 1 || options.index < 0 || options.index >= options.num_ps) {
    throw Error("sparse tables: shard " + std::to_string(options.index) + " of " + std::to_string(options.num_ps));
  }
  for (const TableOptions& t : tables) {
    if (tables_.count(t.id) != 0) throw Error("two embedding tables have the id " + std::to_string(t.id));
    tables_.emplace(t.id, std::make_unique<EmbeddingTable>(t));
  }
}

const EmbeddingTable* ShardTables::table(uint32_t id) const {
  const auto it = tables_.find(id);
  return it == tables_.end() ? nullptr : it->second.get();
}

EmbeddingTable* ShardTables::find(uint32_t table, std::string* error) const {
  const auto it = tables_.find(table);
  if (it != tables_.end()) return it->second.get();
  *error = "unknown embedding table " + std::to_string(table);
  return nullptr;
}

size_t ShardTables::bytes() const {
  size_t sum = 0;
  for (const auto& [id, t] : tables_) sum += t->bytes();
  return sum;
}

// IDs unique and all of this shard.
bool ShardTables::check_ids(const EmbeddingTable& t, const uint64_t* ids, size_t n, std::string* error) const {
  const std::string where = "embedding table '" + t.options().name + "': ";
  for (size_t i = 0; i < n && options_.num_ps > 1; ++i) {
    if (shard_of(ids[i], options_.num_ps) == options_.index) continue;
    *error = where + "ID " + std::to_string(ids[i]) + " is not held by shard " + std::to_string(options_.index) +
             " of " + std::to_string(options_.num_ps);
    return false;
  }
  if (n <= 16) {  // a few IDs (a rejoin's one-ID lookups): compared pairwise, no map
    for (size_t i = 1; i < n; ++i) {
      if (std::find(ids, ids + i, ids[i]) == ids + i) continue;
      *error = where + "ID " + std::to_string(ids[i]) + " appears twice (IDs must be unique)";
      return false;
    }
    return true;
  }
  IdIndex& seen = scratch(n);
  size_t i = 0;
  for (; i < n; ++i) {
    if (i + kSlotAhead < n) seen.prefetch(ids[i + kSlotAhead]);
    if (seen.find_or_insert(ids[i], 0) != IdIndex::kAbsent) break;
  }
  trim_scratch();
  if (i == n) return true;
  *error = where + "ID " + std::to_string(ids[i]) + " appears twice (IDs must be unique)";
  return false;
}

// One map for the checks and the merge, its slots kept from message to message (a fresh map's
// allocation and zeroing per message was a sixth of their time, bench/ctr.py) but at most
// kScratchKeepBytes of them: the slots a message of many IDs needed are freed after it.
IdIndex& ShardTables::scratch(size_t n) const {
  scratch_.clear(n);
  return scratch_;
}

void ShardTables::trim_scratch() const {
  if (scratch_.bytes() > kScratchKeepBytes) scratch_ = IdIndex();
}

bool ShardTables::pull(uint32_t table, const uint64_t* ids, size_t n, float* out, std::string* error) const {
  if (!check_pull(table, ids, n, error)) return false;
  lookup_checked(table, ids, n, out);
  return true;
}

bool ShardTables::check_pull(uint32_t table, const uint64_t* ids, size_t n, std::string* error) const {
  const EmbeddingTable* t = find(table, error);
  return t != nullptr && check_ids(*t, ids, n, error);
}

void ShardTables::lookup_checked(uint32_t table, const uint64_t* ids, size_t n, float* out) const {
  tables_.at(table)->lookup(ids, n, out);
}

bool ShardTables::check_push(const TablePush& push, std::string* error) const {
  const EmbeddingTable* t = find(push.table, error);
  if (t == nullptr) return false;
  const std::string where = "embedding table '" + t->options().name + "': ";
  if (push.count > push.grad_len / t->dim() || push.count * t->dim() != push.grad_len) {
    *error = where + std::to_string(push.grad_len) + " gradient floats for " + std::to_string(push.count) +
             " IDs of dim " + std::to_string(t->dim());
    return false;
  }
  if (!all_finite(push.grads, push.grad_len)) {
    *error = where + "a gradient is NaN or infinite";
    return false;
  }
  return check_ids(*t, push.ids, push.count, error);
}

bool ShardTables::check_step(const SparseStep& s, std::string* error) const {
  if (applied_ && s.step <= last_step_) {
    *error = "sparse step " + std::to_string(s.step) + " after step " + std::to_string(last_step_);
  } else if (!std::isfinite(s.lr) || s.lr < 0 || !std::isfinite(s.grad_scale)) {
    *error = "sparse step " + std::to_string(s.step) + ": a learning rate or gradient scale out of range";
  } else {
    for (const auto& [id, t] : tables_) {
      if (t->optimizer_kind() != TableOptimizer::kFtrl || s.lr > 0) continue;
      *error = "embedding table '" + t->options().name + "': ftrl needs a positive learning rate";
      break;
    }
  }
  return error->empty();
}

bool ShardTables::check_pushes(const std::vector<TablePush>& pushes, std::string* error) const {
  std::vector<uint32_t> seen;
  for (const TablePush& push : pushes) {
    if (std::count(seen.begin(), seen.end(), push.table) != 0) {
      *error = "table " + std::to_string(push.table) + " pushed twice";
      return false;
    }
    if (!check_push(push, error)) return false;
    seen.push_back(push.table);
  }
  return true;
}

bool ShardTables::check_all(const SparseStep& step, const std::vector<std::vector<TablePush>>& by_worker,
                            std::string* error) const {
  error->clear();
  if (!check_step(step, error)) return false;
  for (size_t w = 0; w < by_worker.size(); ++w) {
    std::string why;
    if (!check_pushes(by_worker[w], &why)) {
      *error = "step " + std::to_string(step.step) + ", worker " + std::to_string(w) + ": " + why;
      return false;
    }
  }
  return true;
}

// Per table (in id order), each ID's gradient: worker 0's, plus worker 1's, plus ... in worker
// order, whatever order the pushes arrived in.
std::vector<ShardTables::Merged> ShardTables::merge(const std::vector<std::vector<TablePush>>& by_worker) const {
  std::vector<Merged> merged;
  for (const auto& [id, table] : tables_) {
    Merged m;
    m.table = table.get();
    const size_t d = table->dim();
    size_t pushed = 0;
    for (const auto& pushes : by_worker) {
      for (const TablePush& p : pushes) pushed += p.table == id ? p.count : 0;
    }
    if (pushed == 0) continue;
    m.ids.reserve(pushed);
    m.sums.reserve(pushed * d);
    IdIndex& at = scratch(pushed);  // ID -> its place in m.ids
    for (const auto& pushes : by_worker) {
      for (const TablePush& p : pushes) {
        if (p.table != id) continue;
        for (size_t i = 0; i < p.count; ++i) {
          if (i + kSlotAhead < p.count) at.prefetch(p.ids[i + kSlotAhead]);
          const float* g = p.grads + i * d;
          const uint32_t place = at.find_or_insert(p.ids[i], static_cast<uint32_t>(m.ids.size()));
          if (place == IdIndex::kAbsent) {
            m.ids.push_back(p.ids[i]);
            m.sums.insert(m.sums.end(), g, g + d);
          } else {
            add_into(m.sums.data() + size_t{place} * d, g, d);
          }
        }
      }
    }
    merged.push_back(std::move(m));
  }
  trim_scratch();
  return merged;
}

bool ShardTables::check_memory(const std::vector<Merged>& merged, uint64_t step, std::string* error) const {
  size_t total = bytes(), new_rows = 0;
  for (const Merged& m : merged) {
    const size_t held = m.table->stats().rows;
    // Without a bound, the new rows need counting only near the row numbers' end.
    if (options_.max_bytes == 0 && held + m.ids.size() < size_t{UINT32_MAX}) continue;
    size_t rows = 0, sightings = 0;
    m.table->count_new(m.ids.data(), m.rows.data(), m.ids.size(), &rows, &sightings);
    if (held + rows >= size_t{UINT32_MAX}) {
      *error = "embedding table '" + m.table->options().name + "': more than 2^32 - 1 rows on one shard";
      return false;
    }
    total += m.table->bytes_with(rows, sightings) - m.table->bytes();
    new_rows += rows;
  }
  if (options_.max_bytes == 0 || total <= options_.max_bytes) return true;
  *error = "step " + std::to_string(step) + ": " + std::to_string(new_rows) + " new embedding rows would bring shard " +
           std::to_string(options_.index) + "'s tables to " + mib(total) + " MiB, over their bound of " + mib(options_.max_bytes) +
           " MiB (--max-shard-mib, less the dense slice's state); nothing was applied";
  return false;
}

bool ShardTables::apply_step(const SparseStep& step, const std::vector<std::vector<TablePush>>& by_worker,
                             std::string* error) {
  if (!check_all(step, by_worker, error)) return false;
  return apply_checked_step(step, by_worker, error);
}

bool ShardTables::apply_checked_step(const SparseStep& step, const std::vector<std::vector<TablePush>>& by_worker,
                                     std::string* error) {
  error->clear();
  if (!check_step(step, error)) return false;
  std::vector<Merged> merged = merge(by_worker);
  for (Merged& m : merged) m.table->find_rows(m.ids.data(), m.ids.size(), &m.rows);
  if (!check_memory(merged, step.step, error)) return false;
  for (const Merged& m : merged) {
    m.table->apply(step.step, m.ids.data(), m.rows.data(), m.ids.size(), m.sums.data(), step.grad_scale, step.lr);
  }
  for (auto& [id, t] : tables_) t->expire(step.step);
  applied_ = true;
  last_step_ = step.step;
  return true;
}

bool ShardTables::load(uint32_t table, const std::string& saved, std::string* error, bool new_job) {
  ByteReader in(saved);
  return load(table, in, error, new_job);
}

bool ShardTables::load(uint32_t table, ByteReader& saved, std::string* error, bool new_job) {
  EmbeddingTable* t = find(table, error);
  if (t == nullptr) return false;
  const size_t others = bytes() - t->bytes();
  size_t budget = SIZE_MAX;
  if (options_.max_bytes != 0) budget = options_.max_bytes > others ? options_.max_bytes - others : 0;
  return t->load(saved, options_.index, options_.num_ps, budget, error, new_job);
}

std::string ShardTables::counters_text() const {
  TableStats sum;
  for (const auto& [id, t] : tables_) {
    const TableStats s = t->stats();
    sum.rows += s.rows;
    sum.sightings += s.sightings;
    sum.admissions += s.admissions;
    sum.evictions += s.evictions;
    sum.bytes += s.bytes;
  }
  std::ostringstream os;
  os << "embedding rows " << sum.rows << " (admitted " << sum.admissions << ", evicted " << sum.evictions
     << ", pending " << sum.sightings << "), " << mib(sum.bytes) << " MiB";
  return os.str();
}

}  // namespace pstrain
