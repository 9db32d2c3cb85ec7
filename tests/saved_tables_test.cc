// The saved tables behind --evaluate and --predict of a CTR model (worker/sparse/saved_tables.h,
// shared/checkpoint/table_file.h): the rows a PS shard saved read back as the shard's pulls read
// them, IDs without a row included; damaged and mismatched files are refused naming the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include "shared/checkpoint/table_file.h"
#include "shared/train/row_init.h"
#include "shared/util/crc32c.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "sparse_test_util.h"
#include "test_util/idx_writer.h"
#include "worker/sparse/saved_tables.h"

namespace pstrain::test {
namespace {

using sparse_test::Grads;

constexpr size_t kDim = 4;

TableOptions ids_table(TableOptimizer optimizer, uint32_t min_count) {
  TableOptions t;
  t.name = "ids";
  t.id = 0;
  t.dim = kDim;
  t.seed = 7;
  t.optimizer.kind = optimizer;
  t.init.kind = row_init_for(optimizer);
  t.min_count = min_count;
  return t;
}

EmbeddingSetup setup_of(const TableOptions& t, int num_ps) {
  EmbeddingSetup e;
  e.dim = static_cast<uint32_t>(t.dim);
  e.tables = {t.name};
  e.init = row_init_name(t.init.kind);
  e.seed = t.seed;
  e.min_count = t.min_count;
  e.optimizer = table_optimizer_name(t.optimizer.kind);
  e.num_ps = num_ps;
  return e;
}

// Three steps over IDs 1..40 (so that min_count 3 admits them), pushed by one worker.
ShardTables trained(const TableOptions& t) {
  ShardTables s = sparse_test::shard(t);
  for (uint64_t step = 0; step < 3; ++step) {
    Grads g;
    g.table = t.id;
    for (uint64_t id = 1; id <= 40; ++id) {
      g.ids.push_back(id);
      for (size_t j = 0; j < kDim; ++j) g.g.push_back(0.01f * static_cast<float>(id % 7) - 0.02f * j);
    }
    sparse_test::apply_ok(s, step, {g});
  }
  return s;
}

std::string saved_bytes(const ShardTables& s, uint32_t table) {
  std::string out;
  s.table(table)->save(&out);
  return out;
}

// What the source answers for `ids` of table 0.
std::vector<float> read_rows(RowSource& source, const std::vector<uint64_t>& ids) {
  std::vector<SparseSection> request(1);
  request[0].ids = ids;
  const uint64_t ticket = source.request_rows(0, {&request});
  std::vector<std::vector<SparseSection>> answer = source.receive_rows(ticket);
  EXPECT_EQ(answer.size(), 1u);
  EXPECT_EQ(answer[0].size(), 1u);
  return answer[0][0].values;
}

std::vector<float> pulled(const ShardTables& s, const std::vector<uint64_t>& ids) {
  std::vector<float> out(ids.size() * kDim);
  std::string error;
  EXPECT_TRUE(s.pull(0, ids.data(), ids.size(), out.data(), &error)) << error;
  return out;
}

std::string error_of(const std::string& dir, const EmbeddingSetup& e) {
  try {
    open_saved_tables(dir, e);
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

// Saved rows, and IDs without one (never seen: 41..45; only sighted under min_count 3: none
// here, every seen ID was admitted at its third step), read as the shard's pull reads them,
// bit for bit: the initialiser's rows (uniform for adagrad, zeros for ftrl) or zeros while not
// admitted.
TEST(SparseSavedTablesTest, RowsReadAsTheShardsPullReadsThem) {
  for (const auto& [optimizer, min_count] : std::vector<std::pair<TableOptimizer, uint32_t>>{
           {TableOptimizer::kAdagrad, 1}, {TableOptimizer::kFtrl, 1}, {TableOptimizer::kAdam, 3}}) {
    const TableOptions t = ids_table(optimizer, min_count);
    const ShardTables s = trained(t);
    TempDir dir("saved-tables");
    std::filesystem::create_directories(dir.path + "/embeddings");
    write_file_atomically(dir.path + "/embeddings/ids.shard0-of-1", saved_bytes(s, 0));
    const auto source = open_saved_tables(dir.path, setup_of(t, 1));
    std::vector<uint64_t> ids = {45, 3, 17, 41, 40, 1, 44};
    const std::vector<float> got = read_rows(*source, ids), want = pulled(s, ids);
    EXPECT_TRUE(sparse_test::same_bits(got, want)) << table_optimizer_name(optimizer);
    const std::vector<float> absent = read_rows(*source, {41});
    const bool zeros = std::all_of(absent.begin(), absent.end(), [](float v) { return v == 0.0f; });
    EXPECT_EQ(zeros, optimizer == TableOptimizer::kFtrl || min_count > 1) << table_optimizer_name(optimizer);
  }
}

// Shard files of 2 shards read together; an ID in the other shard's file, a missing file, a
// damaged one (every byte flipped in turn, truncated, extended), another table's or dim are
// refused naming the file.
TEST(SparseSavedTablesTest, DamagedOrMismatchedFilesAreRefusedNamingTheFile) {
  const TableOptions t = ids_table(TableOptimizer::kAdagrad, 1);
  const ShardTables whole = trained(t);
  TempDir dir("saved-tables");
  const std::string at = dir.path + "/embeddings/";
  EXPECT_EQ(error_of(dir.path, setup_of(t, 2)),
            dir.path + "/model.json describes embedding tables, but there is no " + dir.path +
                "/embeddings/ (the PS shards write it at the end of a job with --save-params)");
  std::filesystem::create_directories(at);
  std::string shards[2];
  for (int s = 0; s < 2; ++s) {
    SparseShardOptions o;
    o.index = s;
    o.num_ps = 2;
    std::string error;
    ShardTables loaded(o, {t});
    ASSERT_TRUE(loaded.load(0, saved_bytes(whole, 0), &error)) << error;
    shards[s] = saved_bytes(loaded, 0);
    write_file_atomically(at + "ids.shard" + std::to_string(s) + "-of-2", shards[s]);
  }
  const std::vector<uint64_t> ids = {1, 2, 3, 39, 40, 41};
  EXPECT_TRUE(sparse_test::same_bits(read_rows(*open_saved_tables(dir.path, setup_of(t, 2)), ids), pulled(whole, ids)));

  const std::string file = at + "ids.shard1-of-2";
  const auto refused = [&](const std::string& bytes) {
    write_file_atomically(file, bytes);
    const std::string error = error_of(dir.path, setup_of(t, 2));
    write_file_atomically(file, shards[1]);
    return error;
  };
  EXPECT_EQ(refused(shards[0]).rfind(file + ": ID ", 0), 0u);  // shard 0's rows in shard 1's file
  EXPECT_NE(refused(shards[0]).find(" is not shard 1's of 2"), std::string::npos);
  for (size_t i = 0; i < shards[1].size(); ++i) {
    std::string bytes = shards[1];
    bytes[i] = static_cast<char>(bytes[i] ^ 0x20);
    ASSERT_EQ(refused(bytes), file + ": checksum mismatch (corrupted)") << "byte " << i;
  }
  EXPECT_EQ(refused(shards[1].substr(0, 10)), file + ": truncated (10 bytes)");
  EXPECT_EQ(refused(shards[1] + "x"), file + ": checksum mismatch (corrupted)");
  EmbeddingSetup other = setup_of(t, 2);
  other.dim = 8;
  EXPECT_EQ(error_of(dir.path, other), at + "ids.shard0-of-2: its rows have dim 4, the model's 8 (model.json)");
  other = setup_of(t, 2);
  other.optimizer = "adam";
  EXPECT_EQ(error_of(dir.path, other), at + "ids.shard0-of-2: its optimizer is adagrad, the model's adam (model.json)");
  other = setup_of(t, 3);
  EXPECT_EQ(error_of(dir.path, other).rfind(at + "ids.shard0-of-3: cannot read it: ", 0), 0u);
  EXPECT_NE(error_of(dir.path, other).find("(the model's tables were saved by 3 PS shard(s), a file per table and shard)"),
            std::string::npos);
  std::filesystem::rename(at + "ids.shard0-of-2", at + "C1.shard0-of-2");
  other = setup_of(t, 2);
  other.tables = {"C1"};
  EXPECT_EQ(error_of(dir.path, other), at + "C1.shard0-of-2: it holds table 'ids' (0), not 'C1' (0)");
}

// The reader of the format itself: the header as written, the rows' weights without their
// slots, everything (slots, bookkeeping, sightings) written back to the same bytes, and a file
// whose checksum holds but whose sizes do not add up.
TEST(SparseSavedTablesTest, TheFileReaderReadsWhatATableSaved) {
  const TableOptions t = ids_table(TableOptimizer::kAdam, 1);
  const ShardTables s = trained(t);
  const std::string bytes = saved_bytes(s, 0);
  SavedTable rows;
  std::string error;
  ASSERT_TRUE(read_saved_table(bytes, &rows, &error, SavedTableParts::kWeights)) << error;
  EXPECT_EQ(rows.header.name, "ids");
  EXPECT_EQ(rows.header.optimizer, "adam");
  EXPECT_EQ(rows.header.slots, 2u);
  EXPECT_EQ(rows.header.dim, kDim);
  ASSERT_EQ(rows.rows.size(), 40u);
  std::vector<uint64_t> ids;
  for (const SavedRow& r : rows.rows) ids.push_back(r.id);
  EXPECT_TRUE(sparse_test::same_bits(rows.values, pulled(s, ids)));
  EXPECT_TRUE(rows.sightings.empty());
  SavedTable header;
  ASSERT_TRUE(read_saved_table(bytes, &header, &error, SavedTableParts::kHeader)) << error;
  EXPECT_EQ(header.header.rows, 40u);
  EXPECT_TRUE(header.rows.empty());
  EXPECT_TRUE(header.values.empty());
  SavedTable all;
  ASSERT_TRUE(read_saved_table(bytes, &all, &error)) << error;
  ASSERT_EQ(all.values.size(), 40u * 3 * kDim);
  EXPECT_EQ(all.rows[0].updates, 3u);
  EXPECT_EQ(all.rows[0].last_touched, 2u);
  EXPECT_EQ(encode_saved_table(all), bytes);
  std::string short_by_one = bytes.substr(0, bytes.size() - 5);  // a row's last byte gone, checksum redone
  const uint32_t crc = crc32c::value(short_by_one.data(), short_by_one.size());
  for (int i = 0; i < 4; ++i) short_by_one.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  EXPECT_FALSE(read_saved_table(short_by_one, &rows, &error));
  EXPECT_EQ(error, "its sizes do not add up");
}

// What only a file written by hand can hold, each refused with its reason: IDs out of order, a
// value (a slot's too) that is not finite, a sighting of a held ID or of count 0.
TEST(SparseSavedTablesTest, TheFileReaderRefusesWhatNoTableWrites) {
  SavedTable good;
  good.header.table = 3;
  good.header.dim = 2;
  good.header.slots = 1;
  good.header.name = "C1";
  good.header.optimizer = "adagrad";
  good.rows = {{5, 1, 1}, {9, 2, 2}};
  good.values = {1, 2, 0.5f, 0.5f, 3, 4, 0.25f, 0.25f};
  good.sightings = {{7, 1, 2}, {11, 2, 2}};
  const auto error_of = [](const SavedTable& t) {
    SavedTable back;
    std::string error;
    for (SavedTableParts parts : {SavedTableParts::kHeader, SavedTableParts::kWeights}) {
      EXPECT_FALSE(read_saved_table(encode_saved_table(t), &back, &error, parts));
    }
    EXPECT_FALSE(read_saved_table(encode_saved_table(t), &back, &error)) << "it was read";
    EXPECT_TRUE(back.rows.empty() && back.values.empty() && back.sightings.empty());
    return error;
  };
  SavedTable back;
  std::string error;
  ASSERT_TRUE(read_saved_table(encode_saved_table(good), &back, &error)) << error;
  EXPECT_EQ(back.sightings.size(), 2u);
  EXPECT_EQ(back.sightings[1].count, 2u);
  SavedTable bad = good;
  bad.rows[1].id = 5;
  EXPECT_EQ(error_of(bad), "IDs not sorted or repeated");
  bad = good;
  bad.sightings[1].id = 7;
  EXPECT_EQ(error_of(bad), "IDs not sorted or repeated");
  bad = good;
  bad.values[7] = std::numeric_limits<float>::quiet_NaN();  // the second row's slot
  EXPECT_EQ(error_of(bad), "a value is not finite");
  bad = good;
  bad.sightings[1].id = 9;
  EXPECT_EQ(error_of(bad), "a sighting of a held ID, or of count 0");
  bad = good;
  bad.sightings[0].count = 0;
  EXPECT_EQ(error_of(bad), "a sighting of a held ID, or of count 0");
  bad = good;
  bad.header.slots = 9;
  bad.values.resize(2 * 10 * 2);
  EXPECT_EQ(error_of(bad), "dim 2 with 9 slots");
}

}  // namespace
}  // namespace pstrain::test
