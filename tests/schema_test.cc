// Tests of --schema (docs/data.md, "Feature schema"): the schema file's checks with their exact
// messages, the preset criteo against the Criteo reader bit for bit (hand-made edge lines and
// tools/ctr_gen.py's data), a CSV file of string, int and multi-valued categories with a header,
// files without the label column, bad lines naming file, line, field and value, and a real job
// (PS and workers) trained on such a CSV file and predicting its label-less rows.
#include "worker/data/schema.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "shared/config/feature_schema.h"
#include "shared/train/sparse_ids.h"
#include "shared/util/error.h"
#include "test_util/build_paths.h"
#include "test_util/errors.h"
#include "test_util/files.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"
#include "worker/data/criteo.h"
#include "worker/data/criteo_dataset.h"
#include "worker/data/ctr_cache.h"
#include "worker/data/open.h"
#include "worker/data/schema_dataset.h"
#include "worker/report/auc.h"

namespace pstrain {
namespace {
namespace fs = std::filesystem;
using test::error_of;
using test::usage_error_of;
using test::write_gzip;
using test::write_text;

// Every record of `data`: features, labels and IDs, read in one call.
struct Records {
  std::vector<float> x;
  std::vector<int32_t> y;
  std::vector<uint64_t> ids;
  std::vector<uint32_t> counts;
};

Records read_all(const Dataset& data) {
  Records r;
  std::vector<size_t> order(data.size());
  std::iota(order.begin(), order.end(), 0);
  r.x.resize(order.size() * data.feature_dim());
  r.y.resize(order.size());
  data.read(order.data(), order.size(), r.x.data(), r.y.data());
  IdLists ids;
  data.read_ids(order.data(), order.size(), &ids);
  r.ids = ids.ids;
  r.counts = ids.counts;
  return r;
}

// Bit for bit (memcmp, so -0.0 and 0.0 differ and NaNs compare).
void expect_same_bits(const Records& a, const Records& b) {
  ASSERT_EQ(a.x.size(), b.x.size());
  EXPECT_EQ(std::memcmp(a.x.data(), b.x.data(), a.x.size() * sizeof(float)), 0);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.counts, b.counts);
}

std::string schema_error(const std::string& json) {
  bool usage = false;
  const std::string message = error_of([&] { parse_feature_schema(json, "s.json"); }, &usage);
  EXPECT_TRUE(usage) << message;
  return message;
}

TEST(SchemaFile, BadSchemasAreUsageErrorsNamingTheColumnAndTheFix) {
  const std::string ok =
      R"({"columns": [{"name": "y", "type": "label"}, {"name": "os", "type": "categorical"}]})";
  EXPECT_EQ(parse_feature_schema(ok, "s.json").fields(), 1u);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "s.json: not a JSON schema: "},
      {"[]", "s.json: a schema is a JSON object with \"columns\" (docs/data.md, \"Feature schema\")"},
      {R"({"colums": []})", "s.json: unknown key \"colums\" (the keys here: columns, delimiter, header)"},
      {R"({"columns": []})",
       "s.json: needs \"columns\": a list of columns such as {\"name\": \"clicked\", \"type\": \"label\"}"},
      {R"({"delimiter": ";", "columns": [{"name": "a", "type": "numeric"}]})",
       "s.json: \"delimiter\" must be tab or comma, not \";\""},
      {R"({"header": "yes", "columns": [{"name": "a", "type": "numeric"}]})",
       "s.json: \"header\" must be true or false, not \"yes\""},
      {R"({"columns": [{"type": "numeric"}]})", "s.json: column 1: needs a \"name\" (a non-empty string)"},
      {R"({"columns": [{"name": "a", "type": "number"}]})",
       "s.json: column 1 (\"a\"): \"type\" must be one of label, numeric, categorical, ignore, not "
       "\"number\""},
      {R"({"columns": [{"name": "a", "type": "numeric", "transform": "log"}]})",
       "s.json: column 1 (\"a\"): \"transform\" must be none (the value as it is) or log1p (log(1 + max(x, "
       "0)), "
       "Criteo's), not \"log\""},
      {R"({"columns": [{"name": "a", "type": "categorical", "ids": "str"}]})",
       "s.json: column 1 (\"a\"): \"ids\" must be string (FNV-1a of the bytes), int (SplitMix64 of the "
       "int64) or hex "
       "(1 to 16 hex digits, the ID itself), not \"str\""},
      {R"({"columns": [{"name": "a", "type": "categorical", "seperator": "|"}]})",
       "s.json: column 1 (\"a\"): unknown key \"seperator\" (the keys here: ids, name, separator, type)"},
      {R"({"delimiter": "comma", "columns": [{"name": "a", "type": "categorical", "separator": ","}]})",
       "s.json: column 1 (\"a\"): \"separator\" must be one character other than the delimiter, '\"' and a "
       "newline "
       "(e.g. \"|\" in a CSV file, \",\" in a tab-separated one), not \",\""},
      {R"({"columns": [{"name": "a b", "type": "categorical"}]})",
       "s.json: column 1 (\"a b\"): a categorical column's name names its per-field table and that table's "
       "files: 1 "
       "to 64 letters, digits, '_', '-' or '.', not starting with '.'"},
      {R"({"columns": [{"name": "a", "type": "numeric"}, {"name": "a", "type": "categorical"}]})",
       "s.json: column 2: the name \"a\" is taken by an earlier column (names must differ)"},
      {R"({"columns": [{"name": "y", "type": "label"}, {"name": "z", "type": "label"}, {"name": "a", "type": "numeric"}]})",
       "s.json: column 2 (\"z\"): a second label column (a schema has at most one)"},
      {R"({"columns": [{"name": "y", "type": "label"}, {"name": "z", "type": "ignore"}]})",
       "s.json: no numeric or categorical column: the model would have no input"},
  };
  for (const auto& [json, message] : cases) {
    const std::string got = schema_error(json);
    EXPECT_EQ(got.substr(0, message.size()), message) << json;
    if (json != "{") {
      EXPECT_EQ(got, message) << json;
    }
  }
}

TEST(SchemaFile, TheShippedExampleIsASchema) {
  const FeatureSchema s = load_feature_schema(std::string(PSTRAIN_SOURCE_DIR) + "/configs/ctr_schema.json");
  EXPECT_EQ(s.dense(), 2u);
  EXPECT_EQ(s.field_names(), (std::vector<std::string>{"os", "site", "tags"}));
  EXPECT_EQ(s.label(), 0u);
}

TEST(SchemaFile, TheFlagIsCheckedAtStartBeforeAnyData) {
  TempDir dir("schema-flags");
  const std::string bad = dir.path + "/bad.json";
  write_text(bad, R"({"columns": [{"name": "a", "type": "categorical", "ids": "str"}]})");
  // The data files do not exist: the schema is refused first.
  const std::string train = dir.path + "/missing.csv";
  EXPECT_EQ(
      usage_error_of({"--schema", bad.c_str(), "--train-data", train.c_str(), "--test-data", train.c_str()}),
      "--schema " + bad +
          ": column 1 (\"a\"): \"ids\" must be string (FNV-1a of the bytes), int (SplitMix64 "
          "of the int64) or hex (1 to 16 hex digits, the ID itself), not \"str\"");
  const std::string missing = dir.path + "/none.json";
  EXPECT_EQ(usage_error_of(
                {"--schema", missing.c_str(), "--train-data", train.c_str(), "--test-data", train.c_str()}),
            "--schema " + missing +
                ": cannot open: No such file or directory (a JSON schema file, or the preset "
                "criteo: docs/data.md, \"Feature schema\")");
  EXPECT_EQ(
      usage_error_of(
          {"--schema", "criteo", "--data-format", "criteo", "--train-data", "t", "--test-data", "t"}),
      "--schema reads --train-data, --test-data and --predict itself: drop --data-format criteo (--schema "
      "criteo reads Criteo files)");
  EXPECT_EQ(usage_error_of({"--schema", "criteo", "--label-column", "y", "--train-data", "t.csv",
                            "--test-data", "t.csv"}),
            "--label-column: --schema names the label column (\"type\": \"label\"): drop --label-column");
  EXPECT_EQ(usage_error_of({"--schema", "criteo", "--train-data", "a.csv,b.csv", "--test-data", "t"}),
            "--train-data 'a.csv,b.csv': --schema reads one file (file names may not contain commas)");
  // Any name is one file read by the schema; --skip-bad-lines and --embedding-dim take it.
  EXPECT_TRUE(test::parse_worker_flags({"--schema", "criteo", "--train-data", "a.csv", "--test-data", "b.dat",
                                        "--skip-bad-lines", "--embedding-dim", "4"})
                  .has_value());
}

// The string and int IDs are part of the format (a scorer outside pstrain recomputes them).
TEST(SchemaIds, StringAndIntIdsArePinned) {
  EXPECT_EQ(schema_string_id(""), 0xcbf29ce484222325ULL);  // FNV-1a 64's published test vectors
  EXPECT_EQ(schema_string_id("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(schema_string_id("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(schema_int_id(0), mix_id(0));
  EXPECT_EQ(schema_int_id(-1), mix_id(UINT64_MAX));
  EXPECT_EQ(schema_int_id(12345), mix_id(12345));
}

// n random Criteo lines with every kind of field: negative, empty and huge integers, hex IDs of
// either case and any length, empty fields, lists; `labelled` false drops the label column.
std::string criteo_lines(size_t n, uint32_t seed, bool labelled = true) {
  std::mt19937_64 rng(seed);
  std::string text;
  char hex[24];
  for (size_t r = 0; r < n; ++r) {
    if (labelled) text += std::to_string(rng() % 2) + '\t';
    for (size_t j = 0; j < kCriteoDense; ++j) {
      if (j > 0) text += '\t';
      const uint64_t kind = rng() % 8;
      if (kind == 0) continue;
      if (kind == 1)
        text += std::to_string(static_cast<int64_t>(rng()));  // any int64, huge ones too
      else
        text += std::to_string(static_cast<int>(rng() % 100000) - 5);
    }
    for (size_t c = 0; c < kCriteoCategorical; ++c) {
      text += '\t';
      const uint64_t kind = rng() % 10;
      if (kind == 0) continue;
      const size_t ids = kind == 1 ? 2 + rng() % 4 : 1;
      for (size_t k = 0; k < ids; ++k) {
        std::snprintf(hex, sizeof hex, rng() % 2 ? "%llx" : "%08llX",
                      static_cast<unsigned long long>(rng() >> (rng() % 60)));
        text += (k ? "," : "") + std::string(hex);
      }
    }
    text += '\n';
  }
  return text;
}

TEST(SchemaCriteo, ThePresetParsesEachLineToTheCriteoReadersBits) {
  const FeatureSchema criteo = criteo_feature_schema();
  EXPECT_EQ(criteo.dense(), kCriteoDense);
  EXPECT_EQ(criteo.fields(), kCriteoCategorical);
  SchemaLineParser parser(criteo, "t.tsv");
  std::istringstream lines(criteo_lines(3000, 11) + criteo_lines(500, 12, false));
  std::string line;
  size_t n = 0, unlabelled = 0;
  while (std::getline(lines, line)) {
    CriteoRecord want;
    ASSERT_EQ(parse_criteo_line(line, want), "") << line;
    CtrRecord got;
    got.dense.assign(criteo.dense(), -1.0f);
    got.ids.assign(criteo.fields(), 0);
    got.counts.assign(criteo.fields(), 1);
    bool skip = false;
    ASSERT_EQ(parser.parse(line, ++n, got, &skip), "") << line;
    EXPECT_FALSE(skip);
    EXPECT_EQ(got.label, want.label);
    unlabelled += want.label == kCriteoNoLabel;
    EXPECT_EQ(std::memcmp(got.dense.data(), want.dense, sizeof want.dense), 0) << line;
    EXPECT_EQ(got.ids, std::vector<uint64_t>(want.ids, want.ids + kCriteoCategorical)) << line;
    EXPECT_EQ(got.counts, std::vector<uint32_t>(want.counts, want.counts + kCriteoCategorical)) << line;
    EXPECT_EQ(got.lists, want.lists) << line;
  }
  EXPECT_EQ(n, 3500u);
  EXPECT_EQ(unlabelled, 500u);  // a 39-field line: Criteo's without the label, for --predict
}

TEST(SchemaCriteo, ThePresetReadsCtrGenDataToTheCriteoReadersBits) {
  TempDir dir("schema-criteo");
  const std::vector<std::string> argv = {PSTRAIN_PYTHON,
                                         std::string(PSTRAIN_SOURCE_DIR) + "/tools/ctr_gen.py",
                                         "--out-dir",
                                         dir.path,
                                         "--train-lines",
                                         "3000",
                                         "--test-lines",
                                         "10",
                                         "--multi-valued-fields",
                                         "3",
                                         "--gzip",
                                         "--seed",
                                         "4"};
  const test::ExitStatus status = test::wait_for(test::spawn(argv, dir.path + "/gen.log"), 120);
  ASSERT_TRUE(status.ok()) << test::read_file(dir.path + "/gen.log");
  const std::string file = dir.path + "/train.tsv.gz";
  const std::string cache = dir.path + "/cache";
  const auto old_reader = open_criteo_dataset(file, cache, false, {});
  const auto preset = open_schema_dataset(file, criteo_feature_schema(), cache, false, {});
  ASSERT_EQ(preset->size(), 3000u);
  EXPECT_EQ(preset->feature_dim(), kCriteoDense);
  EXPECT_EQ(preset->id_fields(), kCriteoCategorical);
  const Records a = read_all(*old_reader), b = read_all(*preset);
  EXPECT_GT(b.ids.size(), b.counts.size());  // the lists are there
  expect_same_bits(a, b);
  // The same file without its label column: the same features and IDs, no labels.
  std::string stripped;
  {
    std::istringstream lines(criteo_lines(200, 3));
    std::string line, labelled;
    while (std::getline(lines, line)) {
      labelled += line + "\n";
      stripped += line.substr(line.find('\t') + 1) + "\n";
    }
    write_text(dir.path + "/l.tsv", labelled);
    write_text(dir.path + "/u.tsv", stripped);
  }
  const auto with = open_criteo_dataset(dir.path + "/l.tsv", cache, false, {});
  const auto without = open_criteo_dataset(dir.path + "/u.tsv", cache, false, {});
  const auto without_preset =
      open_schema_dataset(dir.path + "/u.tsv", criteo_feature_schema(), cache, false, {});
  EXPECT_TRUE(with->labelled());
  EXPECT_FALSE(without->labelled());
  EXPECT_FALSE(without_preset->labelled());
  Records l = read_all(*with), u = read_all(*without);
  EXPECT_EQ(u.y, std::vector<int32_t>(200, 0));
  l.y = u.y;
  expect_same_bits(l, u);
  expect_same_bits(u, read_all(*without_preset));
}

constexpr char kCsvSchema[] = R"({
  "delimiter": "comma",
  "header": true,
  "columns": [
    {"name": "clicked", "type": "label"},
    {"name": "price", "type": "numeric", "transform": "log1p"},
    {"name": "age", "type": "numeric", "integer": true},
    {"name": "os", "type": "categorical", "ids": "string"},
    {"name": "site", "type": "categorical", "ids": "int"},
    {"name": "tags", "type": "categorical", "ids": "string", "separator": "|"}
  ]
})";

class SchemaData : public ::testing::Test {
 protected:
  void SetUp() override { write_text(schema_path_, kCsvSchema); }
  std::unique_ptr<Dataset> open(const std::string& name, const std::string& text, bool skip = false) {
    write_text(dir_.path + "/" + name, text);
    return open_schema_dataset(dir_.path + "/" + name, load_feature_schema(schema_path_), cache_, skip, {});
  }
  std::string open_error(const std::string& name, const std::string& text, bool skip = false) {
    return error_of([&] { open(name, text, skip); });
  }

  TempDir dir_{"schema-data"};
  std::string cache_ = dir_.path + "/cache";
  std::string schema_path_ = dir_.path + "/s.json";
};

TEST_F(SchemaData, ACsvOfStringIntAndMultiValuedCategoriesWithAHeader) {
  // The header's order is not the schema's, and it has a column the schema does not name.
  const std::string text =
      "note,os,clicked,tags,price,site,age\n"
      "x,android,1,sports|news|sports,3.5,17,40\n"
      "y,\"ios\",0,,0,-1,\n"
      "z,,1,news,-2,,7\r\n";
  const auto data = open("a.csv", text);
  ASSERT_EQ(data->size(), 3u);
  EXPECT_TRUE(data->labelled());
  EXPECT_EQ(data->feature_dim(), 2u);
  EXPECT_EQ(data->id_fields(), 3u);
  const Records r = read_all(*data);
  EXPECT_EQ(r.y, (std::vector<int32_t>{1, 0, 1}));
  const std::vector<float> x = {static_cast<float>(std::log1p(3.5)), 40.0f, 0.0f, 0.0f, 0.0f, 7.0f};
  EXPECT_EQ(r.x, x);
  const uint64_t sports = schema_string_id("sports"), news = schema_string_id("news");
  EXPECT_EQ(r.ids, (std::vector<uint64_t>{schema_string_id("android"), mix_id(17), sports, news, sports,
                                          schema_string_id("ios"), mix_id(UINT64_MAX), kCriteoMissingId,
                                          kCriteoMissingId, kCriteoMissingId, news}));
  EXPECT_EQ(r.counts, (std::vector<uint32_t>{1, 1, 3, 1, 1, 1, 1, 1, 1}));
  // The same rows gzip'd, and without the label column (the header lacks it): the same
  // features and IDs; no labels.
  write_gzip(dir_.path + "/a.csv.gz", text);
  const Records gz = read_all(
      *open_schema_dataset(dir_.path + "/a.csv.gz", load_feature_schema(schema_path_), cache_, false, {}));
  expect_same_bits(r, gz);
  const auto unlabelled = open("u.csv",
                               "os,tags,price,site,age\n"
                               "android,sports|news|sports,3.5,17,40\n"
                               "ios,,0,-1,\n"
                               ",news,-2,,7\n");
  EXPECT_FALSE(unlabelled->labelled());
  Records u = read_all(*unlabelled);
  EXPECT_EQ(u.y, (std::vector<int32_t>{0, 0, 0}));
  u.y = r.y;
  expect_same_bits(r, u);
}

TEST_F(SchemaData, BadLinesNameTheFileLineFieldAndValueAndTheFix) {
  const std::string header = "clicked,price,age,os,site,tags\n";
  const std::string good = "1,1,2,a,3,b|c\n";
  const std::string hint = skip_bad_lines_hint();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"2,1,2,a,3,b", "field 1 (clicked) \"2\" is not 0 or 1 (the label: 1 clicked, 0 not)"},
      {"1,x,2,a,3,b", "field 2 (price) \"x\" is not a number"},
      {"1,1e999,2,a,3,b", "field 2 (price) \"1e999\" is outside the float range"},
      {"1,nan,2,a,3,b", "field 2 (price) \"nan\" is not a finite number"},
      {"1,1,2.5,a,3,b", "field 3 (age) \"2.5\" is not an integer"},
      {"1,1,2,a,0x3,b", "field 5 (site) \"0x3\" is not an integer"},
      {"1,1,2,a,3,b||c", "field 6 (tags) \"b||c\": value 2 of 3 is empty (values are separated by one '|')"},
      {"1,1,2,a,3", "5 fields, but the header (line 1) has 6"},
  };
  for (const auto& [line, message] : cases) {
    const std::string path = dir_.path + "/bad.csv";
    EXPECT_EQ(open_error("bad.csv", header + good + line + "\n" + good), path + ":3: " + message + hint);
  }
  // --skip-bad-lines leaves them out.
  EXPECT_EQ(open("skip.csv", header + good + "2,1,2,a,3,b\n" + good, true)->size(), 2u);
  // A header without one of the schema's columns (but the label) is no header of this schema.
  const std::string path = dir_.path + "/h.csv";
  EXPECT_EQ(open_error("h.csv", "clicked,price,os,site,tags\n" + good),
            path + ":1: the header lacks the schema's column(s) \"age\" (--schema " + schema_path_ +
                "; the header's 5 fields, separated by commas: \"clicked\", \"price\", \"os\", \"site\", "
                "\"tags\")");
  EXPECT_EQ(open_error("e.csv", header),
            dir_.path + "/e.csv:2: no records (the file is empty but for its header)");
  // Without a header: the schema's columns, or all but the label; never both in one file.
  write_text(schema_path_,
             R"({"columns": [{"name": "y", "type": "label"}, {"name": "c", "type": "categorical"},
                                            {"name": "n", "type": "numeric"}]})");
  EXPECT_EQ(open_error("t.tsv", "1\ta\t2\nb\t3\n"),
            dir_.path +
                "/t.tsv:2: lacks the label column, but line 1 (the first record) has it (a file has labels "
                "on every line or on none)" +
                hint);
  EXPECT_EQ(open_error("t.tsv", "1\ta\t2\t4\n"),
            dir_.path + "/t.tsv:1: 4 fields, but a line of --schema " + schema_path_ +
                " has 3 separated by tabs, or 2 without the label column \"y\" (input to --predict)" + hint);
  EXPECT_FALSE(open("t.tsv", "a\t2\nb\t3\n")->labelled());
}

TEST_F(SchemaData, AFileWithoutLabelsIsForPredictOnly) {
  write_text(dir_.path + "/u.csv", "os,tags,price,site,age\nandroid,a|b,1,2,3\n");
  DataOptions o;
  o.cache_dir = cache_;
  o.schema = schema_path_;
  o.data_format = "schema";
  o.train_data = dir_.path + "/u.csv";
  o.test_data = dir_.path + "/u.csv";
  EXPECT_EQ(error_of([&] { open_training_data(o); }),
            "--train-data " + o.train_data +
                ": has no label column (the schema's label column is absent): such a "
                "file can be scored (--init-params DIR --predict " +
                o.train_data + " --predictions OUT.csv) but not trained on or evaluated");
  o.evaluate = true;
  EXPECT_CONTAINS(error_of([&] { open_test_data(o, 2); }),
                  "--test-data " + o.test_data + ": has no label column");
  o.predict = true;
  EXPECT_FALSE(open_test_data(o, 2)->labelled());
  // Criteo's 39 columns without --schema: the same rule.
  const std::string tsv = dir_.path + "/u.tsv";
  write_text(tsv, criteo_lines(3, 1, false));
  DataOptions c;
  c.cache_dir = cache_;
  c.train_data = tsv;
  c.test_data = tsv;
  EXPECT_EQ(error_of([&] { open_training_data(c); }),
            "--train-data " + tsv +
                ": has no label column (39 fields, Criteo's without the label): such a file can "
                "be scored (--init-params DIR --predict " +
                tsv + " --predictions OUT.csv) but not trained on or evaluated");
}

// A click depends on the string category, the tags and the price; rows r of `n` from `offset`.
std::string csv_rows(int n, int offset, bool labelled) {
  std::mt19937 rng(static_cast<uint32_t>(offset + 1));
  const char* oses[] = {"android", "ios", "windows", "linux", "other"};
  const char* tags[] = {"sports", "news", "music", "games", "cars", "food"};
  std::string text = labelled ? "clicked,price,age,os,site,tags\n" : "price,age,os,site,tags\n";
  for (int r = 0; r < n; ++r) {
    const int os = static_cast<int>(rng() % 5), site = static_cast<int>(rng() % 7);
    const int k = 1 + static_cast<int>(rng() % 3);
    double score = (os < 2 ? 1.5 : -1.0) + (site % 2 ? 0.5 : -0.5);
    std::string list;
    for (int j = 0; j < k; ++j) {
      const int t = static_cast<int>(rng() % 6);
      score += t < 2 ? 1.0 : -0.6;
      list += (j ? "|" : "") + std::string(tags[t]);
    }
    const double price = static_cast<double>(rng() % 1000) / 10;
    const int clicked = (score + (rng() % 100) / 100.0 - 0.5) > 0 ? 1 : 0;
    char number[32];
    std::snprintf(number, sizeof number, "%.1f", price);
    if (labelled) text += std::to_string(clicked) + ",";
    text += std::string(number) + "," + std::to_string(rng() % 4) + "," + oses[os] + "," +
            std::to_string(site) + "," + list + "\n";
  }
  return text;
}

std::string field_of(const std::string& log, const std::string& name) {
  std::smatch m;
  return std::regex_search(log, m, std::regex(name + "=([0-9.]+)")) ? m[1].str() : "none";
}

TEST(SchemaJob, ACsvTrainsThroughPsAndWorkersAndItsUnlabelledRowsArePredicted) {
  TempDir dir("schema-job");
  const std::string schema = dir.path + "/s.json";
  write_text(schema, kCsvSchema);
  write_text(dir.path + "/train.csv", csv_rows(600, 0, true));
  write_text(dir.path + "/test.csv", csv_rows(200, 5000, true));
  write_gzip(dir.path + "/score.csv.gz", csv_rows(200, 5000, false));  // test.csv's rows without labels
  const std::string params = dir.path + "/params";
  test::Job job;
  job.num_ps = 2;
  job.num_workers = 2;
  job.dir = dir.path + "/job";
  fs::create_directories(job.dir);
  job.args = {"--schema",
              schema,
              "--train-data",
              dir.path + "/train.csv",
              "--test-data",
              dir.path + "/test.csv",
              "--cache-dir",
              dir.path + "/cache",
              "--embedding-dim",
              "4",
              "--embedding-tables",
              "per-field",
              "--embedding-pool",
              "mean",
              "--model",
              "dense 16, relu, dense 1",
              "--loss",
              "bce",
              "--optimizer",
              "sgd",
              "--lr",
              "0.1",
              "--batch-size",
              "16",
              "--epochs",
              "4",
              "--seed",
              "3",
              "--timeout",
              "30",
              "--save-params",
              params};
  const test::JobResult result = test::run_job(job);
  ASSERT_TRUE(result.ok()) << result.logs;
  const std::string chief = test::read_file(job.dir + "/w0.log");
  const std::string auc = field_of(chief, "test_auc");
  ASSERT_NE(auc, "none") << chief;
  std::cout << "schema job: test_auc=" << auc << std::endl;
  EXPECT_GT(std::stod(auc), 0.75) << chief;  // the string categories and the tags were learnt
  // Per-field tables are named after the schema's categorical columns; model.json records the schema.
  for (const char* table : {"os", "site", "tags"})
    EXPECT_TRUE(fs::exists(params + "/embeddings/" + table + ".shard0-of-2")) << table;
  EXPECT_CONTAINS(test::read_file(params + "/model.json"),
                  "\"schema\": \"delimiter 44 header 1; clicked label;");

  const auto predict = [&](const std::vector<std::string>& more, std::string* log) {
    std::vector<std::string> argv = {PSTRAIN_WORKER_BIN, "--cache-dir", dir.path + "/cache", "--init-params",
                                     params};
    argv.insert(argv.end(), more.begin(), more.end());
    const test::ExitStatus status = test::wait_for(test::spawn(argv, dir.path + "/predict.log"), 60);
    *log = test::read_file(dir.path + "/predict.log");
    return status;
  };
  std::string log;
  ASSERT_TRUE(
      predict({"--schema", schema, "--predict", dir.path + "/test.csv", "--predictions", dir.path + "/l.csv"},
              &log)
          .ok())
      << log;
  EXPECT_CONTAINS(log, "auc " + auc);  // the chief's figure, from the labelled file
  ASSERT_TRUE(predict({"--schema", schema, "--predict", dir.path + "/score.csv.gz", "--predictions",
                       dir.path + "/u.csv"},
                      &log)
                  .ok())
      << log;
  EXPECT_CONTAINS(log, "predictions: 200 records x 1 p(click) written to " + dir.path +
                           "/u.csv (the input has no labels: no accuracy)");
  const std::string labelled = test::read_file(dir.path + "/l.csv"),
                    scored = test::read_file(dir.path + "/u.csv");
  EXPECT_EQ(std::count(scored.begin(), scored.end(), '\n'), 201);
  EXPECT_EQ(scored, labelled);  // the same rows, the same scores, to the last digit
  // Without the schema the model's IDs cannot be read: refused before the data is.
  const test::ExitStatus refused =
      predict({"--predict", dir.path + "/test.csv", "--predictions", dir.path + "/x.csv"}, &log);
  EXPECT_EQ(refused.code, 2) << log;
  EXPECT_CONTAINS(log,
                  "--init-params " + params + ": its tables' IDs were read by the schema \"delimiter 44");
  EXPECT_CONTAINS(log, "and no --schema is given: give --schema with the columns the model was trained on");
}

}  // namespace
}  // namespace pstrain
