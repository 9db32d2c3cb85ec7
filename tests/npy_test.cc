#include "shared/npy.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "shared/error.h"
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

TEST(NpyTest, RejectsOtherFiles) {
  const std::string dir = make_temp_dir("npy-bad");
  std::ofstream(dir + "/bad.npy") << "not numpy";
  std::vector<size_t> shape;
  EXPECT_THROW(read_npy(dir + "/bad.npy", &shape), Error);
  EXPECT_THROW(read_npy(dir + "/missing.npy", &shape), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pstrain
