#include "test_util/params.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "worker/data/npy_format.h"

namespace pstrain::test {

SavedParams load_saved_params(const std::string& dir) {
  SavedParams p;
  for (int layer = 0; layer == 0 || std::filesystem::exists(dir + "/layer" + std::to_string(layer) + ".weight.npy");
       ++layer) {
    for (const char* kind : {".weight", ".bias"}) {
      const std::string name = "layer" + std::to_string(layer) + kind;
      std::vector<size_t> shape;
      p.values.push_back(read_npy(dir + "/" + name + ".npy", &shape));
      p.names.push_back(name);
    }
  }
  return p;
}

double relative_difference(const SavedParams& a, const SavedParams& b) {
  EXPECT_EQ(a.names, b.names);
  double diff = 0, scale = 0;
  for (size_t v = 0; v < a.values.size() && v < b.values.size(); ++v) {
    EXPECT_EQ(a.values[v].size(), b.values[v].size()) << a.names[v];
    for (size_t i = 0; i < a.values[v].size() && i < b.values[v].size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(a.values[v][i] - b.values[v][i])));
      scale = std::max(scale, static_cast<double>(std::fabs(a.values[v][i])));
    }
  }
  return scale > 0 ? diff / scale : diff;
}

bool bit_identical(const SavedParams& a, const SavedParams& b) {
  if (a.names != b.names || a.values.size() != b.values.size()) return false;
  for (size_t v = 0; v < a.values.size(); ++v) {
    if (a.values[v].size() != b.values[v].size() ||
        std::memcmp(a.values[v].data(), b.values[v].data(), a.values[v].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

}  // namespace pstrain::test
