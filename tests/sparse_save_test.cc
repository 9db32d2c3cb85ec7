// --save-params' tables are streamed from the PS's arena to the file (docs/sparse.md, "Memory"):
// the save's extra memory is a small part of the tables', not a second copy of them (issue 50:
// 4.2 GB peak for 1.9 GB of tables), and the file holds the table's exact bytes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ps/sparse/sparse_store.h"
#include "shared/util/file_util.h"
#include "sparse_test_util.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"

namespace pstrain {
namespace {

using sparse_test::kTable;

constexpr size_t kDim = 64;

TEST(SparseSaveTest, SavingTheTablesTakesFarLessMemoryThanASecondCopy) {
  TempDir dir("sparse-save");
  ServerOptions o;
  o.num_workers = 1;
  o.tables = {sparse_test::table("sgd", kDim)};
  o.table_lr = 0.5;
  o.optimizer.lr = 0.5;
  o.save_params = dir.path;
  JobShape job;
  job.total = 8;
  job.total_steps = 10;
  job.global_batch = 4;
  SparseStore store(o, ModeCode::kSync, job, 0, 0);
  constexpr size_t kRowsPerStep = 25000;
  for (uint64_t step = 0; step < 4; ++step) {  // 100,000 rows of 64 floats: about 28 MB saved
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
  std::string want;
  {
    std::vector<std::string> tables;
    store.save(&tables);
    want = std::move(tables.at(0));
  }
  ASSERT_GT(want.size(), size_t{25} << 20);
  // In a child: its peak resident memory starts at what it holds now (fork), so the save's
  // extra memory is its peak less its resident memory before the save.
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const long before = rss_kib();
    store.save_result(false);
    const long extra = peak_rss_kib() - before;
    const bool wrote = write(pipe_fds[1], &extra, sizeof extra) == static_cast<ssize_t>(sizeof extra);
    _exit(wrote ? 0 : 1);
  }
  close(pipe_fds[1]);
  long extra_kib = -1;
  const bool got = read(pipe_fds[0], &extra_kib, sizeof extra_kib) == static_cast<ssize_t>(sizeof extra_kib);
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(got && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const double share = static_cast<double>(extra_kib) * 1024 / static_cast<double>(want.size());
  std::printf("save of %.1f MiB of tables: %.1f MiB of extra memory (%.3f of the tables' bytes)\n",
              static_cast<double>(want.size()) / (1 << 20), static_cast<double>(extra_kib) / 1024, share);
  EXPECT_LT(share, 0.2);  // a second copy would be 1.0
  EXPECT_TRUE(test::read_file(dir.path + "/embeddings/clicks.shard0-of-1") == want);
}

}  // namespace
}  // namespace pstrain
