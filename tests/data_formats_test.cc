// Tests of the data formats of --train-data / --test-data (docs/data.md): the .npy and CSV
// readers (shapes, dtypes, scale, header detection, label column, every bad-input case), the flag
// grammar, classes and test-set checks, bounded memory, and whole jobs on .npy and CSV data that
// learn a separable problem and end with the parameters of the same data given as IDX.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <thread>
#include <vector>

#include "shared/util/error.h"
#include "shared/config/options.h"
#include "shared/util/splitmix.h"
#include "test_util/build_paths.h"
#include "test_util/files.h"
#include "test_util/errors.h"
#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"
#include "worker/data/csv_dataset.h"
#include "worker/data/dataset.h"
#include "worker/data/npy_dataset.h"
#include "worker/data/open.h"
#include "worker/data/prefetch.h"
#include "worker/data/sampler.h"

namespace pstrain {
namespace {
using test::child_peak_rss_kib;
using test::write_text;

namespace fs = std::filesystem;
using test::error_of;
using test::parse_worker_flags;
using test::usage_error_of;

// ---- writing test files ----

std::string shape_literal(const std::vector<uint64_t>& shape) {
  std::string text = "(";
  for (size_t d = 0; d < shape.size(); ++d) text += (d > 0 ? ", " : "") + std::to_string(shape[d]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

// A .npy file as NumPy writes it: `dict` is the header dictionary, padded with spaces and a
// newline so the data starts at a multiple of 64 bytes; version 1 (uint16 length) or 2/3 (uint32).
void write_npy_raw(const std::string& path, const std::string& dict, const void* data, size_t bytes,
                   int version = 1) {
  const size_t len_bytes = version == 1 ? 2 : 4;
  std::string header = dict;
  const size_t unpadded = 8 + len_bytes + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write("\x93NUMPY", 6);
  out.put(static_cast<char>(version));
  out.put('\0');
  for (size_t i = 0; i < len_bytes; ++i) out.put(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  out << header;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  ASSERT_TRUE(out.good()) << path;
}

std::string npy_dict(const std::string& descr, const std::vector<uint64_t>& shape,
                     const char* fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape_literal(shape) +
         ", }";
}

template <typename T>
void write_npy_array(const std::string& path, const std::string& descr, const std::vector<uint64_t>& shape,
                     const std::vector<T>& values, int version = 1) {
  write_npy_raw(path, npy_dict(descr, shape), values.data(), values.size() * sizeof(T), version);
}

void gzip_file(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gzFile out = gzopen(to.c_str(), "wb");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(out), Z_OK);
}

struct Records {
  std::vector<float> x;
  std::vector<int32_t> y;
};

Records read_all(const Dataset& data) {
  Records r;
  std::vector<size_t> records(data.size());
  std::iota(records.begin(), records.end(), size_t{0});
  r.x.resize(data.size() * data.feature_dim());
  r.y.resize(data.size());
  data.read(records.data(), records.size(), r.x.data(), r.y.data());
  return r;
}

// ---- .npy ----

class NpyData : public ::testing::Test {
 protected:
  std::unique_ptr<Dataset> open(const LabelRange& range = {}, double scale = 0) {
    return open_npy_dataset(x_, y_, dir_.path + "/cache", scale, range);
  }
  std::string open_error(const LabelRange& range = {}) {
    return error_of([&] { open(range); });
  }
  // Features 0.5 * i (float32) of `shape` and labels i % 3 (int64).
  void write_default(const std::vector<uint64_t>& shape = {6, 4}) {
    const uint64_t items =
        std::accumulate(shape.begin(), shape.end(), uint64_t{1}, std::multiplies<uint64_t>());
    std::vector<float> x(items);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i);
    write_npy_array(x_, "<f4", shape, x);
    std::vector<int64_t> y(shape[0]);
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int64_t>(i % 3);
    write_npy_array(y_, "<i8", {shape[0]}, y);
  }

  TempDir dir_{"npy-data"};
  std::string x_ = dir_.path + "/features.npy", y_ = dir_.path + "/labels.npy";
};

TEST_F(NpyData, ReadsFloat32FeaturesOfEveryShape) {
  const std::vector<std::pair<std::vector<uint64_t>, std::vector<size_t>>> cases = {
      {{6, 4}, {4}}, {{6, 2, 3}, {1, 2, 3}}, {{6, 2, 1, 3}, {2, 1, 3}}, {{6}, {1}}};
  for (const auto& [shape, sample] : cases) {
    write_default(shape);
    const auto data = open();
    ASSERT_EQ(data->size(), 6u);
    EXPECT_EQ(data->sample_shape(), sample) << shape_literal(shape);
    const size_t dim = std::accumulate(sample.begin(), sample.end(), size_t{1}, std::multiplies<size_t>());
    EXPECT_EQ(data->feature_dim(), dim);
    EXPECT_EQ(data->num_classes(), 3);  // the largest label + 1
    const Records r = read_all(*data);
    for (size_t i = 0; i < r.x.size(); ++i) ASSERT_EQ(r.x[i], 0.5f * static_cast<float>(i)) << i;
    for (size_t i = 0; i < r.y.size(); ++i) EXPECT_EQ(r.y[i], static_cast<int32_t>(i % 3));
  }
}

TEST_F(NpyData, ScalesUint8Features) {
  std::vector<uint8_t> x(4 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i);
  write_npy_array(x_, "|u1", {4, 8, 8}, x);
  write_npy_array(y_, "|u1", {4}, std::vector<uint8_t>{0, 1, 0, 1});
  for (const double scale : {0.0, 0.5, 1.0 / 255}) {
    const auto data = open({}, scale);
    EXPECT_EQ(data->sample_shape(), (std::vector<size_t>{1, 8, 8}));
    const Records r = read_all(*data);
    for (size_t i = 0; i < x.size(); ++i) {
      // The default is exactly IDX's v / 255.0f, and 1/255 given as --scale is the same.
      const float expected =
          scale == 0.5 ? static_cast<float>(x[i]) * 0.5f : static_cast<float>(x[i]) / 255.0f;
      ASSERT_EQ(r.x[i], expected) << "scale " << scale << " value " << int(x[i]);
    }
  }
}

TEST_F(NpyData, ReadsEveryIntegerLabelDtype) {
  write_default({5, 2});
  const std::vector<int> labels = {3, 0, 7, 1, 2};
  const auto check = [&](const std::string& descr, auto type_tag) {
    using T = decltype(type_tag);
    std::vector<T> y(labels.begin(), labels.end());
    write_npy_array(y_, descr, {5}, y);
    const auto data = open();
    EXPECT_EQ(data->num_classes(), 8) << descr;
    const Records r = read_all(*data);
    EXPECT_EQ(std::vector<int>(r.y.begin(), r.y.end()), labels) << descr;
  };
  check("|u1", uint8_t{});
  check("|i1", int8_t{});
  check("<u2", uint16_t{});
  check("<i2", int16_t{});
  check("<u4", uint32_t{});
  check("<i4", int32_t{});
  check("<u8", uint64_t{});
  check("<i8", int64_t{});
}

TEST_F(NpyData, ClassesFromDataAreAtLeastTwoAndClassesFlagWins) {
  write_default({4, 2});
  write_npy_array(y_, "<i4", {4}, std::vector<int32_t>{0, 0, 0, 0});
  EXPECT_EQ(open()->num_classes(), 2);
  EXPECT_EQ(open(LabelRange{12, "--classes 12"})->num_classes(), 12);
}

TEST_F(NpyData, ReadsVersion2And3HeadersAndGzipFiles) {
  write_default({6, 4});
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i);
  for (int version : {2, 3}) {
    write_npy_array(x_, "<f4", {6, 4}, x, version);
    EXPECT_EQ(open()->size(), 6u) << version;
  }
  gzip_file(x_, x_ + ".gz");
  gzip_file(y_, y_ + ".gz");
  const auto data = open_npy_dataset(x_ + ".gz", y_ + ".gz", dir_.path + "/cache", 0, {});
  EXPECT_EQ(read_all(*data).x, x);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path + "/cache"), fs::directory_iterator()), 2);
}

TEST_F(NpyData, ReadRejectsRecordOutOfRange) {
  write_default({6, 4});
  const auto data = open();
  const size_t record = 6;
  float x[4];
  int32_t y;
  EXPECT_EQ(error_of([&] { data->read(&record, 1, x, &y); }), x_ + ": record 6 out of range (6 records)");
}

TEST_F(NpyData, CountMismatchIsAnError) {
  write_default({6, 4});
  write_npy_array(y_, "<i8", {5}, std::vector<int64_t>{0, 1, 2, 0, 1});
  EXPECT_EQ(open_error(), y_ + ": has 5 labels but " + x_ + " has 6 records");
}

TEST_F(NpyData, ShapeMismatchIsAnError) {
  write_default({6, 4});
  write_npy_array(y_, "<i8", {6, 1}, std::vector<int64_t>{0, 1, 2, 0, 1, 2});
  EXPECT_EQ(open_error(),
            y_ + ": labels must have shape (N,), this one is (6, 1) (y.reshape(-1) makes it (N,))");
  write_npy_array(y_, "<i8", {}, std::vector<int64_t>{0});
  EXPECT_EQ(open_error(), y_ + ": labels must have shape (N,), this one is ()");
  write_npy_array(x_, "<f4", {2, 1, 1, 1, 3}, std::vector<float>(6, 1.0f));
  EXPECT_EQ(open_error(), x_ + ": features must have a shape (N, ...) of 1 to 4 dimensions, e.g. (N, D) or "
                               "(N, C, H, W); this one is (2, 1, 1, 1, 3)");
  write_npy_array(x_, "<f4", {6, 0}, std::vector<float>{});
  EXPECT_EQ(open_error(), x_ + ": records of shape (6, 0) are empty");
  write_npy_array(x_, "<f4", {0, 4}, std::vector<float>{});
  write_npy_array(y_, "<i8", {0}, std::vector<int64_t>{});
  EXPECT_EQ(open_error(), x_ + ": has no records");
}

TEST_F(NpyData, LabelOutsideTheClassesIsAnError) {
  write_default({6, 4});
  write_npy_array(y_, "<i2", {6}, std::vector<int16_t>{0, 1, 2, 5, 1, 0});
  EXPECT_EQ(open_error(LabelRange{5, "--classes 5"}),
            y_ + ": label 5 of record 3 is not in [0, 5) (--classes 5)");
  EXPECT_EQ(open(LabelRange{6, "--classes 6"})->num_classes(), 6);
  write_npy_array(y_, "<i2", {6}, std::vector<int16_t>{0, 1, -2, 1, 1, 0});
  EXPECT_EQ(open_error(), y_ + ": label -2 of record 2 is negative (labels are class indices 0, 1, ...)");
  write_npy_array(y_, "<u8", {6}, std::vector<uint64_t>{0, 1, 1ull << 40, 1, 1, 0});
  EXPECT_EQ(open_error(),
            y_ + ": label 1099511627776 of record 2 is too large: at most 16777216 classes are supported");
}

TEST_F(NpyData, NonFiniteFeatureIsAnError) {
  std::vector<float> x(24, 1.0f);
  write_default({6, 4});
  x[4 * 4 + 2] = std::numeric_limits<float>::quiet_NaN();
  write_npy_array(x_, "<f4", {6, 4}, x);
  EXPECT_EQ(open_error(), x_ + ": record 4 has a non-finite value (nan) at element 2 of its 4");
  x[4 * 4 + 2] = 1;
  x[23] = -std::numeric_limits<float>::infinity();
  write_npy_array(x_, "<f4", {6, 4}, x);
  EXPECT_EQ(open_error(), x_ + ": record 5 has a non-finite value (-inf) at element 3 of its 4");
}

TEST_F(NpyData, TruncatedOrOversizedFileIsAnError) {
  write_default({6, 4});
  fs::resize_file(x_, fs::file_size(x_) - 1);
  EXPECT_EQ(open_error(),
            x_ + ": file is 223 bytes, but its header describes 6 records of 16 bytes (shape (6, 4), "
                 "float32) after a 128-byte header (truncated?)");
  fs::resize_file(x_, fs::file_size(x_) + 5);
  EXPECT_EQ(open_error(),
            x_ + ": file is 228 bytes, but its header describes 6 records of 16 bytes (shape (6, 4), "
                 "float32) after a 128-byte header (extra bytes after the data)");
  fs::resize_file(x_, 100);
  EXPECT_EQ(open_error(), x_ + ": file is 100 bytes, shorter than its 128-byte .npy header (truncated?)");
  fs::resize_file(x_, 9);
  EXPECT_EQ(open_error(), x_ + ": file is 9 bytes, too short for a .npy header");
  write_default({6, 4});
  fs::resize_file(y_, fs::file_size(y_) - 8);
  EXPECT_EQ(open_error(),
            y_ + ": file is 168 bytes, but its header describes 6 records of 8 bytes (shape (6,), "
                 "int64) after a 128-byte header (truncated?)");
}

TEST_F(NpyData, UnsupportedDtypeIsAnError) {
  write_default({6, 4});
  const std::string features_rule =
      "; features must be float32 ('<f4') or uint8 ('|u1'), e.g. x.astype(numpy.float32)";
  write_npy_array(x_, "<f8", {6, 4}, std::vector<double>(24, 1.0));
  EXPECT_EQ(open_error(), x_ + ": unsupported dtype '<f8' (float64)" + features_rule);
  write_npy_array(x_, ">f4", {6, 4}, std::vector<float>(24, 1.0f));
  EXPECT_EQ(open_error(), x_ + ": big-endian dtype '>f4' (float32) is not supported" + features_rule);
  write_npy_array(x_, "<i4", {6, 4}, std::vector<int32_t>(24, 1));
  EXPECT_EQ(open_error(), x_ + ": unsupported dtype '<i4' (int32)" + features_rule);
  write_npy_array(x_, "|O", {6, 4}, std::vector<uint64_t>(24, 0));
  EXPECT_EQ(open_error(), x_ + ": object arrays (dtype '|O') are not supported" + features_rule);
  write_npy_raw(x_, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }", "", 0);
  EXPECT_EQ(open_error(), x_ + ": structured dtypes (a list of fields) are not supported");
  write_npy_array(x_, "<U3", {6, 4}, std::vector<uint32_t>(72, 0));
  EXPECT_EQ(open_error(), x_ + ": unsupported dtype '<U3'" + features_rule);

  write_default({6, 4});
  write_npy_array(y_, "<f4", {6}, std::vector<float>(6, 1.0f));
  EXPECT_EQ(open_error(),
            y_ + ": unsupported dtype '<f4' (float32); labels must be integers (int8 to int64 or uint8 "
                 "to uint64, little-endian), e.g. y.astype(numpy.int64)");
  write_npy_array(y_, "|b1", {6}, std::vector<uint8_t>(6, 1));
  EXPECT_CONTAINS(open_error(), y_ + ": unsupported dtype '|b1' (bool); labels must be integers");
}

TEST_F(NpyData, FortranOrderAndMalformedHeadersAreErrors) {
  write_default({6, 4});
  const std::vector<float> x(24, 1.0f);
  const auto with_dict = [&](const std::string& dict) {
    write_npy_raw(x_, dict, x.data(), x.size() * 4);
    return open_error();
  };
  EXPECT_EQ(with_dict(npy_dict("<f4", {6, 4}, "True")),
            x_ + ": fortran_order True (column-major) arrays are not supported; save a C-order array "
                 "(numpy.ascontiguousarray)");
  EXPECT_EQ(with_dict("{'descr': '<f4', 'shape': (6, 4), }"),
            x_ + ": malformed .npy header (no 'fortran_order' key)");
  EXPECT_CONTAINS(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (6, 4), 'x': 1}"),
                  x_ + ": malformed .npy header (unexpected key 'x'");
  EXPECT_CONTAINS(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (6, 4)"),
                  x_ + ": malformed .npy header (expected ',' or '}'");
  EXPECT_CONTAINS(with_dict("{'descr': '<f4', 'fortran_order': false, 'shape': (6, 4)}"),
                  x_ + ": malformed .npy header (expected True or False");
  EXPECT_CONTAINS(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (24)}"),
                  x_ + ": malformed .npy header (a one-dimensional shape is written (n,)");
  EXPECT_CONTAINS(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (6, -4)}"),
                  x_ + ": malformed .npy header (expected a non-negative integer");
  EXPECT_CONTAINS(with_dict("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6, 4)}"),
                  x_ + ": malformed .npy header (the key 'descr' appears twice");
  // Python 2's long literals are read.
  EXPECT_EQ(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (6L, 4L), }"),
            "(no pstrain::Error thrown)");

  write_text(x_, "not numpy at all");
  EXPECT_EQ(open_error(), x_ + ": not a .npy file (it does not start with \\x93NUMPY)");
  write_npy_array(x_, "<f4", {6, 4}, x);
  {
    std::fstream f(x_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(6);
    f.put('\x04');
  }
  EXPECT_EQ(open_error(), x_ + ": .npy format version 4.0 is not supported (1.0, 2.0 and 3.0 are)");
  write_npy_array(x_, "<f4", {6, 4}, x);
  {
    std::fstream f(x_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(127);
    f.put(' ');  // the header's closing newline
  }
  EXPECT_EQ(open_error(), x_ + ": malformed .npy header (it does not end in a newline)");
  EXPECT_EQ(error_of([&] { open_npy_dataset(dir_.path + "/missing.npy", y_, dir_.path, 0, {}); }),
            dir_.path + "/missing.npy: cannot open: No such file or directory");
}

// ---- CSV ----

class CsvData : public ::testing::Test {
 protected:
  std::unique_ptr<Dataset> open(const std::string& label_column = "", const LabelRange& range = {}) {
    return open_csv_dataset(csv_, label_column, cache_, range);
  }
  std::string open_error(const std::string& label_column = "", const LabelRange& range = {},
                         bool* usage = nullptr) {
    return error_of([&] { open(label_column, range); }, usage);
  }
  size_t cache_files() const {
    if (!fs::exists(cache_)) return 0;
    return static_cast<size_t>(std::distance(fs::directory_iterator(cache_), fs::directory_iterator()));
  }

  TempDir dir_{"csv-data"};
  std::string csv_ = dir_.path + "/train.csv", cache_ = dir_.path + "/cache";
};

TEST_F(CsvData, ReadsAHeaderAndFindsTheLabelByNameOrIndex) {
  write_text(csv_, "a,b,label,c\n1.5,2,1,3\n0.25,1e-3,0,4\n7,8,2,9\n");
  for (const std::string column : {"label", "2"}) {
    const auto data = open(column);
    ASSERT_EQ(data->size(), 3u);
    EXPECT_EQ(data->sample_shape(), (std::vector<size_t>{3}));
    EXPECT_EQ(data->num_classes(), 3);
    const Records r = read_all(*data);
    EXPECT_EQ(r.x, (std::vector<float>{1.5f, 2, 3, 0.25f, 1e-3f, 4, 7, 8, 9})) << column;
    EXPECT_EQ(r.y, (std::vector<int32_t>{1, 0, 2})) << column;
  }
  const auto last = open();  // default: the last column
  EXPECT_EQ(last->num_classes(), 10);
  EXPECT_EQ(read_all(*last).x, (std::vector<float>{1.5f, 2, 1, 0.25f, 1e-3f, 0, 7, 8, 2}));
  EXPECT_EQ(read_all(*last).y, (std::vector<int32_t>{3, 4, 9}));
  EXPECT_EQ(
      open_error("a"),
      csv_ + " line 2, column 0 ('a'): label 1.5 is not an integer (labels are class indices 0, 1, ...)");
  bool usage = false;
  EXPECT_EQ(
      open_error("nope", {}, &usage),
      "--label-column 'nope': " + csv_ + " has no column of that name (its columns: 'a', 'b', 'label', 'c')");
  EXPECT_TRUE(usage);
  EXPECT_EQ(open_error("4", {}, &usage), "--label-column 4: " + csv_ + " has 4 columns (0 to 3)");
  EXPECT_TRUE(usage);
}

TEST_F(CsvData, AHeaderNameWinsOverAnIndex) {
  write_text(csv_, "x,0,y\n5,1,7\n6,0,8\n");
  const auto data = open("0");
  EXPECT_EQ(read_all(*data).x, (std::vector<float>{5, 7, 6, 8}));
  EXPECT_EQ(read_all(*data).y, (std::vector<int32_t>{1, 0}));
}

TEST_F(CsvData, WithoutAHeaderTheFirstRowIsData) {
  write_text(csv_, "1,2,0\n3,4,1\n");
  const auto data = open("0");
  EXPECT_EQ(data->size(), 2u);
  EXPECT_EQ(read_all(*data).x, (std::vector<float>{2, 0, 4, 1}));
  EXPECT_EQ(read_all(*data).y, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(open_error("label"),
            "--label-column 'label': " + csv_ +
                " has no column of that name (it has no header row; give a 0-based index)");
}

TEST_F(CsvData, AcceptsPaddingQuotesCrlfTrailingBlankLinesAndGzip) {
  write_text(csv_, "\"x\", \"y\" ,label\r\n \"1.5\" ,\t+2 , 1\r\n-0.5,3e2,0\r\n\r\n\n  \n");
  const auto data = open("label");
  EXPECT_EQ(data->size(), 2u);
  EXPECT_EQ(read_all(*data).x, (std::vector<float>{1.5f, 2, -0.5f, 300}));
  write_text(dir_.path + "/plain.csv", "1,2,0\n3,4,1\n5,6,1\n");
  gzip_file(dir_.path + "/plain.csv", dir_.path + "/t.csv.gz");
  const auto gz = open_csv_dataset(dir_.path + "/t.csv.gz", "", cache_, {});
  EXPECT_EQ(read_all(*gz).x, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(read_all(*gz).y, (std::vector<int32_t>{0, 1, 1}));
}

TEST_F(CsvData, FloatValuesRoundTripExactly) {
  std::string text = "f,label\n";
  std::vector<float> values;
  for (int i = 0; i < 50; ++i) {
    values.push_back(static_cast<float>(i) / 255.0f + 1e-7f * static_cast<float>(i * i));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g,%d\n", static_cast<double>(values.back()), i % 2);
    text += buf;
  }
  write_text(csv_, text);
  EXPECT_EQ(read_all(*open()).x, values);
}

TEST_F(CsvData, TheCacheIsReusedAndRebuiltWhenTheSourceChanges) {
  write_text(csv_, "1,2,0\n3,4,1\n");
  open();
  ASSERT_EQ(cache_files(), 1u);
  const fs::path cached = fs::directory_iterator(cache_)->path();
  EXPECT_EQ(cached.filename().string().rfind("train.csv.", 0), 0u) << cached;
  EXPECT_EQ(cached.extension(), ".pstrain-csv");
  struct stat before {};
  ASSERT_EQ(::stat(cached.c_str(), &before), 0);
  open();
  struct stat after {};
  ASSERT_EQ(::stat(cached.c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);  // not rewritten
  fs::resize_file(cached, 10);             // a damaged cache file is replaced
  EXPECT_EQ(open()->size(), 2u);
  write_text(csv_, "1,2,0\n3,4,1\n5,6,1\n");
  const struct timespec later[2] = {{0, UTIME_OMIT}, {2000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, csv_.c_str(), later, 0), 0);
  EXPECT_EQ(open()->size(), 3u);
  EXPECT_EQ(cache_files(), 2u);
}

TEST_F(CsvData, ConcurrentOpenersRaceSafely) {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += std::to_string(i) + "," + std::to_string(i % 7) + "\n";
  write_text(csv_, text);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(4);
  for (size_t t = 0; t < errors.size(); ++t) {
    threads.emplace_back([&, t] { errors[t] = error_of([&] { ASSERT_EQ(open()->size(), 3000u); }); });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "(no pstrain::Error thrown)");
  EXPECT_EQ(cache_files(), 1u);  // no temporary files left
}

TEST_F(CsvData, ColumnCountMismatchIsAnErrorNamingTheLine) {
  write_text(csv_, "a,b,label\n1,2,0\n3,4,5,1\n");
  EXPECT_EQ(open_error(), csv_ + " line 3: 4 fields, but the header (line 1) has 3");
  write_text(csv_, "1,2,0\n3,1\n");
  EXPECT_EQ(open_error(), csv_ + " line 2: 2 fields, but the first row (line 1) has 3");
  EXPECT_EQ(cache_files(), 0u);  // a failed parse leaves no cache file
}

TEST_F(CsvData, NonNumericOrNonFiniteValueIsAnErrorNamingLineAndColumn) {
  write_text(csv_, "a,b,label\n1,2,0\n3,x4,1\n");
  EXPECT_EQ(open_error(), csv_ + " line 3, column 1 ('b'): 'x4' is not a number");
  write_text(csv_, "1,2,0\n3,,1\n");
  EXPECT_EQ(open_error(), csv_ + " line 2, column 1: empty field (missing values are not supported)");
  write_text(csv_, "1,2,0\n3,nan,1\n");
  EXPECT_EQ(open_error(), csv_ + " line 2, column 1: non-finite value 'nan'");
  write_text(csv_, "a,b,label\n1,2,0\n3,4,-inf\n");
  EXPECT_EQ(open_error(), csv_ + " line 3, column 2 ('label'): non-finite value '-inf'");
  write_text(csv_, "1,2,0\n1e39,4,1\n");
  EXPECT_EQ(open_error(), csv_ + " line 2, column 0: '1e39' is outside the float32 range");
  EXPECT_EQ(cache_files(), 0u);
}

TEST_F(CsvData, LabelsMustBeIntegersInTheClasses) {
  write_text(csv_, "a,label\n1,0\n2,2.5\n");
  EXPECT_EQ(
      open_error(),
      csv_ + " line 3, column 1 ('label'): label 2.5 is not an integer (labels are class indices 0, 1, ...)");
  write_text(csv_, "a,label\n1,0\n2,3\n3,1\n");
  EXPECT_EQ(open_error("", {3, "--classes 3"}),
            csv_ + ": label 3 of line 3, column 1 ('label') is not in [0, 3) (--classes 3)");
  EXPECT_EQ(open("", {4, "--classes 4"})->num_classes(), 4);
  write_text(csv_, "a,label\n1,0\n2,-1\n");
  EXPECT_EQ(
      open_error(),
      csv_ + ": label -1 of line 3, column 1 ('label') is negative (labels are class indices 0, 1, ...)");
}

TEST_F(CsvData, MalformedFilesAreErrors) {
  write_text(csv_, "1,0\n\n2,1\n");
  EXPECT_EQ(open_error(),
            csv_ + " line 2: empty line before line 3 (only the end of the file may have empty lines)");
  write_text(csv_, "a\n1\n");
  EXPECT_EQ(open_error(), csv_ +
                              " line 1: one column; a CSV data set needs feature columns and a label column, "
                              "separated by commas");
  write_text(csv_, "a,label\n");
  EXPECT_EQ(open_error(), csv_ + ": no data rows after the header");
  write_text(csv_, "");
  EXPECT_EQ(open_error(), csv_ + ": no data rows");
  write_text(csv_, "x,x\n1,0\n");
  EXPECT_EQ(open_error("x"),
            "--label-column 'x': " + csv_ + " has 2 columns of that name; give a 0-based index");
  EXPECT_EQ(error_of([&] { open_csv_dataset(dir_.path + "/missing.csv", "", cache_, {}); }),
            dir_.path + "/missing.csv: cannot open: No such file or directory");
  fs::remove_all(cache_);
  write_text(dir_.path + "/plain.csv", std::string(200000, '1') + ",0\n");
  gzip_file(dir_.path + "/plain.csv", dir_.path + "/t.csv.gz");
  fs::resize_file(dir_.path + "/t.csv.gz", fs::file_size(dir_.path + "/t.csv.gz") / 2);
  EXPECT_EQ(error_of([&] { open_csv_dataset(dir_.path + "/t.csv.gz", "", cache_, {}); }),
            dir_.path + "/t.csv.gz: truncated gzip data");
  EXPECT_EQ(cache_files(), 0u);
}

// ---- the flags: grammar, classes, and the test set ----

TEST(DataFlags, Grammar) {
  const DataFiles csv = parse_data_files("d/Train.CSV.gz", "--train-data");
  EXPECT_EQ(csv.format, DataKind::kCsv);
  EXPECT_EQ(csv.features, "d/Train.CSV.gz");
  const DataFiles npy = parse_data_files("x.npy,y.npy.gz", "--train-data");
  EXPECT_EQ(npy.format, DataKind::kNpy);
  EXPECT_EQ(npy.features, "x.npy");
  EXPECT_EQ(npy.labels, "y.npy.gz");
  EXPECT_EQ(parse_data_files("images-idx3-ubyte.gz,labels-idx1-ubyte", "--test-data").format, DataKind::kIdx);
  const auto error = [](const std::string& value) {
    bool usage = false;
    const std::string message = error_of([&] { parse_data_files(value, "--train-data"); }, &usage);
    EXPECT_TRUE(usage) << message;
    return message;
  };
  EXPECT_EQ(error("x.npy"),
            "--train-data 'x.npy': one file must be a .csv (features and label columns) or Criteo data "
            "(.tsv or .txt, or any name with --data-format criteo); give .npy or IDX data as FEATURES,LABELS");
  // Parquet is read only by a schema (before data_files.cc said so, the message offered .csv or Criteo).
  EXPECT_EQ(error("d/clicks.Parquet"),
            "--train-data 'd/clicks.Parquet': a Parquet file is read by a feature schema: give --schema FILE.json "
            "naming its columns (docs/data.md, \"Parquet\")");
  EXPECT_EQ(error("x.npy,y"),
            "--train-data 'x.npy,y': FEATURES and LABELS must both be .npy files, or both IDX files");
  EXPECT_EQ(error("a,b,c"),
            "--train-data 'a,b,c': names 3 files; give FEATURES,LABELS or one .csv or Criteo file (file "
            "names may not contain commas)");
  EXPECT_EQ(error("x.npy,"), "--train-data 'x.npy,': an empty file name in FEATURES,LABELS");
  EXPECT_EQ(error("f.csv,l.csv"),
            "--train-data 'f.csv,l.csv': a .csv file holds the features and the labels: give it alone");
}

TEST(DataFlags, CombinationsAreChecked) {
  EXPECT_TRUE(
      parse_worker_flags({"--train-data", "a.csv", "--test-data", "b.csv", "--label-column", "y", "--classes", "3"}));
  EXPECT_TRUE(parse_worker_flags({"--test-data", "x.npy,y.npy"}));  // the training set from --data-dir (or --evaluate)
  EXPECT_EQ(
      usage_error_of({"--train-data", "a.csv"}),
      "--train-data needs --test-data too: the chief evaluates the model on it (it may name the same files)");
  EXPECT_EQ(
      usage_error_of({"--train-data", "a.npy,b.npy", "--test-data", "c.npy"}),
      "--test-data 'c.npy': one file must be a .csv (features and label columns) or Criteo data (.tsv or "
      ".txt, or any name with --data-format criteo); give .npy or IDX data as FEATURES,LABELS");
  EXPECT_EQ(
      usage_error_of({"--train-data", "a.npy,b.npy", "--test-data", "c.npy,d.npy", "--label-column", "3"}),
      "--label-column applies to CSV data (--train-data / --test-data FILE.csv)");
}

// A job's data options over files in `dir`.
DataOptions data_options(const std::string& dir, const std::string& train, const std::string& test,
                         int classes = 0) {
  DataOptions o;
  o.cache_dir = dir + "/cache";
  o.data_dir = dir + "/no-data-dir";
  o.train_data = train;
  o.test_data = test;
  o.classes = classes;
  return o;
}

TEST(OpenData, ClassesComeFromTheTrainingLabelsOrTheFlag) {
  TempDir dir("open-data");
  write_text(dir.path + "/train.csv", "a,label\n1,0\n2,3\n");
  write_text(dir.path + "/test.csv", "a,label\n1,2\n2,4\n");
  const std::string train = dir.path + "/train.csv", test = dir.path + "/test.csv";
  DataOptions o = data_options(dir.path, train, test);
  const auto data = open_training_data(o);
  EXPECT_EQ(data->num_classes(), 4);
  EXPECT_EQ(training_data_source(o), train);
  EXPECT_EQ(
      error_of([&] { open_test_data(o, data->num_classes()); }),
      test +
          ": label 4 of line 3, column 1 ('label') is not in [0, 4) (the training set's classes; --classes "
          "sets their number)");
  o.classes = 5;
  EXPECT_EQ(open_training_data(o)->num_classes(), 5);
  EXPECT_EQ(open_test_data(o, 5)->size(), 2u);
  o.classes = 3;
  EXPECT_EQ(error_of([&] { open_training_data(o); }),
            train + ": label 3 of line 3, column 1 ('label') is not in [0, 3) (--classes 3)");
}

TEST(OpenData, TestRecordsMustHaveTheTrainingShape) {
  TempDir dir("open-shape");
  const std::string x = dir.path + "/x.npy", y = dir.path + "/y.npy", tx = dir.path + "/tx.npy";
  write_npy_array(x, "<f4", {4, 2, 3}, std::vector<float>(24, 0.5f));
  write_npy_array(y, "<i4", {4}, std::vector<int32_t>{0, 1, 0, 1});
  write_npy_array(tx, "<f4", {4, 6}, std::vector<float>(24, 0.5f));
  DataOptions o = data_options(dir.path, x + "," + y, tx + "," + y);
  const auto train = open_training_data(o);
  EXPECT_EQ(train->sample_shape(), (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(error_of([&] { open_test_data(o, 2); }),
            "test data " + tx + "," + y + ": records of shape (6,), but the training data's (" + x + "," + y +
                ") are (1, 2, 3)");
  write_text(dir.path + "/test.csv", "1,2,3,4,5,6,0\n");
  o.test_data = dir.path + "/test.csv";
  EXPECT_CONTAINS(error_of([&] { open_test_data(o, 2); }), "records of shape (6,), but the training data's");
  o.evaluate = true;  // no training set to compare with: the model's input shape decides
  EXPECT_EQ(open_test_data(o, 2)->sample_shape(), (std::vector<size_t>{6}));
  o.evaluate = false;
  write_npy_array(tx, "<f4", {4, 2, 3}, std::vector<float>(24, 0.5f));
  o.test_data = tx + "," + y;
  EXPECT_EQ(open_test_data(o, 2)->size(), 4u);
}

TEST(OpenData, IdxPairsTakeClassesAndScale) {
  TempDir dir("open-idx");
  write_synthetic_mnist(dir.path, "train", 50, 4, 4, 1, true);
  const std::string pair =
      dir.path + "/train-images-idx3-ubyte.gz," + dir.path + "/train-labels-idx1-ubyte.gz";
  DataOptions o = data_options(dir.path, pair, pair);
  const auto data = open_training_data(o);
  EXPECT_EQ(data->num_classes(), 10);  // IDX: 10 unless --classes
  EXPECT_EQ(data->sample_shape(), (std::vector<size_t>{1, 4, 4}));
  o.classes = 12;
  o.scale = 2;
  const auto scaled = open_training_data(o);
  EXPECT_EQ(scaled->num_classes(), 12);
  const Records a = read_all(*data), b = read_all(*scaled);
  for (size_t i = 0; i < a.x.size(); ++i) ASSERT_EQ(b.x[i], std::round(a.x[i] * 255) * 2) << i;
  EXPECT_EQ(open_test_data(o, 12)->size(), 50u);
}

// ---- memory ----

void read_one_epoch(const Dataset& data) {
  const ShardSampler sampler(data.size(), 0, 1, 50, 7, true);
  Prefetcher prefetcher(data, sampler, 0, 1, 0, 4);
  Batch b;
  uint64_t batches = 0;
  while (prefetcher.next(b)) ++batches;
  if (batches != sampler.steps_per_epoch()) throw std::runtime_error("epoch cut short");
}

// Opens (checking every value) and reads one shuffled epoch of 1x and 10x the records; the peaks
// must not differ by the data's size, and a control child holding 8 MiB more must show that much.
void expect_flat_peak(const std::function<std::unique_ptr<Dataset>(int)>& open, const char* what) {
  constexpr long kSlackKib = 2048;
  constexpr size_t kControlBytes = 8 << 20;
  const long base = child_peak_rss_kib([&] { read_one_epoch(*open(1)); });
  const long grown = child_peak_rss_kib([&] { read_one_epoch(*open(10)); });
  const long control = child_peak_rss_kib([&] {
    std::vector<char> held(kControlBytes, 1);
    read_one_epoch(*open(1));
    volatile char sink = held[held.size() / 2];
    (void)sink;
  });
  std::printf("%s peak RSS: 1x %ld KiB, 10x %ld KiB, 1x + 8 MiB held %ld KiB\n", what, base, grown, control);
  if (control <= base + kSlackKib) GTEST_SKIP() << "peak RSS here does not resolve 8 MiB";
  EXPECT_LE(grown, base + kSlackKib) << what << ": memory grows with the file";
}

TEST(DataFormatsMemory, NpyAndCsvReadersDoNotGrowWithTheFile) {
  TempDir dir("formats-rss");
  constexpr uint64_t kRecords = 4000, kDim = 256;  // 10x: 40 MB of float32 features
  for (int times : {1, 10}) {
    const uint64_t n = kRecords * static_cast<uint64_t>(times);
    std::vector<float> x(n * kDim);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 1000) / 1000.0f;
    std::vector<int32_t> y(n);
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>(i % 10);
    write_npy_array(dir.path + "/x" + std::to_string(times) + ".npy", "<f4", {n, kDim}, x);
    write_npy_array(dir.path + "/y" + std::to_string(times) + ".npy", "<i4", {n}, y);
    std::ofstream csv(dir.path + "/d" + std::to_string(times) + ".csv");  // 10x: 40k rows of 64 columns
    for (uint64_t r = 0; r < n; ++r) {
      for (int c = 0; c < 63; ++c) csv << (r + c) % 100 << ',';
      csv << r % 10 << '\n';
    }
  }
  expect_flat_peak(
      [&](int times) {
        const std::string t = std::to_string(times);
        return open_npy_dataset(dir.path + "/x" + t + ".npy", dir.path + "/y" + t + ".npy", dir.path, 0, {});
      },
      ".npy");
  expect_flat_peak(
      [&](int times) {
        return open_csv_dataset(dir.path + "/d" + std::to_string(times) + ".csv", "", dir.path + "/cache",
                                {});
      },
      "CSV");
}

// ---- whole jobs ----

using test::ExitStatus;
using test::Job;
using test::JobResult;

// A separable 10-class problem: one random 8x8 binary template per class, each record its class's
// template plus uniform noise; training and test records differ, the templates are shared.
void write_separable_idx(const std::string& dir, const std::string& split, uint32_t n, uint64_t seed) {
  const auto label = [seed](uint32_t r) {
    return static_cast<uint8_t>(splitmix64(seed ^ splitmix64(r)) % 10);
  };
  write_idx_images(
      dir + "/" + split + "-images-idx3-ubyte", n, 8, 8,
      [&](uint32_t r, uint32_t p) {
        const int lit = splitmix64(1000 + label(r) * 64 + p) % 4 == 0 ? 180 : 40;
        const int noise = static_cast<int>(splitmix64(seed ^ ((uint64_t{r} << 32) | p)) % 81) - 40;
        return static_cast<uint8_t>(lit + noise);
      },
      false);
  write_idx_labels(dir + "/" + split + "-labels-idx1-ubyte", n, label, false);
}

// That problem written as IDX, as .npy (uint8 (N, 64) and float32 (N, 8, 8)) and as CSV (a
// header, the label first), the same records in every form.
class DataFormatsJob : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(make_temp_dir("formats-job"));
    for (const std::string split : {"train", "t10k"}) {
      write_separable_idx(*dir_, split, split == "train" ? 600 : 200, split == "train" ? 21 : 22);
      const auto idx = Dataset::open_mnist_dir(*dir_, split, *dir_ + "/cache");
      const Records r = read_all(*idx);
      const uint64_t n = idx->size();
      std::vector<uint8_t> bytes(r.x.size());
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(std::lround(r.x[i] * 255));
      write_npy_array(*dir_ + "/" + split + "-u8.npy", "|u1", {n, 64}, bytes);
      write_npy_array(*dir_ + "/" + split + "-f32.npy", "<f4", {n, 8, 8}, r.x);
      write_npy_array(*dir_ + "/" + split + "-labels.npy", "<i8", {n},
                      std::vector<int64_t>(r.y.begin(), r.y.end()));
      std::ofstream csv(*dir_ + "/" + split + ".csv");
      csv << "digit";
      for (int p = 0; p < 64; ++p) csv << ",p" << p;
      csv << "\n";
      for (uint64_t i = 0; i < n; ++i) {
        csv << r.y[i];
        for (int p = 0; p < 64; ++p) {
          char buf[32];
          std::snprintf(buf, sizeof buf, ",%.9g", static_cast<double>(r.x[i * 64 + p]));
          csv << buf;
        }
        csv << "\n";
      }
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }

  static std::string pair(const std::string& features, const std::string& split) {
    return *dir_ + "/" + split + "-" + features + ".npy," + *dir_ + "/" + split + "-labels.npy";
  }

  struct Trained {
    test::SavedParams params;
    double accuracy = -1;
  };

  // 1 PS and 2 workers, 3 epochs of 600 records in global batches of 32.
  static Trained train(const std::vector<std::string>& data, const std::string& tag) {
    const std::string dir = *dir_ + "/job-" + tag;
    fs::create_directories(dir);
    Job job;
    job.num_workers = 2;
    job.dir = dir;
    job.args = {
        "--data-dir",   *dir_,      "--cache-dir", dir + "/cache", "--hidden",  "16",   "--batch-size",
        "16",           "--epochs", "3",           "--optimizer",  "adam",      "--lr", "0.01",
        "--seed",       "7",        "--log-every", "1000",         "--timeout", "30",   "--save-params",
        dir + "/params"};
    job.args.insert(job.args.end(), data.begin(), data.end());
    const JobResult result = test::run_job(job);
    EXPECT_TRUE(result.ok()) << result.logs;
    Trained t;
    const size_t at = result.logs.find("test_accuracy=");
    EXPECT_NE(at, std::string::npos) << result.logs;
    if (at != std::string::npos) t.accuracy = std::atof(result.logs.c_str() + at + 14);
    if (result.ok()) t.params = test::load_saved_params(dir + "/params");
    std::printf("%s: test_accuracy=%.4f\n", tag.c_str(), t.accuracy);
    return t;
  }

  static std::string* dir_;
};
std::string* DataFormatsJob::dir_ = nullptr;

TEST_F(DataFormatsJob, NpyAndCsvJobsLearnAndEqualTheIdxJob) {
  const Trained idx = train({}, "idx");  // --data-dir's IDX files
  EXPECT_GT(idx.accuracy, 0.6);          // chance: 0.1
  const std::vector<std::pair<std::string, std::vector<std::string>>> forms = {
      {"npy-uint8",
       {"--train-data", pair("u8", "train"), "--test-data", pair("u8", "t10k"), "--scale",
        "0.00392156862745098"}},
      {"npy-float32", {"--train-data", pair("f32", "train"), "--test-data", pair("f32", "t10k")}},
      {"csv",
       {"--train-data", *dir_ + "/train.csv", "--test-data", *dir_ + "/t10k.csv", "--label-column", "digit"}},
  };
  for (const auto& [tag, flags] : forms) {
    const Trained t = train(flags, tag);
    EXPECT_GT(t.accuracy, 0.6) << tag;
    EXPECT_EQ(t.accuracy, idx.accuracy) << tag;
    const double rel = test::relative_difference(idx.params, t.params);
    EXPECT_EQ(rel, 0.0) << tag << ": the same records in another format give other parameters";
    std::printf("%s against IDX: max |difference| / max |parameter| = %.3g\n", tag.c_str(), rel);
  }
}

// A lone pstrain-worker on bad data fails at open, before it looks for a PS.
struct WorkerRun {
  ExitStatus status;
  std::string log;
};

WorkerRun run_lone_worker(const std::string& dir, const std::vector<std::string>& data) {
  std::vector<std::string> argv = {PSTRAIN_WORKER_BIN, "--ps-hosts",  "127.0.0.1:1", "--timeout", "1",
                                   "--cache-dir",      dir + "/cache"};
  argv.insert(argv.end(), data.begin(), data.end());
  const std::string log = dir + "/w0.log";
  WorkerRun run;
  run.status = test::wait_for(test::spawn(argv, log), 30);
  run.log = test::read_file(log);
  return run;
}

TEST(DataFormatsBadInput, WorkerExitsOneWithTheMessageAndNoCrashTrace) {
  TempDir dir("formats-bad");
  const std::string d = dir.path;
  const auto npy = [&](const std::string& name, const std::string& descr, const std::vector<uint64_t>& shape,
                       const auto& values) { write_npy_array(d + "/" + name, descr, shape, values); };
  std::vector<float> x(40, 0.5f);
  npy("x.npy", "<f4", {10, 4}, x);
  npy("y.npy", "<i4", {10}, std::vector<int32_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0});
  npy("y9.npy", "<i4", {9}, std::vector<int32_t>(9, 0));
  npy("y_big.npy", "<i4", {10}, std::vector<int32_t>{0, 1, 2, 0, 7, 2, 0, 1, 2, 0});
  x[13] = std::numeric_limits<float>::infinity();
  npy("x_inf.npy", "<f4", {10, 4}, x);
  npy("x_f8.npy", "<f8", {10, 4}, std::vector<double>(40, 0.5));
  npy("x_short.npy", "<f4", {10, 4}, std::vector<float>(40, 0.5f));
  fs::resize_file(d + "/x_short.npy", fs::file_size(d + "/x_short.npy") - 4);
  npy("x_wide.npy", "<f4", {10, 5}, std::vector<float>(50, 0.5f));
  write_text(d + "/bad.csv", "a,b,label\n1,2,0\n3,oops,1\n");
  write_text(d + "/ragged.csv", "1,2,0\n3,1\n");
  write_text(d + "/good.csv", "a,b,label\n1,2,0\n3,4,1\n");
  write_text(d + "/labels3.csv", "a,b,label\n1,2,0\n3,4,3\n");

  const std::string good = d + "/x.npy," + d + "/y.npy";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--train-data", d + "/x.npy," + d + "/y9.npy", "--test-data", good},
       d + "/y9.npy: has 9 labels but " + d + "/x.npy has 10 records"},
      {{"--train-data", d + "/x.npy," + d + "/y_big.npy", "--test-data", good, "--classes", "5"},
       d + "/y_big.npy: label 7 of record 4 is not in [0, 5) (--classes 5)"},
      {{"--train-data", good, "--test-data", d + "/x.npy," + d + "/y_big.npy"},
       d + "/y_big.npy: label 7 of record 4 is not in [0, 3) (the training set's classes"},
      {{"--train-data", d + "/x_inf.npy," + d + "/y.npy", "--test-data", good},
       d + "/x_inf.npy: record 3 has a non-finite value (inf) at element 1 of its 4"},
      {{"--train-data", d + "/x_short.npy," + d + "/y.npy", "--test-data", good},
       d + "/x_short.npy: file is 284 bytes, but its header describes 10 records of 16 bytes"},
      {{"--train-data", d + "/x_f8.npy," + d + "/y.npy", "--test-data", good},
       d + "/x_f8.npy: unsupported dtype '<f8' (float64); features must be float32"},
      {{"--train-data", good, "--test-data", d + "/x_wide.npy," + d + "/y.npy"},
       "test data " + d + "/x_wide.npy," + d + "/y.npy: records of shape (5,), but the training data's (" +
           good + ") are (4,)"},
      {{"--train-data", d + "/bad.csv", "--test-data", d + "/good.csv"},
       d + "/bad.csv line 3, column 1 ('b'): 'oops' is not a number"},
      {{"--train-data", d + "/ragged.csv", "--test-data", d + "/good.csv"},
       d + "/ragged.csv line 2: 2 fields, but the first row (line 1) has 3"},
      {{"--train-data", d + "/good.csv", "--test-data", d + "/labels3.csv"},
       d + "/labels3.csv: label 3 of line 3, column 2 ('label') is not in [0, 2)"},
  };
  for (const auto& [flags, message] : cases) {
    const WorkerRun run = run_lone_worker(d, flags);
    EXPECT_EQ(run.status.code, 1) << run.log;
    EXPECT_CONTAINS(run.log, "E pstrain-worker: " + message);
    for (const char* crash : {"terminate called", "Aborted", "check failed", "Segmentation", "backtrace"}) {
      EXPECT_EQ(run.log.find(crash), std::string::npos) << crash << " in:\n" << run.log;
    }
  }
  const WorkerRun usage = run_lone_worker(d, {"--train-data", good});
  EXPECT_EQ(usage.status.code, 2) << usage.log;
  EXPECT_CONTAINS(usage.log, "--train-data needs --test-data too");
}

// A --model typo is a usage error before any data is read: here the training file's own error
// (line 3's 'oops', reported after its parse) would otherwise come first.
TEST(DataFormatsBadInput, AModelTypoIsAUsageErrorBeforeTheDataIsRead) {
  TempDir dir("formats-model-typo");
  const std::string d = dir.path;
  write_text(d + "/bad.csv", "a,b,label\n1,2,0\n3,oops,1\n");
  const WorkerRun run =
      run_lone_worker(d, {"--train-data", d + "/bad.csv", "--test-data", d + "/bad.csv", "--model", "dense 10, rleu"});
  EXPECT_EQ(run.status.code, 2) << run.log;
  EXPECT_CONTAINS(run.log, "'rleu' is not a layer (did you mean 'relu'?)");
  EXPECT_EQ(run.log.find("oops"), std::string::npos) << run.log;
}

}  // namespace
}  // namespace pstrain
