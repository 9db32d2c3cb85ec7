// --save-params' tables and a checkpoint's shard file are streamed from the PS's arena to the file
// (docs/sparse.md, "Memory"): the save's extra memory is a small part of the tables', not a second
// copy of them (issue 50: 4.2 GB peak for 1.9 GB of tables), and the file holds the exact bytes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ps/checkpoints.h"
#include "ps/sparse/sparse_store.h"
#include "ps/sparse_service.h"
#include "ps/store.h"
#include "shared/checkpoint/checkpoint.h"
#include "shared/checkpoint/table_file.h"
#include "shared/util/byte_reader.h"
#include "shared/util/file_util.h"
#include "sparse_test_util.h"
#include "test_util/job_shape.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"

namespace pstrain {
namespace {

using sparse_test::kTable;

constexpr size_t kDim = 64;

// A store of 100,000 rows of 64 floats (about 28 MB saved), --save-params set to `dir`.
ServerOptions options(const std::string& dir) {
  ServerOptions o;
  o.num_workers = 1;
  o.tables = {sparse_test::table("sgd", kDim)};
  o.table_lr = 0.5;
  o.optimizer.lr = 0.5;
  o.save_params = dir;
  return o;
}

void fill(SparseStore& store) {
  constexpr size_t kRowsPerStep = 25000;
  for (uint64_t step = 0; step < 4; ++step) {
    SparseSection s;
    s.table = kTable;
    s.dim = kDim;
    for (size_t i = 0; i < kRowsPerStep; ++i) s.ids.push_back((step * kRowsPerStep + i) * 0x9e3779b97f4a7c15ull + 1);
    s.values.assign(s.ids.size() * kDim, 0.25f);
    Header h;
    h.op = Op::kSparsePush;
    h.step = step;
    h.samples = 4;
    bool applied = false;
    std::string error;
    ASSERT_TRUE(store.push(0, false, h, {s}, &applied, &error)) << error;
    ASSERT_TRUE(applied);
  }
}


// The table's bytes as one string (what a save must write).
std::string table_bytes(const SparseStore& store) {
  std::vector<std::string> tables;
  store.save(&tables);
  return std::move(tables.at(0));
}

// The memory `save` takes beyond what this process holds, in KiB: run in a child, whose peak
// resident memory starts at what it holds now (fork), so the save's extra memory is its peak
// less its resident memory before the save. -1 when the child failed.
template <typename Save>
long extra_memory_kib(const Save& save) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return -1;
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    const long before = rss_kib();
    save();
    const long extra = peak_rss_kib() - before;
    const bool wrote = write(pipe_fds[1], &extra, sizeof extra) == static_cast<ssize_t>(sizeof extra);
    _exit(wrote ? 0 : 1);
  }
  close(pipe_fds[1]);
  long extra_kib = -1;
  const bool got = read(pipe_fds[0], &extra_kib, sizeof extra_kib) == static_cast<ssize_t>(sizeof extra_kib);
  close(pipe_fds[0]);
  int status = 0;
  if (waitpid(child, &status, 0) != child || !got || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return -1;
  return extra_kib;
}

double share_of(long extra_kib, size_t bytes, const char* what) {
  const double share = static_cast<double>(extra_kib) * 1024 / static_cast<double>(bytes);
  std::printf("%s of %.1f MiB of tables: %.1f MiB of extra memory (%.3f of the tables' bytes)\n", what,
              static_cast<double>(bytes) / (1 << 20), static_cast<double>(extra_kib) / 1024, share);
  return share;
}

TEST(SparseSaveTest, SavingTheTablesTakesFarLessMemoryThanASecondCopy) {
  TempDir dir("sparse-save");
  const ServerOptions o = options(dir.path);
  SparseStore store(sparse_store_options(o, test::small_job_shape()), Mode::kSync, 0, 0);
  fill(store);
  const std::string want = table_bytes(store);
  ASSERT_GT(want.size(), size_t{25} << 20);
  const long extra_kib = extra_memory_kib([&] { store.save_result(false); });
  ASSERT_GE(extra_kib, 0);
  EXPECT_LT(share_of(extra_kib, want.size(), "save"), 0.2);  // a second copy would be 1.0
  EXPECT_TRUE(test::read_file(dir.path + "/embeddings/clicks.shard0-of-1") == want);
}

// A store standing for the dense side of a hybrid job's shard, which holds no slice.
class NoSlice final : public Store {
 public:
  bool init(const Update&, Outcome*, std::string*) override { return false; }
  bool push(const Update&, Outcome*, std::string*) override { return false; }
  size_t parts() const override { return 0; }
  uint64_t version() const override { return 0; }
  std::string check_pull(uint64_t) const override { return "none"; }
  bool ready(size_t, uint64_t) const override { return false; }
  Header params_header(size_t, uint64_t, int) override { return Header(); }
  void save(ShardCheckpoint* out) const override {
    out->total = 8;
    out->total_steps = 10;
  }
  bool resume(const CheckpointStore&, ShardCheckpoint*, std::string*) override { return false; }
};

// A checkpoint's shard file holding the tables is streamed like --save-params' files (issue 50:
// it was encoded whole, the tables copied and then the file: about 3x the tables' bytes at
// peak), and the chief's CRC of it is computed in pieces.
TEST(SparseSaveTest, ACheckpointOfTheTablesTakesFarLessMemoryThanASecondCopy) {
  TempDir dir("sparse-checkpoint-save");
  ServerOptions o = options("");
  o.checkpoint.dir = dir.path;
  o.checkpoint.table_shards = 1;  // hybrid: the file holds the tables alone
  SparseStore store(sparse_store_options(o, test::small_job_shape()), Mode::kSync, 0, 0);
  fill(store);
  const std::string want = table_bytes(store);
  ShardCheckpoints checkpoints(o);
  Header push;
  push.step = 3;
  push.checkpoint = 4;  // the version the tables are at
  checkpoints.mark(push);
  const NoSlice dense;
  const long extra_kib = extra_memory_kib([&] { checkpoints.advanced(dense, &store); });
  ASSERT_GE(extra_kib, 0);
  EXPECT_LT(share_of(extra_kib, want.size(), "checkpoint"), 0.2);  // encoded whole it was about 2

  const std::string path = dir.path + "/v0000000004/shard0of2.ckpt";
  const std::string bytes = test::read_file(path);
  ShardCheckpoint c;
  std::string error;
  ASSERT_TRUE(decode_shard_checkpoint(bytes, &c, &error)) << error;
  ASSERT_EQ(c.tables.size(), 1u);
  EXPECT_TRUE(c.tables[0] == want);
  EXPECT_EQ(c.version, 4u);
  uint64_t size = 0;
  uint32_t crc = 0;
  ASSERT_TRUE(file_crc_of(path, &size, &crc, &error)) << error;
  EXPECT_EQ(size, bytes.size());
  EXPECT_EQ(crc, file_crc(bytes));
  EXPECT_FALSE(file_crc_of(dir.path + "/v0000000004/none.ckpt", &size, &crc, &error));
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;
}

// --resume reads a shard file's tables where they lie, in pieces, and loads their rows as they
// come: the load takes the rows' memory (the arena) and a buffer, not the file's bytes and a
// decoded copy beside them (issue 50: 2 GB of tables per shard needed several times that to resume).
// The control holds the file whole, as resume did, and must cost clearly more.
TEST(SparseSaveTest, ResumingTheTablesTakesTheirMemoryNotASecondCopy) {
  TempDir dir("sparse-checkpoint-resume");
  ServerOptions o = options("");
  o.checkpoint.dir = dir.path;
  o.checkpoint.table_shards = 1;
  // Written by a child: memory this process freed and kept would take the resumed rows unseen.
  const pid_t writer = fork();
  ASSERT_GE(writer, 0);
  if (writer == 0) {
    SparseStore store(sparse_store_options(o, test::small_job_shape()), Mode::kSync, 0, 0);
    fill(store);
    ShardCheckpoints checkpoints(o);
    Header push;
    push.step = 3;
    push.checkpoint = 4;
    checkpoints.mark(push);
    const NoSlice dense;
    checkpoints.advanced(dense, &store);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(writer, &status, 0), writer);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string path = dir.path + "/v0000000004/shard0of2.ckpt";
  // The saved table's bytes, read where they lie (kept: nothing freed before the measurements).
  std::string want;
  {
    uint64_t size = 0;
    uint32_t crc = 0;
    std::string error;
    ShardCheckpoint c;
    ASSERT_TRUE(file_crc_of(path, &size, &crc, &error)) << error;
    ASSERT_TRUE(read_shard_checkpoint_file(path, size, crc, &c, &error)) << error;
    ASSERT_EQ(c.table_files.size(), 1u);
    want.resize(c.table_files[0].bytes);
    ByteReader in(path, c.table_files[0].offset, c.table_files[0].bytes);
    ASSERT_TRUE(in.read(want.data(), want.size())) << in.error();
  }
  ASSERT_GT(want.size(), size_t{25} << 20);
  // What the resumed store holds, to compare with the saved bytes.
  std::string resumed;
  const auto resume = [&](bool whole, bool keep) {
    uint64_t size = 0;
    uint32_t crc = 0;
    std::string error, bytes;
    ShardCheckpoint held;
    if (whole) {  // the control: the file in memory and its tables copied out of it, as resume read it
      ASSERT_TRUE(read_whole_file(path, &bytes, &error)) << error;
      ASSERT_TRUE(decode_shard_checkpoint(bytes, &held, &error)) << error;
    }
    // As CheckpointStore::load reads it: in pieces, each table checked where it lies.
    ShardCheckpoint c;
    ASSERT_TRUE(file_crc_of(path, &size, &crc, &error)) << error;
    ASSERT_TRUE(read_shard_checkpoint_file(path, size, crc, &c, &error)) << error;
    ASSERT_EQ(c.table_files.size(), 1u);
    ByteReader in(c.table_files[0].path, c.table_files[0].offset, c.table_files[0].bytes);
    ASSERT_TRUE(read_saved_table(in, SavedTableVisitor{}, &error)) << error;
    SparseStore store(sparse_store_options(o, test::small_job_shape()), Mode::kSync, 4, 0);
    ASSERT_TRUE(store.resume(c.table_files, &error)) << error;
    if (keep) resumed = table_bytes(store);
  };
  const long streamed_kib = extra_memory_kib([&] { resume(false, false); });
  const long whole_kib = extra_memory_kib([&] { resume(true, false); });
  ASSERT_GE(streamed_kib, 0);
  ASSERT_GE(whole_kib, 0);
  // The rows themselves take about 1.3 times the file's bytes (blocks, bookkeeping, the index):
  // alone in its process the streamed resume takes 1.3 times the tables' bytes, the control 3.3.
  // (Memory earlier tests of this process freed may hold some of the rows unseen: both figures
  // then fall alike, and their difference, the copies held, stays.)
  const double streamed = share_of(streamed_kib, want.size(), "resume, streamed");
  const double whole = share_of(whole_kib, want.size(), "resume, the file held whole");
  EXPECT_LT(streamed, 1.5);
  EXPECT_GT(whole - streamed, 1.5) << "holding the file and its tables costs two copies more";
  resume(false, true);
  EXPECT_TRUE(resumed == want) << "the resumed table differs from the saved one";
}

}  // namespace
}  // namespace pstrain
