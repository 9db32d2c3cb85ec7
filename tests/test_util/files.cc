#include "test_util/files.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>

namespace pstrain::test {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

void write_gzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size())) << path;
  gzclose(f);
}

}  // namespace pstrain::test
