// Tests of Criteo TSV data (docs/data.md, "Criteo (CTR) data"): the line parser, every kind of
// malformed input with its exact message, --skip-bad-lines, gzip, random access against a
// sequential parse, the categorical IDs, the flags, and whole jobs on tools/ctr_gen.py's data.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "shared/config/data_files.h"
#include "shared/config/options.h"
#include "shared/util/error.h"
#include "test_util/build_paths.h"
#include "test_util/files.h"
#include "test_util/errors.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"
#include "worker/data/criteo.h"
#include "worker/data/criteo_dataset.h"
#include "worker/data/ctr_cache.h"
#include "worker/data/csv_dataset.h"

namespace pstrain {
namespace {
namespace fs = std::filesystem;
using test::error_of;
using test::parse_worker_flags;
using test::read_file;
using test::usage_error_of;
using test::write_gzip;
using test::write_text;

// A line of 40 fields: `fields` replaces the first ones of a valid default line.
std::string line_of(const std::vector<std::string>& fields) {
  std::vector<std::string> all = {"1", "5", "-1", "", "0", "12", "", "3", "4", "", "7", "0", "1", "9"};
  for (size_t c = 0; c < kCriteoCategorical; ++c) all.push_back(c % 5 == 4 ? "" : "68fd1e64");
  for (size_t i = 0; i < fields.size(); ++i) all[i] = fields[i];
  std::string line;
  for (size_t i = 0; i < all.size(); ++i) line += (i > 0 ? "\t" : "") + all[i];
  return line;
}

// n random valid lines, deterministic in seed.
std::string random_lines(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string text;
  char hex[24];
  for (size_t r = 0; r < n; ++r) {
    text += std::to_string(rng() % 2);
    for (size_t j = 0; j < kCriteoDense; ++j) {
      text += '\t';
      if (rng() % 7 != 0) text += std::to_string(static_cast<int>(rng() % 1000) - 3);
    }
    for (size_t c = 0; c < kCriteoCategorical; ++c) {
      text += '\t';
      if (rng() % 9 == 0) continue;
      std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(rng()));
      text += hex;
    }
    text += '\n';
  }
  return text;
}

// "1,2,...,n" in hex: a field listing n IDs.
std::string ids_list(size_t n) {
  std::string list;
  char hex[24];
  for (size_t k = 1; k <= n; ++k) {
    std::snprintf(hex, sizeof hex, "%zx", k);
    list += (k > 1 ? "," : "") + std::string(hex);
  }
  return list;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t at = 0; at < text.size();) {
    const size_t nl = text.find('\n', at);
    lines.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return lines;
}

TEST(CriteoParse, GoodLinesWithEmptiesNegativesAndHexCases) {
  std::vector<std::string> fields = {"0", "", "-7", "0", "1", "9223372036854775807", "-9223372036854775808"};
  fields.resize(kCriteoFields);
  fields[14] = "68FD1e64";
  fields[15] = "0";
  fields[16] = "fffffffffffffffe";
  fields[17] = "";
  fields[39] = "A";
  CriteoRecord r;
  ASSERT_EQ(parse_criteo_line(line_of(fields), r), "");
  EXPECT_EQ(r.label, 0);
  EXPECT_EQ(r.dense[0], 0.0f);  // empty
  EXPECT_EQ(r.dense[1], 0.0f);  // negative: log(1 + max(-7, 0))
  EXPECT_EQ(r.dense[2], 0.0f);
  EXPECT_EQ(r.dense[3], static_cast<float>(std::log(2.0)));
  EXPECT_EQ(r.dense[4], static_cast<float>(std::log1p(9223372036854775807.0)));
  EXPECT_EQ(r.dense[5], 0.0f);
  EXPECT_EQ(r.ids[0], 0x68fd1e64u);
  EXPECT_EQ(r.ids[1], 0u);
  EXPECT_EQ(r.ids[2], 0xfffffffffffffffeull);
  EXPECT_EQ(r.ids[3], kCriteoMissingId);
  EXPECT_EQ(r.ids[25], 0xau);
  ASSERT_EQ(parse_criteo_line(line_of({"1", "100"}), r), "");
  EXPECT_EQ(r.label, 1);
  EXPECT_EQ(r.dense[0], static_cast<float>(std::log1p(100.0)));
  EXPECT_EQ(criteo_field_name(0), "label");
  EXPECT_EQ(criteo_field_name(13), "I13");
  EXPECT_EQ(criteo_field_name(14), "C1");
  EXPECT_EQ(criteo_field_name(39), "C26");
}

TEST(CriteoParse, FieldsListingSeveralIds) {
  std::vector<std::string> fields(kCriteoFields);
  fields[0] = "1";
  fields[14] = "68fd1e64,80e26c9b,FB936136";
  fields[15] = "a";
  fields[17] = "1,1";  // an ID twice in one field
  fields[39] = ids_list(kCriteoMaxIds);
  CriteoRecord r;
  ASSERT_EQ(parse_criteo_line(line_of(fields), r), "");
  std::vector<uint64_t> lists = {0x68fd1e64, 0x80e26c9b, 0xfb936136, 1, 1};
  for (uint64_t k = 1; k <= kCriteoMaxIds; ++k) lists.push_back(k);
  EXPECT_EQ(r.lists, lists);
  for (size_t c = 0; c < kCriteoCategorical; ++c) {
    const uint32_t want = c == 0 ? 3 : c == 3 ? 2 : c == 25 ? kCriteoMaxIds : 1;
    EXPECT_EQ(r.counts[c], want) << c;
  }
  EXPECT_EQ(r.ids[0], 0x68fd1e64u);  // a list's first ID
  EXPECT_EQ(r.ids[1], 0xau);
  EXPECT_EQ(r.ids[2], kCriteoMissingId);
  // The next line keeps nothing of this one's lists.
  ASSERT_EQ(parse_criteo_line(line_of({}), r), "");
  EXPECT_TRUE(r.lists.empty());
  EXPECT_TRUE(std::all_of(r.counts, r.counts + kCriteoCategorical, [](uint32_t n) { return n == 1; }));
}

// Criteo's 39 columns without the label (Kaggle's test.txt, production rows) are input to
// --predict: the same features and IDs as the labelled line, the label kCriteoNoLabel, and
// messages numbering the line's own fields.
TEST(CriteoParse, ALineWithoutTheLabelParsesForPrediction) {
  const std::string labelled = line_of({"1", "5", "", "", "", "", "", "", "", "", "", "", "", "", "68fd1e64,a"});
  const std::string unlabelled = labelled.substr(labelled.find('\t') + 1);
  CriteoRecord with, without;
  ASSERT_EQ(parse_criteo_line(labelled, with), "");
  ASSERT_EQ(parse_criteo_line(unlabelled, without), "");
  EXPECT_EQ(without.label, kCriteoNoLabel);
  EXPECT_EQ(std::memcmp(with.dense, without.dense, sizeof with.dense), 0);
  EXPECT_EQ(std::vector<uint64_t>(with.ids, with.ids + kCriteoCategorical),
            std::vector<uint64_t>(without.ids, without.ids + kCriteoCategorical));
  EXPECT_EQ(with.lists, without.lists);
  const std::string bad = line_of({"1", "1", "2", "3", "x1"});
  EXPECT_EQ(parse_criteo_line(bad.substr(2), without), "field 4 (I4) \"x1\" is not an integer");
  EXPECT_EQ(parse_criteo_line(bad, with), "field 5 (I4) \"x1\" is not an integer");
}

class CriteoData : public ::testing::Test {
 protected:
  std::string open_error(const std::string& path, bool skip = false) {
    return error_of([&] { open_criteo_dataset(path, cache_, skip, {}); });
  }
  // `text` written as DIR/<name>.tsv and DIR/<name>.tsv.gz, each opened: {plain, gzip}.
  std::pair<std::unique_ptr<Dataset>, std::unique_ptr<Dataset>> open_plain_and_gzip(const std::string& name,
                                                                                    const std::string& text) {
    write_text(dir_.path + "/" + name + ".tsv", text);
    write_gzip(dir_.path + "/" + name + ".tsv.gz", text);
    return {open_criteo_dataset(dir_.path + "/" + name + ".tsv", cache_, false, {}),
            open_criteo_dataset(dir_.path + "/" + name + ".tsv.gz", cache_, false, {})};
  }
  size_t cache_files() const {
    if (!fs::exists(cache_)) return 0;
    return static_cast<size_t>(std::distance(fs::directory_iterator(cache_), fs::directory_iterator()));
  }

  TempDir dir_{"criteo-data"};
  std::string cache_ = dir_.path + "/cache";
};

TEST_F(CriteoData, EachMalformedLineIsAnErrorNamingFileAndLine) {
  std::string long_line = line_of({"1"});
  long_line.insert(5, kCriteoMaxLine, '7');
  std::vector<std::string> fields39 = split_lines(line_of({}) + "\n");
  const std::string good = line_of({}) + "\n" + line_of({"0"}) + "\n";
  const std::string nul_field = std::string("68fd") + '\0' + "1e64";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {line_of({}).substr(line_of({}).find('\t') + 1),  // 39 fields: no label, after lines with one
       "lacks the label column, but line 1 (the first record) has it (a file has labels on every line or on none)"},
      {line_of({}).substr(0, line_of({}).rfind('\t')).substr(line_of({}).find('\t') + 1),
       "38 fields, but a Criteo line has 40 (label, I1-I13, C1-C26, separated by tabs), or 39 without the label (input to --predict)"},
      {line_of({}) + "\tab", "41 fields, but a Criteo line has 40 (label, I1-I13, C1-C26, separated by tabs), or 39 without the label (input to --predict)"},
      {"", "1 field, but a Criteo line has 40 (label, I1-I13, C1-C26, separated by tabs), or 39 without the label (input to --predict)"},
      {"1,2,3", "1 field, but a Criteo line has 40 (label, I1-I13, C1-C26, separated by tabs), or 39 without the label (input to --predict)"},
      {line_of({"2"}), "field 1 (label) \"2\" is not 0 or 1"},
      {line_of({""}), "field 1 (label) \"\" is not 0 or 1"},
      {line_of({"1", "2", "3", "4", "x1"}), "field 5 (I4) \"x1\" is not an integer"},
      {line_of({"1", "1.5"}), "field 2 (I1) \"1.5\" is not an integer"},
      {line_of({"1", "+3"}), "field 2 (I1) \"+3\" is not an integer"},
      {line_of({"1", "-"}), "field 2 (I1) \"-\" is not an integer"},
      {line_of({"1", "99999999999999999999"}), "field 2 (I1) \"99999999999999999999\" is outside the int64 range"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", "68fd1e6g"}),
       "field 15 (C1) \"68fd1e6g\" is not 1 to 16 hex digits"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", "0x1e64"}),
       "field 15 (C1) \"0x1e64\" is not 1 to 16 hex digits"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", "12345678901234567"}),
       "field 15 (C1) \"12345678901234567\" is not 1 to 16 hex digits"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", "ffffffffffffffff"}),
       "field 15 (C1) \"ffffffffffffffff\" is the ID reserved for an empty field"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", nul_field}),
       "field 15 (C1) \"68fd\\x001e64\" is not 1 to 16 hex digits"},
      {long_line, "line longer than 524288 bytes"},
      // Fields listing several IDs.
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", "68fd1e64,,80e26c9b"}),
       "field 15 (C1) \"68fd1e64,,80e26c9b\": ID 2 of 3 is empty (IDs are separated by one ',')"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", ",80e26c9b"}),
       "field 15 (C1) \",80e26c9b\": ID 1 of 2 is empty (IDs are separated by one ',')"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "80e26c9b,"}),
       "field 16 (C2) \"80e26c9b,\": ID 2 of 2 is empty (IDs are separated by one ',')"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", ","}),
       "field 15 (C1) \",\": ID 1 of 2 is empty (IDs are separated by one ',')"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", "68fd1e64,80e26c9g"}),
       "field 15 (C1) \"68fd1e64,80e26c9g\": ID 2 of 2 \"80e26c9g\" is not 1 to 16 hex digits"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", "a,12345678901234567,b"}),
       "field 15 (C1) \"a,12345678901234567,b\": ID 2 of 3 \"12345678901234567\" is not 1 to 16 hex digits"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", "a, b"}),
       "field 15 (C1) \"a, b\": ID 2 of 2 \" b\" is not 1 to 16 hex digits"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", "1,ffffffffffffffff"}),
       "field 15 (C1) \"1,ffffffffffffffff\": ID 2 of 2 is the ID reserved for an empty field"},
      {line_of({"1", "", "", "", "", "", "", "", "", "", "", "", "", "", ids_list(1025)}),
       "field 15 (C1) \"" + ids_list(1025).substr(0, 32) + "...\" lists 1025 IDs, more than 1024 (the most one field may hold)"},
  };
  for (const auto& [line, message] : cases) {
    const std::string path = dir_.path + "/t.tsv";
    write_text(path, good + line + "\n" + line_of({}) + "\n");
    EXPECT_EQ(open_error(path), path + ":3: " + message + skip_bad_lines_hint());
    EXPECT_EQ(cache_files(), 0u) << message;
  }
  const std::string empty = dir_.path + "/empty.tsv";
  write_text(empty, "");
  EXPECT_EQ(open_error(empty), empty + ":1: no records (the file is empty)");
  EXPECT_EQ(open_error(empty, true), empty + ":1: no records (the file is empty)");
  const std::string gz = dir_.path + "/cut.tsv.gz";
  write_gzip(gz, random_lines(3000, 1));
  fs::resize_file(gz, fs::file_size(gz) / 2);
  const std::string truncated = open_error(gz, true);
  EXPECT_EQ(truncated.rfind(gz + ":", 0), 0u) << truncated;
  EXPECT_CONTAINS(truncated, ": truncated gzip data");
  EXPECT_EQ(std::count(truncated.begin(), truncated.end(), ':'), 2) << truncated;  // file:line: ...
  EXPECT_EQ(open_error(dir_.path + "/missing.tsv"), dir_.path + "/missing.tsv: cannot open: No such file or directory");
  EXPECT_EQ(cache_files(), 0u);
}

TEST_F(CriteoData, SkipBadLinesLeavesThemOutAndCountsThem) {
  const std::string path = dir_.path + "/mixed.tsv";
  write_text(path, line_of({"1", "3"}) + "\n" + line_of({"2"}) + "\n" + line_of({"0", "8"}) + "\n\n" +
                       line_of({"1", "x"}) + "\n" + line_of({"0", "1"}) + "\r\n");
  const auto data = open_criteo_dataset(path, cache_, true, {});
  ASSERT_EQ(data->size(), 3u);
  std::vector<size_t> all = {0, 1, 2};
  std::vector<float> x(3 * kCriteoDense);
  std::vector<int32_t> y(3);
  data->read(all.data(), 3, x.data(), y.data());
  EXPECT_EQ(y, (std::vector<int32_t>{1, 0, 0}));
  EXPECT_EQ(x[0], criteo_dense_value(3));
  EXPECT_EQ(x[kCriteoDense], criteo_dense_value(8));
  EXPECT_EQ(x[2 * kCriteoDense], criteo_dense_value(1));
  // The cache the skipping run wrote: without --skip-bad-lines its first bad line is the error.
  EXPECT_EQ(open_error(path), path + ":2: field 1 (label) \"2\" is not 0 or 1" + skip_bad_lines_hint());
  fs::remove_all(cache_);
  EXPECT_EQ(open_error(path), path + ":2: field 1 (label) \"2\" is not 0 or 1" + skip_bad_lines_hint());
  // A cache written without bad lines serves both.
  const std::string clean = dir_.path + "/clean.tsv";
  write_text(clean, random_lines(10, 4));
  EXPECT_EQ(open_criteo_dataset(clean, cache_, false, {})->size(), 10u);
  EXPECT_EQ(open_criteo_dataset(clean, cache_, true, {})->size(), 10u);
  const std::string bad = dir_.path + "/bad.tsv";
  write_text(bad, "1\n2\n");
  EXPECT_EQ(open_error(bad, true),
            bad + ": no records: all 2 lines are bad (skipped by --skip-bad-lines; the first: " + bad +
                ":1: 1 field, but a Criteo line has 40 (label, I1-I13, C1-C26, separated by tabs), or 39 without the label (input to --predict))");
}

// Every record of `data`: features, labels and IDs, read in one sequential call.
struct Records {
  std::vector<float> x;
  std::vector<int32_t> y;
  std::vector<uint64_t> ids;
  std::vector<uint32_t> counts;
  bool operator==(const Records& o) const { return x == o.x && y == o.y && ids == o.ids && counts == o.counts; }
};

Records read_all(const Dataset& data, const std::vector<size_t>& order) {
  Records r;
  r.x.resize(order.size() * kCriteoDense);
  r.y.resize(order.size());
  data.read(order.data(), order.size(), r.x.data(), r.y.data());
  IdLists ids;
  data.read_ids(order.data(), order.size(), &ids);
  r.ids = ids.ids;
  r.counts = ids.counts;
  return r;
}

// What a parse of `text` gives, record by record.
Records parsed(const std::string& text) {
  Records expected;
  for (const std::string& line : split_lines(text)) {
    CriteoRecord r;
    EXPECT_EQ(parse_criteo_line(line, r), "");
    expected.x.insert(expected.x.end(), r.dense, r.dense + kCriteoDense);
    expected.y.push_back(r.label);
    size_t at = 0;
    for (size_t c = 0; c < kCriteoCategorical; ++c) {
      expected.counts.push_back(r.counts[c]);
      if (r.counts[c] == 1) {
        expected.ids.push_back(r.ids[c]);
      } else {
        expected.ids.insert(expected.ids.end(), r.lists.begin() + static_cast<long>(at),
                            r.lists.begin() + static_cast<long>(at + r.counts[c]));
        at += r.counts[c];
      }
    }
  }
  return expected;
}

TEST_F(CriteoData, RandomAccessReadsEqualASequentialParseAndGzipEqualsPlain) {
  const size_t n = 1000;
  const std::string text = random_lines(n, 7);
  const auto files = open_plain_and_gzip("d", text);
  const Dataset *plain = files.first.get(), *gz = files.second.get();
  ASSERT_EQ(plain->size(), n);
  EXPECT_EQ(plain->feature_dim(), kCriteoDense);
  EXPECT_EQ(plain->sample_shape(), std::vector<size_t>{kCriteoDense});
  EXPECT_EQ(plain->num_classes(), 2);
  EXPECT_EQ(plain->id_fields(), kCriteoCategorical);

  const Records expected = parsed(text);
  ASSERT_EQ(expected.counts, std::vector<uint32_t>(n * kCriteoCategorical, 1));  // one ID a field
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  EXPECT_TRUE(read_all(*plain, order) == expected);  // runs longer than one 64 KiB read
  EXPECT_TRUE(read_all(*gz, order) == expected);

  // A shuffled order, and two workers' shards of it, read record by record.
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  const Records shuffled = read_all(*plain, order);
  for (size_t i = 0; i < n; i += 97) {
    const size_t rec = order[i];
    EXPECT_EQ(shuffled.y[i], expected.y[rec]);
    EXPECT_TRUE(std::equal(shuffled.x.begin() + i * kCriteoDense, shuffled.x.begin() + (i + 1) * kCriteoDense,
                           expected.x.begin() + rec * kCriteoDense));
    EXPECT_TRUE(std::equal(shuffled.ids.begin() + i * kCriteoCategorical,
                           shuffled.ids.begin() + (i + 1) * kCriteoCategorical,
                           expected.ids.begin() + rec * kCriteoCategorical));
  }
  for (size_t shard = 0; shard < 2; ++shard) {
    std::vector<size_t> mine;
    for (size_t i = shard; i < n; i += 2) mine.push_back(order[i]);
    const Records part = read_all(*gz, mine);
    for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(part.y[i], expected.y[mine[i]]);
  }
  const size_t out_of_range = n;
  float x[kCriteoDense];
  int32_t y = 0;
  EXPECT_EQ(error_of([&] { plain->read(&out_of_range, 1, x, &y); }),
            dir_.path + "/d.tsv: record 1000 out of range (1000 records)");
}

// n random valid lines whose fields often list 2..5 IDs (from a small range: repeats within a
// field), deterministic in seed.
std::string random_list_lines(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string text;
  for (size_t r = 0; r < n; ++r) {
    text += std::to_string(rng() % 2);
    for (size_t j = 0; j < kCriteoDense; ++j) text += "\t" + std::to_string(rng() % 100);
    for (size_t c = 0; c < kCriteoCategorical; ++c) {
      text += '\t';
      if (rng() % 9 == 0) continue;
      const size_t ids = rng() % 3 == 0 ? 2 + rng() % 4 : 1;
      for (size_t k = 0; k < ids; ++k) {
        char hex[24];
        std::snprintf(hex, sizeof hex, "%x", static_cast<unsigned>(rng() % 50));
        text += (k > 0 ? "," : "") + std::string(hex);
      }
    }
    text += '\n';
  }
  return text;
}

TEST_F(CriteoData, FieldsListingSeveralIdsReadBackAsParsedInAnyOrder) {
  const size_t n = 700;
  const std::string text = random_list_lines(n, 17);
  const auto files = open_plain_and_gzip("l", text);
  const Dataset *plain = files.first.get(), *gz = files.second.get();
  ASSERT_EQ(plain->size(), n);
  EXPECT_EQ(plain->id_fields(), kCriteoCategorical);
  const Records expected = parsed(text);
  ASSERT_GT(expected.ids.size(), expected.counts.size() + n);  // lists, and many
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  EXPECT_TRUE(read_all(*plain, order) == expected);  // runs of records
  EXPECT_TRUE(read_all(*gz, order) == expected);
  // Record by record in a shuffled order: each record's fields as parsed.
  std::vector<size_t> first_id(n + 1, 0);
  for (size_t r = 0; r < n; ++r) {
    first_id[r + 1] = first_id[r];
    for (size_t c = 0; c < kCriteoCategorical; ++c) first_id[r + 1] += expected.counts[r * kCriteoCategorical + c];
  }
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  const Records shuffled = read_all(*plain, order);
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t rec = order[i], ids = first_id[rec + 1] - first_id[rec];
    ASSERT_TRUE(std::equal(shuffled.counts.begin() + static_cast<long>(i * kCriteoCategorical),
                           shuffled.counts.begin() + static_cast<long>((i + 1) * kCriteoCategorical),
                           expected.counts.begin() + static_cast<long>(rec * kCriteoCategorical)))
        << rec;
    ASSERT_LE(at + ids, shuffled.ids.size());
    ASSERT_TRUE(std::equal(shuffled.ids.begin() + static_cast<long>(at), shuffled.ids.begin() + static_cast<long>(at + ids),
                           expected.ids.begin() + static_cast<long>(first_id[rec])))
        << rec;
    EXPECT_EQ(shuffled.y[i], expected.y[rec]);
    at += ids;
  }
  EXPECT_EQ(at, shuffled.ids.size());
  // A file of one ID per field has no lists: its cache is the records alone.
  write_text(dir_.path + "/one.tsv", random_lines(50, 3));
  open_criteo_dataset(dir_.path + "/one.tsv", cache_ + "/one", false, {});
  ASSERT_EQ(std::distance(fs::directory_iterator(cache_ + "/one"), fs::directory_iterator()), 1);
  EXPECT_EQ(fs::file_size(fs::directory_iterator(cache_ + "/one")->path()), 56u + 50u * 268u);
}

// The trainer's one-pass read (read_with_ids: one pread per record for both) gives exactly what
// read() and read_ids() give apart, for one ID per field and for lists, in runs and shuffled.
TEST_F(CriteoData, ReadWithIdsEqualsReadThenReadIds) {
  const size_t n = 300;
  const std::vector<std::pair<std::string, std::string>> kinds = {{"one", random_lines(n, 9)},
                                                                  {"lists", random_list_lines(n, 11)}};
  for (const auto& [name, text] : kinds) {
    const auto files = open_plain_and_gzip(name, text);
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    for (int shuffled = 0; shuffled < 2; ++shuffled) {
      if (shuffled == 1) std::shuffle(order.begin(), order.end(), std::mt19937(13));
      for (const Dataset* data : {files.first.get(), files.second.get()}) {
        Records both;
        both.x.assign(n * kCriteoDense, -1.0f);
        both.y.assign(n, -1);
        IdLists ids;
        ids.ids.assign(3, 7);  // replaced, not appended to
        data->read_with_ids(order.data(), n, both.x.data(), both.y.data(), &ids);
        both.ids = ids.ids;
        both.counts = ids.counts;
        EXPECT_TRUE(both == read_all(*data, order)) << name << ", shuffled " << shuffled;
      }
    }
  }
  const auto files = open_plain_and_gzip("range", random_lines(10, 2));
  const size_t out_of_range = 10;
  float x[kCriteoDense];
  int32_t y = 0;
  IdLists ids;
  EXPECT_EQ(error_of([&] { files.first->read_with_ids(&out_of_range, 1, x, &y, &ids); }),
            dir_.path + "/range.tsv: record 10 out of range (10 records)");
}

// Workers of one host parse the same file into one cache directory at once (each writes its own
// copy, the last rename wins). A writer's scratch file for the lists must not collide with the
// one a racing writer has open: here the name that writer used is taken, and this parse still
// succeeds and reads back what the first one did (CI once saw "(being written).lists: cannot
// create: File exists" end one worker of three).
TEST_F(CriteoData, WritersRacingOnACacheOfListsEachHaveTheirOwnScratchFile) {
  const std::string path = dir_.path + "/race.tsv";
  write_text(path, random_list_lines(60, 5));
  const std::unique_ptr<Dataset> first = open_criteo_dataset(path, cache_ + "/first", false, {});
  ASSERT_EQ(std::distance(fs::directory_iterator(cache_ + "/first"), fs::directory_iterator()), 1);
  const std::string name = fs::directory_iterator(cache_ + "/first")->path().filename().string();
  fs::create_directories(cache_ + "/second");
  const std::string taken = cache_ + "/second/" + name + " (being written).lists";
  write_text(taken, "another writer's lists");
  std::unique_ptr<Dataset> second;
  ASSERT_NO_THROW(second = open_criteo_dataset(path, cache_ + "/second", false, {}));
  std::vector<size_t> order(first->size());
  std::iota(order.begin(), order.end(), 0);
  EXPECT_TRUE(read_all(*second, order) == read_all(*first, order));
  EXPECT_TRUE(fs::exists(cache_ + "/second/" + name));
  EXPECT_EQ(read_file(taken), "another writer's lists");  // the other writer's file is untouched
  EXPECT_EQ(std::distance(fs::directory_iterator(cache_ + "/second"), fs::directory_iterator()), 2);
}

// A cache file of the format before lists (PSCTR01: 264-byte records) is not read as this one: the
// file is parsed anew, whatever the old cache holds.
TEST_F(CriteoData, ACacheOfTheFormerFormatIsParsedAnew) {
  const std::string path = dir_.path + "/old.tsv";
  const std::string text = random_list_lines(30, 9);
  write_text(path, text);
  open_criteo_dataset(path, cache_, false, {});
  ASSERT_EQ(cache_files(), 1u);
  const std::string cache = fs::directory_iterator(cache_)->path().string();
  // What the former reader wrote for 30 lines, every byte of the records 0x11.
  std::string old("PSCTR01\n", 8);
  for (const uint64_t v : {uint64_t{48}, uint64_t{30}, uint64_t{30}, uint64_t{0}, uint64_t{0}})
    old.append(reinterpret_cast<const char*>(&v), 8);
  old.append(30 * 264, '\x11');
  write_text(cache, old);
  const auto data = open_criteo_dataset(path, cache_, false, {});
  std::vector<size_t> order(30);
  std::iota(order.begin(), order.end(), 0);
  EXPECT_TRUE(read_all(*data, order) == parsed(text));
  std::ifstream in(cache, std::ios::binary);
  std::string magic(8, '\0');
  in.read(&magic[0], 8);
  EXPECT_EQ(magic, std::string("PSCTR02\n", 8));
  EXPECT_EQ(cache_files(), 1u);
}

// Reads every record in batches of 64, as the trainer does: features, labels and IDs.
void read_one_epoch(const Dataset& data) {
  std::vector<size_t> batch(64);
  std::vector<float> x(batch.size() * kCriteoDense);
  std::vector<int32_t> y(batch.size());
  IdLists ids;
  for (size_t first = 0; first + batch.size() <= data.size(); first += batch.size()) {
    std::iota(batch.begin(), batch.end(), first);
    data.read(batch.data(), batch.size(), x.data(), y.data());
    data.read_ids(batch.data(), batch.size(), &ids);
  }
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

TEST_F(CriteoData, MemoryDoesNotGrowWithTheFile) {
  // AddressSanitizer keeps freed memory in its quarantine (256 MiB): peak RSS then grows with
  // every allocation made, freed or not. The main (unsanitised) stage checks this.
  if (kAddressSanitizer) GTEST_SKIP() << "AddressSanitizer's quarantine: peak RSS measures nothing here";
  constexpr long kSlackKib = 2048;
  constexpr size_t kControlBytes = 8 << 20;
  for (int times : {1, 10}) {  // in pieces: freed heap pages the children inherit would hide growth
    gzFile f = gzopen((dir_.path + "/m" + std::to_string(times) + ".tsv.gz").c_str(), "wb1");
    ASSERT_NE(f, nullptr);
    for (int piece = 0; piece < 15 * times; ++piece) {
      const std::string text = random_lines(1000, static_cast<uint32_t>(piece));
      gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    }
    gzclose(f);
  }
  const auto open = [&](int times) {
    return open_criteo_dataset(dir_.path + "/m" + std::to_string(times) + ".tsv.gz", cache_, false, {});
  };
  const long base = test::child_peak_rss_kib([&] { read_one_epoch(*open(1)); });
  const long grown = test::child_peak_rss_kib([&] { read_one_epoch(*open(10)); });  // 150k lines, 40 MB cached
  const long control = test::child_peak_rss_kib([&] {
    std::vector<char> held(kControlBytes, 1);
    read_one_epoch(*open(1));
    volatile char sink = held[held.size() / 2];
    (void)sink;
  });
  std::printf("Criteo peak RSS: 1x %ld KiB, 10x %ld KiB, 1x + 8 MiB held %ld KiB\n", base, grown, control);
  if (control <= base + kSlackKib) GTEST_SKIP() << "peak RSS here does not resolve 8 MiB";
  EXPECT_LE(grown, base + kSlackKib) << "memory grows with the file";
}

TEST_F(CriteoData, OtherFormatsHaveNoIds) {
  write_text(dir_.path + "/t.csv", "a,label\n1,0\n2,1\n");
  const auto csv = open_csv_dataset(dir_.path + "/t.csv", "", cache_, {});
  EXPECT_EQ(csv->id_fields(), 0u);
  const size_t rec = 0;
  IdLists ids;
  EXPECT_EQ(error_of([&] { csv->read_ids(&rec, 1, &ids); }),
            "this data has no categorical IDs (only Criteo data has them: docs/data.md)");
}

TEST(CriteoFlags, ExtensionsAndDataFormat) {
  EXPECT_EQ(parse_data_files("d/day_0.tsv", "--train-data").format, DataKind::kCriteo);
  EXPECT_EQ(parse_data_files("d/Train.TXT.gz", "--train-data").format, DataKind::kCriteo);
  const DataFiles forced = parse_data_files("d/day_0", "--train-data", "criteo");
  EXPECT_EQ(forced.format, DataKind::kCriteo);
  EXPECT_EQ(forced.features, "d/day_0");
  EXPECT_EQ(parse_data_files("x.npy,y.npy", "--train-data").format, DataKind::kNpy);  // unchanged
  EXPECT_EQ(parse_data_files("i.txt,l.txt", "--train-data").format, DataKind::kIdx);  // a pair stays IDX
  bool usage = false;
  EXPECT_EQ(error_of([&] { parse_data_files("a,b", "--test-data", "criteo"); }, &usage),
            "--test-data 'a,b': --data-format criteo reads one file (file names may not contain commas)");
  EXPECT_TRUE(usage);
  EXPECT_TRUE(parse_worker_flags({"--train-data", "a.tsv", "--test-data", "b.tsv.gz", "--skip-bad-lines"}));
  EXPECT_TRUE(parse_worker_flags({"--train-data", "a.dat", "--test-data", "b.dat", "--data-format", "criteo"}));
  EXPECT_EQ(usage_error_of({"--train-data", "a.csv", "--test-data", "b.csv", "--skip-bad-lines"}),
            "--skip-bad-lines applies to Criteo data (--train-data / --test-data FILE.tsv, or --data-format criteo) and to --schema's");
  EXPECT_EQ(usage_error_of({"--train-data", "a.tsv", "--test-data", "b.tsv", "--data-format", "tsv"}),
            "--data-format: 'tsv' is not one of auto, criteo");
  EXPECT_EQ(usage_error_of({"--data-format", "criteo"}),
            "--data-format criteo applies to --train-data / --test-data, and neither is given");
}

// tools/ctr_gen.py's data, trained on by a real job; and bad files through a real worker.
class CriteoJob : public ::testing::Test {
 protected:
  void generate(const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {PSTRAIN_PYTHON, std::string(PSTRAIN_SOURCE_DIR) + "/tools/ctr_gen.py",
                                     "--out-dir", dir_.path};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const std::string log = dir_.path + "/gen.log";
    const test::ExitStatus status = test::wait_for(test::spawn(argv, log), 120);
    ASSERT_TRUE(status.ok()) << test::read_file(log);
    EXPECT_CONTAINS(test::read_file(log), "ceiling_auc=");
  }

  TempDir dir_{"criteo-job"};
};

TEST_F(CriteoJob, TrainsOnGeneratedDataAndSkipsOrRejectsABadLine) {
  generate({"--train-lines", "3000", "--test-lines", "500", "--gzip", "--seed", "5"});
  const std::string train = dir_.path + "/train.tsv.gz";
  const std::string bad = dir_.path + "/bad.tsv";
  write_text(bad, line_of({}) + "\n" + line_of({"1", "2", "3", "4", "x1"}) + "\n" + line_of({"0"}) + "\n");

  test::Job job;
  job.num_workers = 2;
  job.dir = dir_.path;
  // The generated test file is not used: the test set is `bad`, whose bad line is skipped.
  job.args = {"--train-data", train,  "--test-data", bad,    "--skip-bad-lines", "--cache-dir", dir_.path + "/cache",
              "--hidden",     "16",   "--batch-size", "32",  "--epochs",         "2",           "--optimizer",
              "adam",         "--lr", "0.01",         "--seed", "3",             "--timeout",   "30",
              "--log-every",  "1000"};
  const test::JobResult result = test::run_job(job);
  EXPECT_TRUE(result.ok()) << result.logs;
  EXPECT_CONTAINS(result.logs, "test_accuracy=");
  // No --embedding-dim: the fields are unused, and every worker says so and how to use them.
  EXPECT_CONTAINS(result.logs, "W w1: the data's 26 categorical fields are not used: the model sees its 13 numeric "
                               "features only (--embedding-dim D");
  EXPECT_CONTAINS(result.logs, bad + ": skipped 1 of 3 lines (--skip-bad-lines); the first: " + bad +
                                   ":2: field 5 (I4) \"x1\" is not an integer");

  // The same bad file without --skip-bad-lines: a lone worker exits 1 at open with the message.
  const std::vector<std::string> argv = {PSTRAIN_WORKER_BIN, "--ps-hosts", "127.0.0.1:1", "--timeout", "1",
                                         "--cache-dir", dir_.path + "/cache2", "--train-data", train,
                                         "--test-data", bad};
  const std::string log = dir_.path + "/lone.log";
  const test::ExitStatus status = test::wait_for(test::spawn(argv, log), 60);
  const std::string text = test::read_file(log);
  EXPECT_EQ(status.code, 1) << text;
  EXPECT_CONTAINS(text, "E pstrain-worker: " + bad + ":2: field 5 (I4) \"x1\" is not an integer");
  for (const char* crash : {"terminate called", "Aborted", "check failed", "Segmentation"}) {
    EXPECT_EQ(text.find(crash), std::string::npos) << crash << " in:\n" << text;
  }
}

}  // namespace
}  // namespace pstrain
