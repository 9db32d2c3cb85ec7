#include "worker/sparse/embedding_input.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "shared/train/sparse_ids.h"
#include "shared/util/error.h"

namespace pstrain {

bool parse_embedding_pool(const std::string& name, EmbeddingPool* pool) {
  if (name != "sum" && name != "mean") return false;
  *pool = name == "mean" ? EmbeddingPool::kMean : EmbeddingPool::kSum;
  return true;
}

uint64_t embedding_key(size_t field, uint64_t raw, bool per_field_tables) {
  return per_field_tables ? raw : mix_id(raw ^ mix_id(field + 1));
}

EmbeddingInput::EmbeddingInput(const EmbeddingInputOptions& options) : options_(options) {
  if (options.dim == 0 || options.dim > kMaxSparseDim) {
    throw UsageError("embedding dim " + std::to_string(options.dim) + " is not in 1.." +
                     std::to_string(kMaxSparseDim));
  }
  if (options.fields == 0) throw UsageError("embedding input with 0 categorical fields");
  if (options.num_ps < 1)
    throw UsageError("embedding input over " + std::to_string(options.num_ps) + " shards");
  const auto shards = static_cast<size_t>(options.num_ps);
  for (size_t f = 0; f < options.fields; ++f) field_salt_.push_back(mix_id(f + 1));
  staged_.resize(shards * tables());
  section_of_.resize(shards * tables());
  occurrences_.resize(shards);
  pull_.resize(shards);
  rows_.resize(shards);
  has_rows_.assign(shards, false);
}

uint32_t EmbeddingInput::find_or_add(const TableId& key_in_table) {
  const uint64_t key = key_in_table.id;
  const uint32_t table = key_in_table.table;
  const auto next = static_cast<uint32_t>(slots_.size());
  const uint32_t slot = slot_of_key_.find_or_insert(key_in_table, next);
  if (slot != IdMap<TableId>::kAbsent) return slot;
  const auto shard = static_cast<uint32_t>(shard_of(key, options_.num_ps));
  std::vector<uint64_t>& staged = staged_[shard * tables() + table];
  slots_.push_back(Slot{shard, table, static_cast<uint32_t>(staged.size())});
  staged.push_back(key);
  return next;
}

void EmbeddingInput::prepare(const uint64_t* raw_ids, const uint32_t* counts, size_t batch) {
  const size_t fields = options_.fields, cells = batch * fields;
  size_t n = cells;
  if (counts != nullptr) {
    n = 0;
    for (size_t c = 0; c < cells; ++c) {
      PSTRAIN_CHECK_LE(1u, counts[c]);
      n += counts[c];
    }
  }
  PSTRAIN_CHECK(n == 0 || raw_ids != nullptr);
  if (n > kMaxBatchIds) {  // the slot indices are 32-bit; fields listing many IDs reach it first
    throw Error("a step's batch of " + std::to_string(batch) + " records lists " + std::to_string(n) +
                " categorical IDs, more than " + std::to_string(kMaxBatchIds) +
                " (make --batch-size, or --accum-steps' micro-batches together, smaller)");
  }
  batch_ = batch;
  lists_ = n != cells;  // every count is >= 1: n == cells when each is 1
  // The map starts each batch with room for 2 x the last batch's unique keys (at most this one's
  // occurrences) and grows from there: a small map for repetitive batches stays in cache.
  slot_of_key_.clear(std::min(2 * slots_.size(), n));
  slots_.clear();
  for (auto& keys : staged_) keys.clear();
  for (auto& list : occurrences_) list.clear();
  slot_of_.resize(n);
  if (lists_) {
    first_of_.resize(cells + 1);
    cell_of_.resize(n);
  }
  // First every occurrence's key (a sequential pass), then the lookups, each fetching the map's
  // slot of the key kSlotAhead occurrences on: a batch's map outgrows the L2 cache, and the
  // lookups' misses overlap instead of each stalling (bench/ctr.py: about half of prepare()'s
  // time). The order of the lookups, hence of the slots, is the same.
  keys_.resize(n);
  size_t i = 0;
  for (size_t c = 0, f = 0; c < cells; ++c, f = f + 1 == fields ? 0 : f + 1) {  // f = c % fields
    const size_t end = i + (lists_ ? counts[c] : 1);
    if (lists_) first_of_[c] = static_cast<uint32_t>(i);
    for (; i < end; ++i) {
      const uint64_t raw = raw_ids[i];
      keys_[i] = TableId{options_.per_field_tables ? raw : mix_id(raw ^ field_salt_[f]), table_of(f)};
      if (lists_) cell_of_[i] = static_cast<uint32_t>(c);
    }
  }
  constexpr size_t kSlotAhead = 16;
  for (size_t k = 0; k < n; ++k) {
    if (k + kSlotAhead < n) slot_of_key_.prefetch(keys_[k + kSlotAhead]);
    const uint32_t slot = find_or_add(keys_[k]);
    slot_of_[k] = slot;
    occurrences_[slots_[slot].shard].push_back(static_cast<uint32_t>(k));
  }
  if (lists_) first_of_[cells] = static_cast<uint32_t>(i);
  make_pulls();
}

void EmbeddingInput::make_pulls() {
  for (size_t s = 0; s < pull_.size(); ++s) {
    std::vector<SparseSection>& sections = pull_[s];
    size_t k = 0;
    for (size_t t = 0; t < tables(); ++t) {
      const std::vector<uint64_t>& keys = staged_[s * tables() + t];
      if (keys.empty()) continue;
      section_of_[s * tables() + t] = static_cast<uint32_t>(k);
      if (k == sections.size()) sections.emplace_back();
      sections[k].table = static_cast<uint32_t>(t);
      sections[k].dim = 0;
      sections[k].ids.assign(keys.begin(), keys.end());
      sections[k].values.clear();
      ++k;
    }
    sections.resize(k);
    rows_[s].clear();
    has_rows_[s] = false;
  }
  for (Slot& slot : slots_) slot.section = section_of_[slot.shard * tables() + slot.section];
}

const std::vector<SparseSection>& EmbeddingInput::pull(int shard) const {
  PSTRAIN_CHECK(shard >= 0 && shard < options_.num_ps);
  return pull_[static_cast<size_t>(shard)];
}

namespace {

// What is wrong with `rows` as the answer to `asked`, or "".
std::string rows_mismatch(const std::vector<SparseSection>& asked, const std::vector<SparseSection>& rows,
                          uint32_t dim) {
  if (rows.size() != asked.size()) {
    return "answered " + std::to_string(rows.size()) + " table sections, the pull asked for " +
           std::to_string(asked.size());
  }
  for (size_t k = 0; k < rows.size(); ++k) {
    const SparseSection& got = rows[k];
    const std::string table = "table " + std::to_string(asked[k].table);
    if (got.table != asked[k].table) {
      return "section " + std::to_string(k) + " is table " + std::to_string(got.table) +
             ", the pull asked for " + table;
    }
    if (got.dim != dim)
      return table + " has dim " + std::to_string(got.dim) + ", expected " + std::to_string(dim);
    if (!got.ids.empty())
      return table + " carries " + std::to_string(got.ids.size()) + " IDs (rows carry none)";
    const size_t want = asked[k].ids.size() * dim;
    if (got.values.size() != want) {
      return table + " has " + std::to_string(got.values.size()) + " values, expected " +
             std::to_string(asked[k].ids.size()) + " rows x " + std::to_string(dim) + " = " +
             std::to_string(want);
    }
    for (size_t j = 0; j < want; ++j) {
      if (!std::isfinite(got.values[j])) {
        return table + "'s row " + std::to_string(j / dim) + " (ID " + std::to_string(asked[k].ids[j / dim]) +
               ") has a non-finite value";
      }
    }
  }
  return "";
}

}  // namespace

bool EmbeddingInput::set_rows(int shard, std::vector<SparseSection> rows, std::string* error) {
  PSTRAIN_CHECK(shard >= 0 && shard < options_.num_ps);
  const auto s = static_cast<size_t>(shard);
  const std::string wrong = rows_mismatch(pull_[s], rows, options_.dim);
  if (!wrong.empty()) {
    if (error != nullptr) *error = "embedding rows from ps" + std::to_string(shard) + ": " + wrong;
    rows_[s].clear();
    has_rows_[s] = false;
    return false;
  }
  rows_[s] = std::move(rows);
  has_rows_[s] = true;
  return true;
}

const float* EmbeddingInput::row(uint32_t slot) const {
  const Slot& at = slots_[slot];
  return rows_[at.shard][at.section].values.data() + static_cast<size_t>(at.position) * options_.dim;
}

void EmbeddingInput::gather(const float* dense, size_t first, size_t n, float* x) const {
  for (size_t s = 0; s < pull_.size(); ++s) PSTRAIN_CHECK(has_rows_[s] || pull_[s].empty());
  PSTRAIN_CHECK(dense != nullptr || options_.dense == 0);
  PSTRAIN_CHECK(first <= batch_ && n <= batch_ - first);
  const size_t fields = options_.fields, dim = options_.dim, width = input_dim();
  for (size_t r = 0; r < n; ++r) {
    float* out = x + r * width;
    if (options_.dense > 0) std::memcpy(out, dense + r * options_.dense, options_.dense * sizeof(float));
    out += options_.dense;
    const size_t cell = (first + r) * fields;
    if (!lists_) {
      const uint32_t* slot = slot_of_.data() + cell;
      for (size_t f = 0; f < fields; ++f) std::memcpy(out + f * dim, row(slot[f]), dim * sizeof(float));
      continue;
    }
    for (size_t f = 0; f < fields; ++f) pool(first_of_[cell + f], first_of_[cell + f + 1], out + f * dim);
  }
}

void EmbeddingInput::pool(uint32_t begin, uint32_t end, float* out) const {
  const size_t dim = options_.dim;
  std::memcpy(out, row(slot_of_[begin]), dim * sizeof(float));
  for (uint32_t i = begin + 1; i < end; ++i) {
    const float* add = row(slot_of_[i]);
    for (size_t j = 0; j < dim; ++j) out[j] += add[j];
  }
  if (options_.pool == EmbeddingPool::kMean && end - begin > 1) {
    const auto count = static_cast<float>(end - begin);
    for (size_t j = 0; j < dim; ++j) out[j] /= count;
  }
}

std::vector<SparseSection> EmbeddingInput::gradients(int shard, const float* dx) const {
  const std::vector<SparseSection>& asked = pull(shard);
  const size_t fields = options_.fields, dim = options_.dim, width = input_dim();
  std::vector<SparseSection> out(asked.size());
  for (size_t k = 0; k < asked.size(); ++k) {
    out[k].table = asked[k].table;
    out[k].dim = options_.dim;
    out[k].ids = asked[k].ids;
    out[k].values.assign(asked[k].ids.size() * dim, 0.0f);
  }
  const std::vector<uint32_t>& occurrences = occurrences_[static_cast<size_t>(shard)];
  if (!lists_) {
    for (uint32_t i : occurrences) {
      const Slot& at = slots_[slot_of_[i]];
      const size_t record = i / fields, field = i % fields;
      const float* from = dx + record * width + options_.dense + field * dim;
      float* into = out[at.section].values.data() + static_cast<size_t>(at.position) * dim;
      for (size_t j = 0; j < dim; ++j) into[j] += from[j];
    }
    return out;
  }
  const bool mean = options_.pool == EmbeddingPool::kMean;
  for (uint32_t i : occurrences) {
    const Slot& at = slots_[slot_of_[i]];
    const uint32_t cell = cell_of_[i], count = first_of_[cell + 1] - first_of_[cell];
    const float* from = dx + cell / fields * width + options_.dense + cell % fields * dim;
    float* into = out[at.section].values.data() + static_cast<size_t>(at.position) * dim;
    if (mean && count > 1) {
      const auto divisor = static_cast<float>(count);
      for (size_t j = 0; j < dim; ++j) into[j] += from[j] / divisor;
    } else {
      for (size_t j = 0; j < dim; ++j) into[j] += from[j];
    }
  }
  return out;
}

}  // namespace pstrain
