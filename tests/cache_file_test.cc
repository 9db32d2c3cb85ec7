// create_file_atomically (worker/data/file_io.h): a parsed-data cache file is there whole or not
// at all, and a writer that fails, or is killed while it writes, leaves nothing in the cache
// directory (docs/data.md: "a failed parse leaves nothing").
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "shared/util/error.h"
#include "worker/data/file_io.h"

namespace pstrain {
namespace {

class CacheFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pstrain-cachefile-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    return names;
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static void write_all(int fd, const std::string& bytes) {
    ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }

  std::string dir_;
};

TEST_F(CacheFileTest, AWrittenFileIsThereWholeAndAloneAndReplacesAnOlderOne) {
  const std::string dst = dir_ + "/train.csv.123.f32";
  std::string name;
  create_file_atomically(dst, [&](int fd, const std::string& n) {
    name = n;
    write_all(fd, "first");
  });
  EXPECT_EQ(read(dst), "first");
  EXPECT_NE(name.find(dst), std::string::npos) << name;  // errors while writing name the file
  create_file_atomically(dst, [&](int fd, const std::string&) { write_all(fd, "second, longer"); });
  EXPECT_EQ(read(dst), "second, longer");
  EXPECT_EQ(entries(), std::vector<std::string>{"train.csv.123.f32"});
  EXPECT_EQ(std::filesystem::status(dst).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                std::filesystem::perms::group_read | std::filesystem::perms::others_read);
}

TEST_F(CacheFileTest, AWriterThatFailsLeavesNothing) {
  const std::string dst = dir_ + "/train.csv.123.f32";
  EXPECT_THROW(create_file_atomically(dst,
                                      [&](int fd, const std::string&) {
                                        write_all(fd, std::string(1 << 20, 'x'));
                                        throw std::runtime_error("line 7: bad field");
                                      }),
               std::runtime_error);
  EXPECT_TRUE(entries().empty());
}

// A worker stopped by the launcher during a parse (SIGKILL after the grace), or killed: the
// cache directory holds no temporary file afterwards, not even a named one.
TEST_F(CacheFileTest, AWriterKilledWhileWritingLeavesNothing) {
  const std::string dst = dir_ + "/train.csv.123.f32";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    create_file_atomically(dst, [&](int fd, const std::string&) {
      const std::string chunk(1 << 20, 'x');
      for (int i = 0; i < 4; ++i) {
        if (::write(fd, chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size())) ::_exit(3);
      }
      ::raise(SIGKILL);
    });
    ::_exit(4);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;
  EXPECT_TRUE(entries().empty()) << "left behind: " << (entries().empty() ? "" : entries().front());
}

TEST_F(CacheFileTest, ADirectoryThatIsNotThereIsNamed) {
  const std::string dst = dir_ + "/missing/train.csv.123.f32";
  try {
    create_file_atomically(dst, [&](int fd, const std::string&) { write_all(fd, "x"); });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dst + ": cannot create cache file: No such file or directory"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pstrain
