// Storage errors and temporaries (docs/checkpoints.md, "When the disk fills"): a write that fails
// (a directory where the file goes, a file-size limit) leaves no temporary file and names the
// path and the errno text; a FileWriter dropped before commit removes its temporary; the chief's
// clean-up removes checkpoints cut short and their temporaries, only what pstrain wrote.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "shared/checkpoint/checkpoint.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "test_util/idx_writer.h"

namespace pstrain::test {
namespace {

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& write) {
  try {
    write();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A directory where the file goes: the rename fails; both writes say so with the errno text and
// leave no PATH.tmp.
TEST(FileWriteTest, ARenameOntoADirectoryLeavesNoTemporaryAndNamesPathAndErrno) {
  TempDir dir("file-util");
  const std::string path = dir.path + "/target";
  fs::create_directories(path + "/inside");  // not empty: rename(2) gives EISDIR or ENOTEMPTY
  for (const bool durable : {false, true}) {
    const std::string why = error_of([&] {
      if (durable) {
        write_file_durably(path, "content");
      } else {
        write_file_atomically(path, "content");
      }
    });
    EXPECT_EQ(why, "cannot rename '" + path + ".tmp' to '" + path + "': Is a directory") << durable;
    EXPECT_FALSE(fs::exists(path + ".tmp")) << durable;
    EXPECT_TRUE(fs::is_directory(path + "/inside"));
  }
}

// A write past RLIMIT_FSIZE (a full disk's EFBIG twin, which a test can cause), in a child
// process: the error names the temporary file and "File too large", and the file is gone.
TEST(FileWriteTest, AWriteThatFailsLeavesNoTemporaryAndNamesPathAndErrno) {
  TempDir dir("file-util-fsize");
  const std::string path = dir.path + "/big";
  for (const bool durable : {false, true}) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::signal(SIGXFSZ, SIG_IGN);  // write(2) returns EFBIG instead
      const struct rlimit limit {4096, 4096};
      if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(3);
      const std::string why = error_of([&] {
        if (durable) {
          write_file_durably(path, std::string(3 << 20, 'x'));
        } else {
          write_file_atomically(path, std::string(3 << 20, 'x'));
        }
      });
      const bool named = why == "cannot write '" + path + ".tmp': File too large";
      if (!named) std::fprintf(stderr, "got: %s\n", why.c_str());
      _exit(named ? (fs::exists(path + ".tmp") ? 2 : 0) : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the error did not name the file and errno; 2: the .tmp was left ("
                                      << (durable ? "durable" : "atomic") << ")";
    EXPECT_FALSE(fs::exists(path));
  }
}

// A FileWriter dropped before commit() (an exception on the way) leaves nothing; committed, the
// file holds every piece.
TEST(FileWriteTest, AWriterNotCommittedLeavesNothing) {
  TempDir dir("file-util-writer");
  const std::string path = dir.path + "/pieces";
  {
    FileWriter out(path, true);
    out.append("abc", 3);
    EXPECT_TRUE(fs::exists(path + ".tmp"));
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_FALSE(fs::exists(path));
  FileWriter out(path, true);
  const std::string big((3 << 20) + 5, 'y');  // past the writer's buffer
  out.append("abc", 3);
  out.append(big.data(), big.size());
  out.append("z", 1);
  out.commit();
  std::string bytes, error;
  ASSERT_TRUE(read_whole_file(path, &bytes, &error)) << error;
  EXPECT_TRUE(bytes == "abc" + big + "z");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// The chief's clean-up: v40 (no MANIFEST, newer than every complete one: a write under way) is
// left alone; v30 and v10 are kept (keep 3), v10 without the .tmp a write cut short left; v20 (no
// MANIFEST, older than v30: cut short) goes; v5, cut short too, loses pstrain's files but keeps a
// file pstrain did not write, which is named.
TEST(PruneCheckpointsTest, RemovesCheckpointsCutShortAndTemporariesOnlyWhatPstrainWrote) {
  TempDir dir("prune");
  const auto put = [&](uint64_t v, const std::string& name) {
    fs::create_directories(checkpoint_version_dir(dir.path, v));
    std::ofstream(checkpoint_version_dir(dir.path, v) + "/" + name) << "x";
  };
  for (const char* f : {"shard0of2.ckpt", "shard1of2.ckpt.tmp"}) put(40, f);
  for (const char* f : {"shard0of2.ckpt", "shard1of2.ckpt", "model.json", "MANIFEST"}) put(30, f);
  for (const char* f : {"shard0of2.ckpt", "shard1of2.ckpt.tmp", "layer2.running_mean.npy"}) put(20, f);
  for (const char* f : {"shard0of2.ckpt", "shard1of2.ckpt", "MANIFEST", "shard1of2.ckpt.tmp", "MANIFEST.tmp"}) {
    put(10, f);
  }
  for (const char* f : {"shard0of2.ckpt.tmp", "notes.txt"}) put(5, f);
  const std::string left = prune_checkpoints(dir.path, 3);
  const auto has = [&](uint64_t v, const std::string& name) {
    return fs::exists(checkpoint_version_dir(dir.path, v) + "/" + name);
  };
  EXPECT_TRUE(has(40, "shard0of2.ckpt") && has(40, "shard1of2.ckpt.tmp"));
  EXPECT_TRUE(has(30, "MANIFEST") && has(30, "model.json"));
  EXPECT_FALSE(fs::exists(checkpoint_version_dir(dir.path, 20)));
  EXPECT_TRUE(has(10, "MANIFEST") && has(10, "shard1of2.ckpt"));
  EXPECT_FALSE(has(10, "shard1of2.ckpt.tmp") || has(10, "MANIFEST.tmp"));
  EXPECT_TRUE(has(5, "notes.txt"));
  EXPECT_FALSE(has(5, "shard0of2.ckpt.tmp"));
  EXPECT_EQ(left, "'" + checkpoint_version_dir(dir.path, 5) + "' holds files pstrain did not write; they are left");
  EXPECT_EQ(prune_checkpoints(dir.path, 1), "'" + checkpoint_version_dir(dir.path, 5) +
                                                "' holds files pstrain did not write; they are left");
  EXPECT_FALSE(fs::exists(checkpoint_version_dir(dir.path, 10)));
  EXPECT_TRUE(has(30, "MANIFEST") && has(40, "shard0of2.ckpt"));
}

}  // namespace
}  // namespace pstrain::test
