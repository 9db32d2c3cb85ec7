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
#include "shared/util/file_util.h"
#include "sparse_test_util.h"
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

JobShape job_shape() {
  JobShape job;
  job.total = 8;
  job.total_steps = 10;
  job.global_batch = 4;
  return job;
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
  SparseStore store(sparse_store_options(o, job_shape()), ModeCode::kSync, 0, 0);
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
  SparseStore store(sparse_store_options(o, job_shape()), ModeCode::kSync, 0, 0);
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

}  // namespace
}  // namespace pstrain
