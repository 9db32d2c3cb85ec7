#include "ps/sparse/embedding_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "shared/util/error.h"

namespace pstrain {
namespace {

// A map node's bytes from glibc's malloc (the request plus 8, rounded up to 16, at least 32):
// libstdc++ keeps a next pointer and the value, and no hash code for integer keys.
template <class Map>
size_t node_bytes() {
  const size_t request = sizeof(void*) + sizeof(typename Map::value_type);
  return std::max<size_t>(32, (request + 8 + 15) / 16 * 16);
}

// The bytes of `map` after `extra` more entries: its buckets (which double when the load factor
// would pass its maximum) and its nodes.
template <class Map>
size_t map_bytes(const Map& map, size_t extra) {
  const size_t n = map.size() + extra;
  size_t buckets = map.bucket_count();
  const double limit = static_cast<double>(map.max_load_factor());
  if (static_cast<double>(n) > static_cast<double>(buckets) * limit) {
    buckets = std::max(2 * buckets, static_cast<size_t>(std::ceil(static_cast<double>(n) / limit)));
  }
  return buckets * sizeof(void*) + n * node_bytes<Map>();
}

SparseOptimizerOptions checked(const TableOptions& o) {
  if (o.dim == 0) throw Error("embedding table '" + o.name + "': dim must be at least 1");
  return o.optimizer;
}

}  // namespace

EmbeddingTable::EmbeddingTable(const TableOptions& options)
    : options_(options),
      optimizer_(make_sparse_optimizer(checked(options))),
      arena_(options.dim * (1 + optimizer_->slots()), options.block_rows) {}

// Loops over many IDs fetch ahead: the index slot kSlotAhead IDs on, the row kRowAhead on (its
// index slot fetched by then), so the cache misses of a table larger than the cache overlap.
constexpr size_t kSlotAhead = 16, kRowAhead = 8;

void EmbeddingTable::find_rows(const uint64_t* ids, size_t n, std::vector<uint32_t>* rows) const {
  rows->resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (i + kSlotAhead < n) index_.prefetch(ids[i + kSlotAhead]);
    (*rows)[i] = index_.find(ids[i]);
  }
}

void EmbeddingTable::prefetch_row(uint32_t row) const {
  if (row == IdIndex::kAbsent) return;
  const float* v = arena_.values(row);
  __builtin_prefetch(v);
  __builtin_prefetch(v + row_floats() - 1);
  __builtin_prefetch(&arena_.meta(row));
}

void EmbeddingTable::lookup(const uint64_t* ids, size_t n, float* out) const {
  const size_t d = dim();
  std::vector<uint32_t>& rows = found_;
  find_rows(ids, n, &rows);
  for (size_t i = 0; i < n; ++i, out += d) {
    if (i + kRowAhead < n && rows[i + kRowAhead] != IdIndex::kAbsent) {
      __builtin_prefetch(arena_.values(rows[i + kRowAhead]));
    }
    if (rows[i] != IdIndex::kAbsent) {
      std::memcpy(out, arena_.values(rows[i]), d * sizeof(float));
    } else if (options_.min_count <= 1) {
      init_row(options_.init, options_.seed, options_.id, ids[i], d, out);
    } else {
      std::fill(out, out + d, 0.0f);
    }
  }
}

void EmbeddingTable::count_new(const uint64_t* ids, const uint32_t* found, size_t n, size_t* rows,
                               size_t* sightings) const {
  *rows = *sightings = 0;
  for (size_t i = 0; i < n; ++i) {
    if (found[i] != IdIndex::kAbsent) continue;
    if (options_.min_count <= 1) {
      ++*rows;
      continue;
    }
    const auto it = sightings_.find(ids[i]);
    const uint32_t seen = it == sightings_.end() ? 0 : it->second.count;
    if (seen + 1 >= options_.min_count) ++*rows;
    else if (it == sightings_.end()) ++*sightings;
  }
}

size_t EmbeddingTable::bytes_with(size_t rows, size_t sightings) const {
  return arena_.bytes() + arena_.bytes_to_add(rows) + index_.bytes_with(rows) + map_bytes(sightings_, sightings);
}

void EmbeddingTable::apply(uint64_t step, const uint64_t* ids, const uint32_t* rows, size_t n, const float* grad_sums,
                           float grad_scale, double lr) {
  const size_t d = dim();
  for (size_t i = 0; i < n; ++i) {
    if (i + kRowAhead < n) prefetch_row(rows[i + kRowAhead]);
    const float* g = grad_sums + i * d;
    if (rows[i] != IdIndex::kAbsent) {
      update_row(rows[i], step, g, grad_scale, lr);
    } else if (options_.min_count <= 1) {
      update_row(create_row(ids[i], step), step, g, grad_scale, lr);
    } else {
      sight(ids[i], step);
    }
  }
}

uint32_t EmbeddingTable::create_row(uint64_t id, uint64_t step) {
  const uint32_t row = arena_.allocate();
  arena_.before_write(row);  // a released row reused: a checkpoint being written may hold it
  float* w = arena_.values(row);
  init_row(options_.init, options_.seed, options_.id, id, dim(), w);
  optimizer_->init_slots(dim(), w + dim());
  arena_.meta(row) = RowMeta{id, step, 0};
  index_.find_or_insert(id, row);
  ++admissions_;
  return row;
}

void EmbeddingTable::update_row(uint32_t row, uint64_t step, const float* grad_sum, float grad_scale, double lr) {
  arena_.before_write(row);
  float* w = arena_.values(row);
  RowMeta& meta = arena_.meta(row);
  optimizer_->apply(dim(), w, w + dim(), grad_sum, grad_scale, lr, meta.updates);
  ++meta.updates;
  meta.last_touched = step;
}

// Counted once per step (the caller's IDs are unique); the admitting sighting's gradient is
// dropped: the worker computed it with the ID reading as zeros, not as the new row.
void EmbeddingTable::sight(uint64_t id, uint64_t step) {
  Sighting& s = sightings_[id];
  ++s.count;
  s.last_seen = step;
  if (s.count < options_.min_count) return;
  sightings_.erase(id);
  create_row(id, step);
}

bool EmbeddingTable::expired(uint64_t last, uint64_t step) const {
  return step >= last && step - last >= options_.expiry_steps;
}

void EmbeddingTable::expire(uint64_t step) {
  const uint64_t t = options_.expiry_steps;
  if (t == 0 || (step + 1) % std::max<uint64_t>(1, (t + 3) / 4) != 0) return;
  std::vector<uint64_t> gone;
  index_.for_each([&](uint64_t id, uint32_t row) {
    if (expired(arena_.meta(row).last_touched, step)) gone.push_back(id);
  });
  for (uint64_t id : gone) {
    arena_.release(index_.find(id));
    index_.erase(id);
  }
  evictions_ += gone.size();
  for (auto it = sightings_.begin(); it != sightings_.end();) {
    it = expired(it->second.last_seen, step) ? sightings_.erase(it) : std::next(it);
  }
}

TableStats EmbeddingTable::stats() const {
  TableStats s;
  s.rows = index_.size();
  s.sightings = sightings_.size();
  s.admissions = admissions_;
  s.evictions = evictions_;
  s.bytes = bytes();
  return s;
}

}  // namespace pstrain
