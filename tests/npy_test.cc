#include "worker/data/npy_format.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "shared/util/error.h"
#include "test_util/errors.h"
#include "test_util/idx_writer.h"

namespace pstrain {
namespace {

TEST(NpyTest, RoundTripAndHeaderIsNumpyCompatible) {
  const std::string dir = make_temp_dir("npy");
  const std::vector<float> data = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  write_npy(dir + "/m.npy", {2, 3}, data.data());
  write_npy(dir + "/v.npy", {6}, data.data());
  std::vector<size_t> shape;
  EXPECT_EQ(read_npy(dir + "/m.npy", &shape), data);
  EXPECT_EQ(shape, (std::vector<size_t>{2, 3}));
  EXPECT_EQ(read_npy(dir + "/v.npy", &shape), data);
  EXPECT_EQ(shape, (std::vector<size_t>{6}));
  // NumPy requires the data to start at a multiple of 64 bytes and the header to end in '\n'.
  const auto size = std::filesystem::file_size(dir + "/m.npy");
  EXPECT_EQ((size - data.size() * sizeof(float)) % 64, 0u);
  std::ifstream in(dir + "/m.npy", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("'shape': (2, 3)"), std::string::npos);
  EXPECT_EQ(bytes[size - data.size() * sizeof(float) - 1], '\n');
  std::filesystem::remove_all(dir);
}

std::string read_error(const std::string& path) {
  std::vector<size_t> shape;
  return test::error_of([&] { read_npy(path, &shape); });
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The same text, once, replaced in a file's bytes.
void patch(const std::string& path, const std::string& from, const std::string& to) {
  std::string bytes = file_bytes(path);
  const size_t at = bytes.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  write_bytes(path, bytes.replace(at, from.size(), to));
}

TEST(NpyTest, RejectsOtherFiles) {
  const std::string dir = make_temp_dir("npy-bad");
  std::ofstream(dir + "/bad.npy") << "not numpy";
  std::vector<size_t> shape;
  EXPECT_THROW(read_npy(dir + "/bad.npy", &shape), Error);
  EXPECT_THROW(read_npy(dir + "/missing.npy", &shape), Error);
  EXPECT_EQ(read_error(dir + "/bad.npy"), dir + "/bad.npy: not a .npy file (it does not start with \\x93NUMPY)");
  EXPECT_EQ(read_error(dir + "/missing.npy"), "cannot open '" + dir + "/missing.npy': No such file or directory");
  EXPECT_EQ(read_error(dir), dir + ": not a regular file");
  std::filesystem::remove_all(dir);
}

// read_npy (--init-params) checks a file as the data sets' reader does (worker/data/npy_format.h), the same
// messages naming the file; only float32 is a parameter file.
TEST(NpyTest, ReadChecksHeaderDtypeAndSizeStrictly) {
  const std::string dir = make_temp_dir("npy-strict");
  const std::string path = dir + "/w.npy";
  const std::vector<float> data(12, 0.5f);
  const auto fresh = [&] { write_npy(path, {3, 4}, data.data()); };
  fresh();
  const std::string valid = file_bytes(path);
  ASSERT_EQ(valid.size(), 128u + 48u);

  write_bytes(path, valid.substr(0, valid.size() - 1));
  EXPECT_EQ(read_error(path), path + ": file is 175 bytes, but its header describes 3 records of 16 bytes (shape "
                                     "(3, 4), float32) after a 128-byte header (truncated?)");
  write_bytes(path, valid + "xyz");
  EXPECT_EQ(read_error(path), path + ": file is 179 bytes, but its header describes 3 records of 16 bytes (shape "
                                     "(3, 4), float32) after a 128-byte header (extra bytes after the data)");
  write_bytes(path, valid.substr(0, 100));
  EXPECT_EQ(read_error(path), path + ": file is 100 bytes, shorter than its 128-byte .npy header (truncated?)");
  write_bytes(path, valid.substr(0, 9));
  EXPECT_EQ(read_error(path), path + ": file is 9 bytes, too short for a .npy header");
  write_bytes(path, "");
  EXPECT_EQ(read_error(path), path + ": not a .npy file (it does not start with \\x93NUMPY)");

  fresh();
  patch(path, "'<f4'", "'<f8'");
  EXPECT_EQ(read_error(path), path + ": unsupported dtype '<f8' (float64); parameters must be float32 ('<f4'), "
                                     "as --save-params writes them");
  fresh();
  patch(path, "'<f4'", "'>f4'");
  EXPECT_EQ(read_error(path), path + ": big-endian dtype '>f4' (float32) is not supported; parameters must be "
                                     "float32 ('<f4'), as --save-params writes them");
  fresh();
  patch(path, "False", "True ");
  EXPECT_EQ(read_error(path), path + ": fortran_order True (column-major) arrays are not supported; save a C-order "
                                     "array (numpy.ascontiguousarray)");
  fresh();
  patch(path, "'shape': (3, 4)", "'shape': (3,-4)");
  EXPECT_EQ(read_error(path).rfind(path + ": malformed .npy header (expected a non-negative integer", 0), 0u);
  fresh();
  patch(path, "'descr'", "'dtype'");
  EXPECT_EQ(read_error(path), path + ": malformed .npy header (unexpected key 'dtype' at character 10)");
  fresh();
  patch(path, std::string("\x01\x00", 2), std::string("\x04\x00", 2));
  EXPECT_EQ(read_error(path), path + ": .npy format version 4.0 is not supported (1.0, 2.0 and 3.0 are)");
  fresh();
  patch(path, std::string("\x01\x00\x76\x00", 4), std::string("\x01\x00\xff\xff", 4));
  EXPECT_EQ(read_error(path), path + ": file is 176 bytes, shorter than its 65545-byte .npy header (truncated?)");
  fresh();
  patch(path, " \n", "  ");
  EXPECT_EQ(read_error(path), path + ": malformed .npy header (it does not end in a newline)");

  // A version 2.0 header (a 4-byte length) of the same array reads as version 1.0 does.
  std::string v2 = valid;
  v2.replace(6, 4, std::string("\x02\x00\x74\x00\x00\x00", 6));
  v2.erase(v2.find("  \n"), 2);  // two of the padding's spaces
  ASSERT_EQ(v2.size(), valid.size());
  write_bytes(path, v2);
  std::vector<size_t> shape;
  EXPECT_EQ(read_npy(path, &shape), data);
  EXPECT_EQ(shape, (std::vector<size_t>{3, 4}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pstrain
