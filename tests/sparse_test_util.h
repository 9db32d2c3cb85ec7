// Helpers of the sparse-table tests: tables, pushes, pulls and saved bytes of a ShardTables.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ps/sparse/shard_tables.h"
#include "shared/train/sparse_ids.h"

namespace pstrain::sparse_test {

constexpr uint32_t kTable = 7;

inline TableOptions table(const std::string& kind, size_t dim = 4) {
  TableOptions t;
  t.name = "clicks";
  t.id = kTable;
  t.dim = dim;
  t.seed = 42;
  if (!table_optimizer_of(kind, &t.optimizer.kind)) ADD_FAILURE() << "no table optimizer " << kind;
  t.optimizer.l1 = 0.001;
  return t;
}

inline ShardTables shard(const TableOptions& t, int index = 0, int num_ps = 1, size_t max_bytes = 0) {
  SparseShardOptions o;
  o.index = index;
  o.num_ps = num_ps;
  o.max_bytes = max_bytes;
  return ShardTables(o, {t});
}

// One worker's gradients of one table for a step.
struct Grads {
  uint32_t table = kTable;
  std::vector<uint64_t> ids;
  std::vector<float> g;
  TablePush push() const { return TablePush{table, ids.data(), ids.size(), g.data(), g.size()}; }
};

// The IDs of `grads` that shard `index` of `num_ps` holds, in the same order.
inline Grads split(const Grads& grads, int index, int num_ps, size_t dim) {
  Grads out;
  out.table = grads.table;
  for (size_t i = 0; i < grads.ids.size(); ++i) {
    if (shard_of(grads.ids[i], num_ps) != index) continue;
    out.ids.push_back(grads.ids[i]);
    out.g.insert(out.g.end(), grads.g.begin() + i * dim, grads.g.begin() + (i + 1) * dim);
  }
  return out;
}

inline bool apply(ShardTables& s, uint64_t step, const std::vector<Grads>& workers, std::string* error = nullptr,
                  double lr = 0.1, float scale = 0.25f) {
  std::vector<std::vector<TablePush>> by_worker;
  for (const Grads& g : workers) by_worker.push_back({g.push()});
  std::string ignored;
  return s.apply_step(SparseStep{step, lr, scale}, by_worker, error != nullptr ? error : &ignored);
}

inline void apply_ok(ShardTables& s, uint64_t step, const std::vector<Grads>& workers, float scale = 0.25f) {
  std::string error;
  ASSERT_TRUE(apply(s, step, workers, &error, 0.1, scale)) << error;
}

inline std::vector<float> pull(const ShardTables& s, const std::vector<uint64_t>& ids) {
  const size_t dim = s.table(kTable)->dim();
  std::vector<float> out(ids.size() * dim);
  std::string error;
  EXPECT_TRUE(s.pull(kTable, ids.data(), ids.size(), out.data(), &error)) << error;
  return out;
}

inline std::string saved(const ShardTables& s) {
  std::string out;
  s.table(kTable)->save(&out);
  return out;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// `n` IDs that shard `index` of `num_ps` holds.
inline std::vector<uint64_t> ids_of(int index, int num_ps, size_t n) {
  std::vector<uint64_t> out;
  for (uint64_t id = 1; out.size() < n; ++id) {
    if (shard_of(id, num_ps) == index) out.push_back(id);
  }
  return out;
}

// `steps` steps of `workers` workers, each pushing a random subset of `pool` IDs (0 .. pool - 1,
// times a large odd number) with random gradients.
inline std::vector<std::vector<Grads>> random_steps(int steps, int workers, size_t pool, size_t dim, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<std::vector<Grads>> out(static_cast<size_t>(steps));
  for (auto& step : out) {
    for (int w = 0; w < workers; ++w) {
      Grads g;
      for (uint64_t i = 0; i < pool; ++i) {
        if (gen() % 2 != 0) continue;
        g.ids.push_back(i * 0x100000001b3ull);
        for (size_t j = 0; j < dim; ++j) g.g.push_back(value(gen));
      }
      step.push_back(g);
    }
  }
  return out;
}

}  // namespace pstrain::sparse_test
