// pstrain-export's standard formats (worker/export/export_formats.h): the safetensors file and the .npz
// of arrays read back byte for byte by readers written here from the formats' documents, the
// tables' arrays merged from every shard's file, and the feature transform in model.json.
#include "worker/export/export_formats.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "shared/checkpoint/table_file.h"
#include "shared/config/feature_schema.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "test_util/idx_writer.h"

namespace pstrain::test {
namespace {

using Json = nlohmann::json;

uint64_t le(const std::string& b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(b.at(at + i))} << (8 * i);
  return v;
}

std::string file(const std::string& path) {
  std::string bytes, error;
  EXPECT_TRUE(read_whole_file(path, &bytes, &error)) << error;
  return bytes;
}

struct Arrays {
  std::vector<float> w{1.5f, -2.0f, 0.25f, 3.0f, 4.0f, -0.0f};
  std::vector<int64_t> ids{-1, 0, 7, INT64_MAX};
  std::vector<ExportArray> list() const {
    return {{"layer0.weight", ExportArray::Type::kFloat32, {2, 3}, w.data(), w.size() * 4},
            {"embedding.ids.ids", ExportArray::Type::kInt64, {4}, ids.data(), ids.size() * 8},
            {"empty", ExportArray::Type::kFloat32, {0, 3}, w.data(), 0}};
  }
};

TEST(ExportFormatsTest, SafetensorsHeaderAndBytesAreTheDocumentedLayout) {
  TempDir dir("safetensors");
  const Arrays a;
  const std::string path = dir.path + "/m.safetensors";
  write_safetensors(path, a.list(), {{"pstrain_model", "{\"x\": 1}"}});
  const std::string b = file(path);
  const uint64_t n = le(b, 0, 8);
  ASSERT_LE(8 + n, b.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "the data starts 8-aligned";
  const Json h = Json::parse(b.substr(8, n));  // trailing spaces are allowed JSON whitespace
  EXPECT_EQ(h["__metadata__"]["pstrain_model"], "{\"x\": 1}");
  EXPECT_EQ(h["layer0.weight"]["dtype"], "F32");
  EXPECT_EQ(h["layer0.weight"]["shape"], Json::array({2, 3}));
  EXPECT_EQ(h["layer0.weight"]["data_offsets"], Json::array({0, 24}));
  EXPECT_EQ(h["embedding.ids.ids"]["dtype"], "I64");
  EXPECT_EQ(h["embedding.ids.ids"]["data_offsets"], Json::array({24, 56}));
  EXPECT_EQ(h["empty"]["shape"], Json::array({0, 3}));
  EXPECT_EQ(h["empty"]["data_offsets"], Json::array({56, 56}));
  ASSERT_EQ(b.size(), 8 + n + 56) << "no byte beyond the last array";
  const std::string data = b.substr(8 + n);
  EXPECT_EQ(std::memcmp(data.data(), a.w.data(), 24), 0);
  EXPECT_EQ(std::memcmp(data.data() + 24, a.ids.data(), 32), 0);
  EXPECT_EQ(le(data, 24, 8), UINT64_MAX) << "int64 -1 little-endian";
}

// The zip's members through its central directory, each checked against its local header and CRC.
std::map<std::string, std::string> unzip(const std::string& z) {
  std::map<std::string, std::string> members;
  const size_t end = z.size() - 22;
  EXPECT_EQ(le(z, end, 4), 0x06054b50u);
  const uint64_t count = le(z, end + 10, 2), at = le(z, end + 16, 4);
  size_t p = at;
  for (uint64_t i = 0; i < count; ++i) {
    EXPECT_EQ(le(z, p, 4), 0x02014b50u);
    EXPECT_EQ(le(z, p + 10, 2), 0u) << "stored";
    const uint32_t crc = static_cast<uint32_t>(le(z, p + 16, 4));
    const uint64_t size = le(z, p + 20, 4), name_length = le(z, p + 28, 2), local = le(z, p + 42, 4);
    const std::string name = z.substr(p + 46, name_length);
    EXPECT_EQ(le(z, local, 4), 0x04034b50u);
    EXPECT_EQ(z.substr(local + 30, name_length), name);
    std::string bytes = z.substr(local + 30 + name_length + le(z, local + 28, 2), size);
    EXPECT_EQ(crc32(crc32(0, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()),
                    static_cast<uInt>(bytes.size())),
              crc)
        << name;
    members[name] = std::move(bytes);
    p += 46 + name_length;
  }
  EXPECT_EQ(p, end);
  return members;
}

TEST(ExportFormatsTest, NpzMembersAreNpyFilesOfTheArraysAndTheFilesAsGiven) {
  TempDir dir("npz");
  const Arrays a;
  const std::string path = dir.path + "/m.npz";
  write_npz_arrays(path, a.list(), {{"model.json", "{}\n"}});
  const std::map<std::string, std::string> m = unzip(file(path));
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m.at("model.json"), "{}\n");
  const std::vector<std::tuple<std::string, std::string, const void*, size_t>> expected = {
      {"layer0.weight.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", a.w.data(), 24},
      {"embedding.ids.ids.npy", "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", a.ids.data(),
       32},
      {"empty.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", nullptr, 0}};
  for (const auto& [name, dict, data, bytes] : expected) {
    const std::string& npy = m.at(name);
    ASSERT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8)) << name;
    const uint64_t header = le(npy, 8, 2);
    EXPECT_EQ((10 + header) % 64, 0u) << name;
    ASSERT_EQ(npy.size(), 10 + header + bytes) << name;
    const std::string text = npy.substr(10, header);
    EXPECT_EQ(text.substr(0, dict.size()), dict) << name;
    EXPECT_EQ(text.find_first_not_of(' ', dict.size()), header - 1) << name;
    EXPECT_EQ(text.back(), '\n') << name;
    if (bytes > 0) {
      EXPECT_EQ(std::memcmp(npy.data() + 10 + header, data, bytes), 0) << name;
    }
  }
}

std::string table_bytes(uint32_t table, const std::string& name, uint64_t dim, std::vector<uint64_t> ids,
                        float base) {
  SavedTable t;
  t.header.format = 1, t.header.table = table, t.header.dim = dim, t.header.name = name,
  t.header.optimizer = "sgd";
  t.header.rows = ids.size();
  for (uint64_t id : ids) {
    t.rows.push_back({id, 1, 1});
    for (uint64_t j = 0; j < dim; ++j) t.values.push_back(base + static_cast<float>(id % 1000) + 0.5f * j);
  }
  return encode_saved_table(t);
}

TEST(ExportFormatsTest, TablesAreEveryShardsRowsInIncreasingIdOrder) {
  EmbeddingSetup e;
  e.dim = 2, e.tables = {"ids"}, e.num_ps = 2;
  const std::vector<std::pair<std::string, std::string>> files = {
      {"a", table_bytes(0, "ids", 2, {5, 900, UINT64_MAX - 1}, 0)},
      {"b", table_bytes(0, "ids", 2, {3, 6}, 0)}};
  const std::vector<TableArrays> t = table_arrays(e, files, "here");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].ids, (std::vector<int64_t>{3, 5, 6, 900, -2})) << "increasing as uint64";
  EXPECT_EQ(t[0].rows, (std::vector<float>{3, 3.5f, 5, 5.5f, 6, 6.5f, 900, 900.5f, 614,
                                           614.5f}));  // (2^64 - 2) % 1000 = 614

  EXPECT_THROW(table_arrays(e, {files[0], {"c", table_bytes(0, "ids", 2, {900}, 1)}}, "here"), Error)
      << "an ID in two files";
  try {
    table_arrays(e, {{"d", table_bytes(0, "ids", 3, {1}, 0)}}, "here");
    ADD_FAILURE();
  } catch (const Error& x) {
    EXPECT_STREQ(x.what(), "here: d: its rows have dim 3, the model's 2 (model.json)");
  }
  try {
    table_arrays(e, {{"f", table_bytes(0, "C1", 2, {1}, 0)}}, "here");
    ADD_FAILURE();
  } catch (const Error& x) {
    EXPECT_STREQ(x.what(), "here: f: it holds table 'C1' (0), which model.json's embeddings do not name");
  }
  std::string damaged = files[0].second;
  damaged[40] ^= 1;
  EXPECT_THROW(table_arrays(e, {{"g", damaged}}, "here"), Error);
}

ModelDescription ctr_model(const std::string& schema) {
  ModelDescription d;
  d.spec = "dense 2";
  d.classes = 2;
  d.embeddings.dim = 2;
  d.embeddings.dense = 2;
  d.embeddings.fields = 3;
  d.embeddings.per_field_tables = true;
  d.embeddings.tables = {"os", "site", "tags"};
  d.embeddings.schema = schema;
  d.input_shape = {2 + 3 * 2};
  return d;
}

TEST(ExportFormatsTest, ModelJsonHoldsTheSchemaAsASchemaFileAndTheArraysNames) {
  const std::string text = R"({"delimiter": "comma", "header": true, "columns": [
    {"name": "clicked", "type": "label"}, {"name": "price", "type": "numeric", "transform": "log1p"},
    {"name": "age", "type": "numeric", "integer": true}, {"name": "os", "type": "categorical", "ids": "string"},
    {"name": "site", "type": "categorical", "ids": "int"}, {"name": "tags", "type": "categorical", "separator": "|"},
    {"name": "a comment", "type": "ignore"}]})";
  const FeatureSchema s = parse_feature_schema(text, "s.json");
  EmbeddingSetup e = ctr_model(s.canonical()).embeddings;
  const Json j =
      Json::parse(export_model_json(ctr_model(s.canonical()), ExportFormat::kSafetensors, table_arrays(e, {}, "here")));
  const Json& x = j.at("export");
  EXPECT_EQ(x["format"], "safetensors");
  EXPECT_EQ(x["reader"], "schema");
  EXPECT_EQ(parse_feature_schema(x["features"].dump(), "back").canonical(), s.canonical())
      << x["features"].dump();
  EXPECT_EQ(x["tables"][2]["ids"], "embedding.tags.ids");
  EXPECT_EQ(x["tables"][2]["weights"], "embedding.tags.rows");
  EXPECT_EQ(x["tables"][2]["rows"], 0);
  EXPECT_EQ(j.at("embeddings").at("dim"), 2) << "model.json's own fields stay";

  const Json criteo = Json::parse(export_model_json(ctr_model(""), ExportFormat::kNpzArrays, {}));
  EXPECT_EQ(criteo["export"]["reader"], "criteo");
  EXPECT_EQ(parse_feature_schema(criteo["export"]["features"].dump(), "back").canonical(),
            criteo_feature_schema().canonical());
}

TEST(ExportFormatsTest, AFailedWriteLeavesNothingAndNamesTheFile) {
  TempDir dir("npzfail");
  const Arrays a;
  std::filesystem::create_directory(dir.path + "/m.npz");  // a directory where the file goes
  try {
    write_safetensors(dir.path + "/m.npz", a.list(), {});
    ADD_FAILURE();
  } catch (const Error& x) {
    EXPECT_NE(std::string(x.what()).find(dir.path + "/m.npz"), std::string::npos) << x.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/m.npz.tmp"));
}

}  // namespace
}  // namespace pstrain::test
