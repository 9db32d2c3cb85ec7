#include "worker/sparse/embedding_input.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "shared/train/sparse_ids.h"
#include "shared/util/error.h"
#include "worker/data/criteo.h"

namespace pstrain {
namespace {

using TableKey = std::pair<uint32_t, uint64_t>;  // (table, key)

EmbeddingInputOptions small_options(int num_ps, bool per_field, size_t dense = 2, size_t fields = 3,
                                    uint32_t dim = 4) {
  EmbeddingInputOptions o;
  o.dense = dense;
  o.fields = fields;
  o.dim = dim;
  o.per_field_tables = per_field;
  o.num_ps = num_ps;
  return o;
}

TableKey table_key(const EmbeddingInputOptions& o, size_t field, uint64_t raw) {
  return {o.per_field_tables ? static_cast<uint32_t>(field) : 0,
          embedding_key(field, raw, o.per_field_tables)};
}

// Raw IDs from a small range, so that records and fields repeat them, with some missing.
std::vector<uint64_t> random_ids(size_t batch, size_t fields, uint32_t seed, uint64_t range = 40) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> ids(batch * fields);
  for (uint64_t& id : ids) id = rng() % 10 == 0 ? kCriteoMissingId : rng() % range;
  return ids;
}

float row_value(uint32_t table, uint64_t key, size_t j) {
  return static_cast<float>(key % 997) + 0.25f * static_cast<float>(j) + 0.125f * static_cast<float>(table);
}

// A shard's SPARSE_ROWS answer to pull(s), each element row_value(table, key, j).
std::vector<SparseSection> answer(const std::vector<SparseSection>& pull, uint32_t dim) {
  std::vector<SparseSection> rows;
  for (const SparseSection& p : pull) {
    SparseSection r;
    r.table = p.table;
    r.dim = dim;
    for (uint64_t key : p.ids) {
      for (size_t j = 0; j < dim; ++j) r.values.push_back(row_value(p.table, key, j));
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

void set_all_rows(EmbeddingInput& in) {
  for (int s = 0; s < in.options().num_ps; ++s) {
    std::string error;
    ASSERT_TRUE(in.set_rows(s, answer(in.pull(s), in.options().dim), &error)) << error;
  }
}

// Every shard's gradients, by (table, key).
std::map<TableKey, std::vector<float>> all_gradients(const EmbeddingInput& in, const float* dx) {
  std::map<TableKey, std::vector<float>> by_key;
  for (int s = 0; s < in.options().num_ps; ++s) {
    for (const SparseSection& g : in.gradients(s, dx)) {
      for (size_t i = 0; i < g.ids.size(); ++i) {
        by_key[{g.table, g.ids[i]}].assign(g.values.begin() + i * g.dim, g.values.begin() + (i + 1) * g.dim);
      }
    }
  }
  return by_key;
}

// The per-key gradients of two halves of a batch added: first's over dx, second's over the
// records after them (dx + second_offset), each key's rows of `dim` floats summed.
std::map<TableKey, std::vector<float>> summed_halves(const EmbeddingInput& first, const EmbeddingInput& second,
                                                     const float* dx, size_t second_offset, size_t dim) {
  auto sum = all_gradients(first, dx);
  for (const auto& [tk, g] : all_gradients(second, dx + second_offset)) {
    std::vector<float>& s = sum[tk];
    s.resize(dim, 0.0f);
    for (size_t j = 0; j < dim; ++j) s[j] += g[j];
  }
  return sum;
}

TEST(EmbeddingInputTest, KeysArePinned) {
  EXPECT_EQ(embedding_key(0, 0, false), 0x5e41ab087439611eULL);
  EXPECT_EQ(embedding_key(25, 0x68fd1e64, false), 0x3bf66fdac93335a7ULL);
  EXPECT_EQ(embedding_key(3, kCriteoMissingId, false), 0x7c6163b5ca2b7683ULL);
  EXPECT_EQ(embedding_key(3, kCriteoMissingId, false), mix_id(kCriteoMissingId ^ mix_id(4)));
  EXPECT_EQ(embedding_key(7, 12345, true), 12345u);
  EXPECT_NE(embedding_key(0, 5, false), embedding_key(1, 5, false));
}

TEST(EmbeddingInputTest, RefusesBadOptions) {
  EXPECT_THROW(EmbeddingInput(small_options(1, false, 2, 3, 0)), UsageError);
  EXPECT_THROW(EmbeddingInput(small_options(1, false, 2, 3, kMaxSparseDim + 1)), UsageError);
  EXPECT_THROW(EmbeddingInput(small_options(1, false, 2, 0, 4)), UsageError);
  EXPECT_THROW(EmbeddingInput(small_options(0, false)), UsageError);
  EXPECT_EQ(EmbeddingInput(small_options(1, false, 2, 3, 4)).input_dim(), 2u + 3 * 4);
  EXPECT_EQ(EmbeddingInput(EmbeddingInputOptions{}).input_dim(), 13u + 26 * 16);
}

// Shared table: a raw ID is a different key in each field; per-field tables: table f, key raw.
// Both: unique keys in first-seen order, record by record, field by field.
TEST(EmbeddingInputTest, DeduplicatesAcrossRecordsAndFields) {
  const uint64_t m = kCriteoMissingId;
  const std::vector<uint64_t> raw = {5, 5, 7, /**/ 5, 9, 7, /**/ m, 5, 7};
  EmbeddingInput shared(small_options(1, false));
  shared.prepare(raw.data(), 3);
  ASSERT_EQ(shared.pull(0).size(), 1u);
  EXPECT_EQ(shared.pull(0)[0].table, 0u);
  EXPECT_EQ(shared.pull(0)[0].dim, 0u);
  EXPECT_TRUE(shared.pull(0)[0].values.empty());
  const auto k = [](size_t f, uint64_t r) { return embedding_key(f, r, false); };
  EXPECT_EQ(shared.pull(0)[0].ids, (std::vector<uint64_t>{k(0, 5), k(1, 5), k(2, 7), k(1, 9), k(0, m)}));
  EXPECT_EQ(shared.unique_keys(), 5u);

  EmbeddingInput per_field(small_options(1, true));
  per_field.prepare(raw.data(), 3);
  const std::vector<SparseSection>& p = per_field.pull(0);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].table, 0u);
  EXPECT_EQ(p[0].ids, (std::vector<uint64_t>{5, m}));
  EXPECT_EQ(p[1].table, 1u);
  EXPECT_EQ(p[1].ids, (std::vector<uint64_t>{5, 9}));
  EXPECT_EQ(p[2].table, 2u);
  EXPECT_EQ(p[2].ids, (std::vector<uint64_t>{7}));
  EXPECT_EQ(per_field.unique_keys(), 5u);
}

// Each shard gets exactly the keys shard_of gives it, once, in first-seen order, tables increasing.
TEST(EmbeddingInputTest, RoutesByShardOf) {
  for (bool per_field : {false, true}) {
    const EmbeddingInputOptions o = small_options(3, per_field, 13, 26, 8);
    const size_t batch = 64;
    const auto raw = random_ids(batch, o.fields, 3);
    EmbeddingInput in(o);
    in.prepare(raw.data(), batch);
    std::vector<TableKey> first_seen;
    std::set<TableKey> seen;
    for (size_t i = 0; i < raw.size(); ++i) {
      const TableKey tk = table_key(o, i % o.fields, raw[i]);
      if (seen.insert(tk).second) first_seen.push_back(tk);
    }
    size_t total = 0;
    for (int s = 0; s < o.num_ps; ++s) {
      std::map<uint32_t, std::vector<uint64_t>> want;
      for (const TableKey& tk : first_seen) {
        if (shard_of(tk.second, o.num_ps) == s) want[tk.first].push_back(tk.second);
      }
      const std::vector<SparseSection>& got = in.pull(s);
      ASSERT_EQ(got.size(), want.size()) << "shard " << s;
      size_t k = 0;
      for (const auto& [table, ids] : want) {  // std::map: tables increasing
        EXPECT_EQ(got[k].table, table);
        EXPECT_EQ(got[k].ids, ids);
        total += got[k].ids.size();
        ++k;
      }
    }
    EXPECT_EQ(total, first_seen.size());
    EXPECT_EQ(in.unique_keys(), first_seen.size());
  }
}

TEST(EmbeddingInputTest, GatherPlacesDenseFeaturesThenEachFieldsRow) {
  for (bool per_field : {false, true}) {
    const EmbeddingInputOptions o = small_options(2, per_field, 2, 3, 4);
    const size_t batch = 9;
    const auto raw = random_ids(batch, o.fields, 5, 6);
    std::vector<float> dense(batch * o.dense);
    for (size_t i = 0; i < dense.size(); ++i) dense[i] = -static_cast<float>(i) - 0.5f;
    EmbeddingInput in(o);
    in.prepare(raw.data(), batch);
    set_all_rows(in);
    std::vector<float> x(batch * in.input_dim(), std::nanf(""));
    in.gather(dense.data(), x.data());
    for (size_t r = 0; r < batch; ++r) {
      const float* xr = x.data() + r * in.input_dim();
      for (size_t d = 0; d < o.dense; ++d) EXPECT_EQ(xr[d], dense[r * o.dense + d]);
      for (size_t f = 0; f < o.fields; ++f) {
        const TableKey tk = table_key(o, f, raw[r * o.fields + f]);
        for (size_t j = 0; j < o.dim; ++j) {
          EXPECT_EQ(xr[o.dense + f * o.dim + j], row_value(tk.first, tk.second, j))
              << r << " " << f << " " << j;
        }
      }
    }
  }
}

// A micro-batch of a step prepared whole (gradient accumulation): gathering records [first,
// first + n) with their own dense features gives those records' part of the whole gather.
TEST(EmbeddingInputTest, GatherOfARecordRangeIsThatPartOfTheWhole) {
  const EmbeddingInputOptions o = small_options(2, false, 2, 3, 4);
  const size_t batch = 9;
  const auto raw = random_ids(batch, o.fields, 5, 7);
  std::vector<float> dense(batch * o.dense);
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = static_cast<float>(i) + 0.25f;
  EmbeddingInput in(o);
  in.prepare(raw.data(), batch);
  set_all_rows(in);
  std::vector<float> whole(batch * in.input_dim());
  in.gather(dense.data(), whole.data());
  for (const auto& [first, n] : std::vector<std::pair<size_t, size_t>>{{0, 3}, {3, 3}, {6, 3}, {8, 1}, {0, 9}}) {
    std::vector<float> part(n * in.input_dim(), std::nanf(""));
    in.gather(dense.data() + first * o.dense, first, n, part.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + static_cast<long>(first * in.input_dim())))
        << first << " +" << n;
  }
}

// A shard with none of the batch's keys is asked for nothing and needs no rows; dense may be 0.
TEST(EmbeddingInputTest, ShardsWithoutKeysNeedNoRows) {
  const EmbeddingInputOptions o = small_options(16, false, 0, 1, 2);
  const std::vector<uint64_t> raw = {42, 42};
  EmbeddingInput in(o);
  in.prepare(raw.data(), 2);
  const int holder = shard_of(embedding_key(0, 42, false), 16);
  for (int s = 0; s < 16; ++s) EXPECT_EQ(in.pull(s).size(), s == holder ? 1u : 0u);
  std::string error;
  ASSERT_TRUE(in.set_rows(holder, answer(in.pull(holder), 2), &error)) << error;
  std::vector<float> x(4);
  in.gather(nullptr, x.data());
  EXPECT_EQ(x[0], x[2]);
  EXPECT_EQ(x[1], x[3]);
  const std::vector<float> dx = {1.0f, 2.0f, 10.0f, 20.0f};
  const auto g = in.gradients(holder, dx.data());
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].values, (std::vector<float>{11.0f, 22.0f}));
  EXPECT_TRUE(in.gradients((holder + 1) % 16, dx.data()).empty());
}

// The sums against a plain loop over records then fields: the same additions in the same order,
// so the same bits.
TEST(EmbeddingInputTest, GradientsAreThePerKeySums) {
  for (bool per_field : {false, true}) {
    const EmbeddingInputOptions o = small_options(3, per_field, 13, 26, 8);
    const size_t batch = 100;
    const auto raw = random_ids(batch, o.fields, 7, 30);
    EmbeddingInput in(o);
    in.prepare(raw.data(), batch);
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> dx(batch * in.input_dim());
    for (float& v : dx) v = dist(rng);

    std::map<TableKey, std::vector<float>> want;
    for (size_t r = 0; r < batch; ++r) {
      for (size_t f = 0; f < o.fields; ++f) {
        std::vector<float>& sum = want[table_key(o, f, raw[r * o.fields + f])];
        sum.resize(o.dim, 0.0f);
        for (size_t j = 0; j < o.dim; ++j) sum[j] += dx[r * in.input_dim() + o.dense + f * o.dim + j];
      }
    }
    for (int s = 0; s < o.num_ps; ++s) {
      const std::vector<SparseSection> g = in.gradients(s, dx.data());
      ASSERT_EQ(g.size(), in.pull(s).size());
      for (size_t k = 0; k < g.size(); ++k) {
        EXPECT_EQ(g[k].table, in.pull(s)[k].table);
        EXPECT_EQ(g[k].dim, o.dim);
        EXPECT_EQ(g[k].ids, in.pull(s)[k].ids);
        ASSERT_EQ(g[k].values.size(), g[k].ids.size() * o.dim);
      }
    }
    const auto got = all_gradients(in, dx.data());
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [tk, sum] : want) {
      ASSERT_EQ(got.count(tk), 1u);
      EXPECT_EQ(0, std::memcmp(got.at(tk).data(), sum.data(), o.dim * sizeof(float)));
    }
  }
}

// Each mismatch is refused with a message naming it; the shard then has no rows until a good
// answer.
TEST(EmbeddingInputTest, SetRowsRefusesAnswersThatDoNotMatchThePull) {
  const EmbeddingInputOptions o = small_options(1, true, 2, 3, 4);
  const std::vector<uint64_t> raw = {5, 6, 7, 5, 8, 7};
  EmbeddingInput in(o);
  in.prepare(raw.data(), 2);
  const std::vector<SparseSection> good = answer(in.pull(0), o.dim);  // tables 0 (1 key), 1 (2), 2 (1)
  const auto refused = [&](const std::vector<SparseSection>& rows) {
    std::string error;
    EXPECT_FALSE(in.set_rows(0, rows, &error));
    return error;
  };
  auto rows = good;
  rows[1].table = 4;
  EXPECT_EQ(refused(rows), "embedding rows from ps0: section 1 is table 4, the pull asked for table 1");
  rows = good;
  rows[1].values.resize(4);
  EXPECT_EQ(refused(rows), "embedding rows from ps0: table 1 has 4 values, expected 2 rows x 4 = 8");
  rows = good;
  rows[2].dim = 2;
  rows[2].values.resize(2);
  EXPECT_EQ(refused(rows), "embedding rows from ps0: table 2 has dim 2, expected 4");
  rows = good;
  rows.push_back(rows.back());
  rows.back().table = 3;
  EXPECT_EQ(refused(rows), "embedding rows from ps0: answered 4 table sections, the pull asked for 3");
  rows = good;
  rows.pop_back();
  EXPECT_EQ(refused(rows), "embedding rows from ps0: answered 2 table sections, the pull asked for 3");
  rows = good;
  rows[0].ids = {5};
  EXPECT_EQ(refused(rows), "embedding rows from ps0: table 0 carries 1 IDs (rows carry none)");
  rows = good;
  rows[1].values[5] = std::nanf("");
  EXPECT_EQ(refused(rows), "embedding rows from ps0: table 1's row 1 (ID 8) has a non-finite value");
  std::string error;
  EXPECT_TRUE(in.set_rows(0, good, &error)) << error;
  std::vector<float> x(2 * in.input_dim());
  const std::vector<float> dense = {1, 2, 3, 4};
  in.gather(dense.data(), x.data());
  EXPECT_EQ(x[2], row_value(0, 5, 0));
}

// One instance on a concatenated batch of 2b records gives each key the gradient of two
// instances on its halves, summed (the PS's sum over workers): to float rounding for any values,
// bit for bit for exactly representable ones.
TEST(EmbeddingInputTest, MirroredHalvesSumToTheWholeBatch) {
  for (bool exact : {false, true}) {
    for (bool per_field : {false, true}) {
      const EmbeddingInputOptions o = small_options(2, per_field, 13, 26, 8);
      const size_t half = 64;
      const auto raw = random_ids(2 * half, o.fields, 11, 50);
      EmbeddingInput whole(o), first(o), second(o);
      const size_t width = whole.input_dim();
      std::mt19937 rng(13);
      std::vector<float> dx(2 * half * width);
      for (float& v : dx) {
        v = exact ? static_cast<float>(static_cast<int>(rng() % 2001) - 1000) / 1024.0f
                  : std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
      }
      whole.prepare(raw.data(), 2 * half);
      first.prepare(raw.data(), half);
      second.prepare(raw.data() + half * o.fields, half);
      const auto want = all_gradients(whole, dx.data());
      const auto sum = summed_halves(first, second, dx.data(), half * width, o.dim);
      ASSERT_EQ(sum.size(), want.size());
      double worst = 0;
      for (const auto& [tk, g] : want) {
        for (size_t j = 0; j < o.dim; ++j) {
          const double d = std::fabs(static_cast<double>(g[j]) - sum.at(tk)[j]);
          const double error = exact ? d : d / std::max(1.0, std::fabs(static_cast<double>(g[j])));
          if (!(error <= worst)) worst = error;
        }
      }
      EXPECT_LE(worst, exact ? 0.0 : 1e-6) << "exact " << exact << " per_field " << per_field;
    }
  }
}

// prepare forgets the last batch: the same pulls and sums as a fresh instance, through batches
// of different sizes (the hash table shrinks, grows mid-batch and is reused).
TEST(EmbeddingInputTest, PrepareStartsEachBatchAfresh) {
  const EmbeddingInputOptions o = small_options(4, false, 13, 26, 4);
  EmbeddingInput reused(o);
  for (size_t batch : {size_t{4096}, size_t{7}, size_t{300}, size_t{0}, size_t{2}, size_t{3000}}) {
    const auto raw = random_ids(batch, o.fields, static_cast<uint32_t>(batch) + 1, 100000);
    EmbeddingInput fresh(o);
    fresh.prepare(raw.data(), batch);
    reused.prepare(raw.data(), batch);
    EXPECT_EQ(reused.unique_keys(), fresh.unique_keys());
    std::set<TableKey> distinct;
    for (size_t i = 0; i < raw.size(); ++i) distinct.insert(table_key(o, i % o.fields, raw[i]));
    EXPECT_EQ(reused.unique_keys(), distinct.size());
    std::vector<float> dx(batch * reused.input_dim());
    for (size_t i = 0; i < dx.size(); ++i) dx[i] = static_cast<float>(i % 17) - 8.0f;
    for (int s = 0; s < o.num_ps; ++s) {
      ASSERT_EQ(reused.pull(s).size(), fresh.pull(s).size());
      for (size_t k = 0; k < fresh.pull(s).size(); ++k)
        EXPECT_EQ(reused.pull(s)[k].ids, fresh.pull(s)[k].ids);
      const auto a = reused.gradients(s, dx.data()), b = fresh.gradients(s, dx.data());
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k].values, b[k].values);
    }
  }
}

// Fields listing 1..max_ids IDs each, from a small range (so IDs repeat within a field, across
// fields and records), some missing: counts (batch x fields) and the IDs, field by field.
struct Lists {
  std::vector<uint32_t> counts;
  std::vector<uint64_t> ids;
};

Lists random_lists(size_t batch, size_t fields, uint32_t seed, uint64_t range = 12, uint32_t max_ids = 4) {
  std::mt19937_64 rng(seed);
  Lists l;
  for (size_t c = 0; c < batch * fields; ++c) {
    l.counts.push_back(1 + static_cast<uint32_t>(rng() % max_ids));
    for (uint32_t k = 0; k < l.counts.back(); ++k) l.ids.push_back(rng() % 10 == 0 ? kCriteoMissingId : rng() % range);
  }
  return l;
}

// The plain definition of pooling: per (record, field), the sum of its IDs' rows in order (the
// first's copied, the others added), divided by the count under mean; and per key, the sum over
// (record, field, ID) in that order of the field's gradient (over the count under mean).
struct Pooled {
  std::vector<float> x;
  std::map<TableKey, std::vector<float>> grads;
};

Pooled plain_pooling(const EmbeddingInputOptions& o, const Lists& l, size_t batch, const float* dense, const float* dx) {
  const size_t width = o.dense + o.fields * o.dim;
  Pooled p;
  p.x.assign(batch * width, 0.0f);
  size_t at = 0;
  for (size_t r = 0; r < batch; ++r) {
    for (size_t d = 0; d < o.dense; ++d) p.x[r * width + d] = dense[r * o.dense + d];
    for (size_t f = 0; f < o.fields; ++f) {
      const uint32_t count = l.counts[r * o.fields + f];
      const bool divide = o.pool == EmbeddingPool::kMean && count > 1;
      float* out = &p.x[r * width + o.dense + f * o.dim];
      const float* g = dx + r * width + o.dense + f * o.dim;
      for (uint32_t k = 0; k < count; ++k, ++at) {
        const TableKey tk = table_key(o, f, l.ids[at]);
        std::vector<float>& sum = p.grads[tk];
        sum.resize(o.dim, 0.0f);
        for (size_t j = 0; j < o.dim; ++j) {
          const float v = row_value(tk.first, tk.second, j);
          out[j] = k == 0 ? v : out[j] + v;
          sum[j] += divide ? g[j] / static_cast<float>(count) : g[j];
        }
      }
      if (divide) {
        for (size_t j = 0; j < o.dim; ++j) out[j] /= static_cast<float>(count);
      }
    }
  }
  return p;
}

TEST(EmbeddingInputTest, PoolingOfFieldsListingSeveralIdsIsThePlainDefinition) {
  for (EmbeddingPool pool : {EmbeddingPool::kSum, EmbeddingPool::kMean}) {
    for (bool per_field : {false, true}) {
      EmbeddingInputOptions o = small_options(3, per_field, 2, 5, 4);
      o.pool = pool;
      const size_t batch = 40;
      const Lists l = random_lists(batch, o.fields, 21);
      EmbeddingInput in(o);
      in.prepare(l.ids.data(), l.counts.data(), batch);
      std::set<TableKey> distinct;
      size_t at = 0;
      for (size_t c = 0; c < l.counts.size(); ++c) {
        for (uint32_t k = 0; k < l.counts[c]; ++k) distinct.insert(table_key(o, c % o.fields, l.ids[at++]));
      }
      EXPECT_EQ(in.unique_keys(), distinct.size());  // one pull and one push per unique key
      set_all_rows(in);
      std::mt19937 rng(23);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float> dense(batch * o.dense), dx(batch * in.input_dim());
      for (float& v : dense) v = dist(rng);
      for (float& v : dx) v = dist(rng);
      const Pooled want = plain_pooling(o, l, batch, dense.data(), dx.data());
      std::vector<float> x(batch * in.input_dim(), std::nanf(""));
      in.gather(dense.data(), x.data());
      EXPECT_EQ(0, std::memcmp(x.data(), want.x.data(), x.size() * sizeof(float)))
          << embedding_pool_name(pool) << " per_field " << per_field;
      // A micro-batch of the prepared records: its part of the whole.
      std::vector<float> part(7 * in.input_dim());
      in.gather(dense.data() + 11 * o.dense, 11, 7, part.data());
      EXPECT_TRUE(std::equal(part.begin(), part.end(), x.begin() + 11 * static_cast<long>(in.input_dim())));
      const auto got = all_gradients(in, dx.data());
      ASSERT_EQ(got.size(), want.grads.size());
      for (const auto& [tk, sum] : want.grads) {
        ASSERT_EQ(got.count(tk), 1u);
        EXPECT_EQ(0, std::memcmp(got.at(tk).data(), sum.data(), o.dim * sizeof(float)))
            << embedding_pool_name(pool) << " per_field " << per_field << " key " << tk.second;
      }
    }
  }
}

// A mean differs from a sum: a field of 3 IDs under mean is a third of its sum, and each ID gets
// a third of the field's gradient (the plain definition above could share a mistake).
TEST(EmbeddingInputTest, MeanIsTheSumOverTheCount) {
  EmbeddingInputOptions o = small_options(1, true, 0, 1, 2);
  const std::vector<uint64_t> ids = {5, 7, 5};  // 5 twice: two occurrences of one key
  const std::vector<uint32_t> counts = {3};
  std::vector<float> x_sum(2), x_mean(2);
  std::map<TableKey, std::vector<float>> g_sum, g_mean;
  const std::vector<float> dx = {3.0f, -6.0f};
  for (EmbeddingPool pool : {EmbeddingPool::kSum, EmbeddingPool::kMean}) {
    o.pool = pool;
    EmbeddingInput in(o);
    in.prepare(ids.data(), counts.data(), 1);
    set_all_rows(in);
    in.gather(nullptr, (pool == EmbeddingPool::kSum ? x_sum : x_mean).data());
    (pool == EmbeddingPool::kSum ? g_sum : g_mean) = all_gradients(in, dx.data());
  }
  for (size_t j = 0; j < 2; ++j) {
    const float sum = 2 * row_value(0, 5, j) + row_value(0, 7, j);
    EXPECT_EQ(x_sum[j], sum);
    EXPECT_FLOAT_EQ(x_mean[j], sum / 3);
  }
  EXPECT_EQ(g_sum.at({0, 5}), (std::vector<float>{6.0f, -12.0f}));
  EXPECT_EQ(g_sum.at({0, 7}), (std::vector<float>{3.0f, -6.0f}));
  EXPECT_EQ(g_mean.at({0, 5}), (std::vector<float>{2.0f, -4.0f}));
  EXPECT_EQ(g_mean.at({0, 7}), (std::vector<float>{1.0f, -2.0f}));
}

// Data of one ID per field: counts of 1 (as the Criteo reader gives them) or none, sum or mean,
// the same input and gradients to the bit.
TEST(EmbeddingInputTest, OneIdPerFieldGivesTheSameBitsUnderEitherPool) {
  const EmbeddingInputOptions base = small_options(2, false, 13, 26, 8);
  const size_t batch = 50;
  const auto raw = random_ids(batch, base.fields, 31, 60);
  const std::vector<uint32_t> ones(batch * base.fields, 1);
  std::vector<float> dense(batch * base.dense), dx(batch * (base.dense + base.fields * base.dim));
  std::mt19937 rng(37);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : dense) v = dist(rng);
  for (float& v : dx) v = dist(rng);
  std::vector<float> first_x;
  std::map<TableKey, std::vector<float>> first_g;
  for (EmbeddingPool pool : {EmbeddingPool::kSum, EmbeddingPool::kMean}) {
    for (bool with_counts : {false, true}) {
      EmbeddingInputOptions o = base;
      o.pool = pool;
      EmbeddingInput in(o);
      in.prepare(raw.data(), with_counts ? ones.data() : nullptr, batch);
      set_all_rows(in);
      std::vector<float> x(batch * in.input_dim());
      in.gather(dense.data(), x.data());
      const auto g = all_gradients(in, dx.data());
      if (first_x.empty()) {
        first_x = x;
        first_g = g;
        continue;
      }
      EXPECT_EQ(0, std::memcmp(x.data(), first_x.data(), x.size() * sizeof(float)));
      EXPECT_TRUE(g == first_g) << embedding_pool_name(pool) << " counts " << with_counts;
    }
  }
}

// N workers' pushes equal one worker's on the concatenated batch, with lists and mean pooling.
TEST(EmbeddingInputTest, MirroredHalvesWithListsSumToTheWholeBatch) {
  for (EmbeddingPool pool : {EmbeddingPool::kSum, EmbeddingPool::kMean}) {
    EmbeddingInputOptions o = small_options(2, false, 3, 6, 4);
    o.pool = pool;
    const size_t half = 32;
    const Lists l = random_lists(2 * half, o.fields, 41, 20, 5);
    size_t first_ids = 0;
    for (size_t c = 0; c < half * o.fields; ++c) first_ids += l.counts[c];
    EmbeddingInput whole(o), first(o), second(o);
    const size_t width = whole.input_dim();
    std::mt19937 rng(43);
    std::vector<float> dx(2 * half * width);
    for (float& v : dx) v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
    whole.prepare(l.ids.data(), l.counts.data(), 2 * half);
    first.prepare(l.ids.data(), l.counts.data(), half);
    second.prepare(l.ids.data() + first_ids, l.counts.data() + half * o.fields, half);
    const auto want = all_gradients(whole, dx.data());
    const auto sum = summed_halves(first, second, dx.data(), half * width, o.dim);
    ASSERT_EQ(sum.size(), want.size());
    for (const auto& [tk, g] : want) {
      for (size_t j = 0; j < o.dim; ++j) EXPECT_NEAR(g[j], sum.at(tk)[j], 1e-6) << embedding_pool_name(pool);
    }
  }
}

}  // namespace
}  // namespace pstrain
