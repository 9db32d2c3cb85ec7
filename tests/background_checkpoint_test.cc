// Checkpoints written in the background (docs/checkpoints.md, "Background writes"; issue 48): a
// table's rows captured at the step boundary are written as they were while the apply goes on
// changing them (copy-on-write per row: ps/sparse/row_snapshot.h), the shard announces the
// version durable only once its file is on disk, the chief writes the manifest only then, and a
// write that fails in the background stops the job at the next step naming the file, the version
// and the errno text.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include "ps/checkpoints.h"
#include "ps/sparse_service.h"
#include "ps/sparse/embedding_table.h"
#include "ps/sparse/sparse_store.h"
#include "ps/store.h"
#include "shared/checkpoint/checkpoint.h"
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "sparse_test_util.h"
#include "test_util/idx_writer.h"
#include "test_util/job_shape.h"
#include "test_util/process.h"
#include "worker/train/checkpoints.h"

namespace pstrain {
namespace {

constexpr size_t kDim = 8;

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

TableOptions table_options() {
  TableOptions t = sparse_test::table("adagrad", kDim);
  t.expiry_steps = 4;  // rows released and their slots reused while the snapshot is written
  t.block_rows = 16;   // many blocks: a row's block and place matter
  return t;
}

// Step `step` of a table: the IDs [first, first + n) (spread by a multiplier) each get a gradient.
void apply_step(EmbeddingTable& t, uint64_t step, uint64_t first, size_t n) {
  std::vector<uint64_t> ids;
  for (uint64_t i = first; i < first + n; ++i) ids.push_back(i * 0x9e3779b97f4a7c15ull + 1);
  std::vector<uint32_t> rows;
  t.find_rows(ids.data(), ids.size(), &rows);
  std::vector<float> g(ids.size() * kDim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>((i * 7 + step) % 13) - 0.05f;
  t.apply(step, ids.data(), rows.data(), ids.size(), g.data(), 0.5f, 0.1);
  t.expire(step);
}

// 600 rows, then steps that update some of them, create new ones, expire old ones (their rows
// released, then reused by new IDs): every kind of write the apply makes to a captured row.
void change_everything(EmbeddingTable& t, uint64_t from_step) {
  for (uint64_t s = from_step; s < from_step + 8; ++s) apply_step(t, s, 300 + 40 * (s - from_step), 200);
}

TEST(BackgroundCheckpointTest, ASnapshotWritesTheRowsAsCapturedWhileTheyChange) {
  EmbeddingTable t(table_options());
  for (uint64_t s = 0; s < 3; ++s) apply_step(t, s, 0, 600);
  std::string want;
  t.save(&want);
  TableSource captured = t.snapshot_source();
  change_everything(t, 3);
  std::string now;
  t.save(&now);
  ASSERT_NE(now, want);  // the changes reached the rows the snapshot holds

  std::string got;
  StringSink sink(&got);
  captured.write(&sink);
  EXPECT_EQ(got.size(), captured.bytes);
  EXPECT_TRUE(got == want) << "the snapshot's bytes differ from the table's at the capture";
  // Done: the table goes on (no copies kept, nothing changed by the write).
  change_everything(t, 11);
  std::string after;
  t.save(&after);
  EXPECT_NE(after, now);
}

// The writer on its own thread while the apply changes the rows (the PS's two threads; a race
// here is ThreadSanitizer's to find): the file's bytes are still the capture's.
TEST(BackgroundCheckpointTest, AWriterOnAnotherThreadWritesTheCaptureWhileTheApplyGoesOn) {
  for (int round = 0; round < 5; ++round) {
    EmbeddingTable t(table_options());
    for (uint64_t s = 0; s < 3; ++s) apply_step(t, s, 0, 600);
    std::string want;
    t.save(&want);
    TableSource captured = t.snapshot_source();
    std::string got;
    std::thread writer([&] {
      StringSink sink(&got);
      captured.write(&sink);
    });
    change_everything(t, 3);
    writer.join();
    EXPECT_TRUE(got == want) << "round " << round;
  }
}

// A dense store at a version, of no slice (the tables are the file's content here).
class AtVersion : public Store {
 public:
  explicit AtVersion(uint64_t v) : v_(v) {}
  bool init(const Update&, Outcome*, std::string*) override { return false; }
  bool push(const Update&, Outcome*, std::string*) override { return false; }
  size_t parts() const override { return 0; }
  uint64_t version() const override { return v_; }
  std::string check_pull(uint64_t) const override { return "none"; }
  bool ready(size_t, uint64_t) const override { return false; }
  Header params_header(size_t, uint64_t, int) override { return Header(); }
  void save(ShardCheckpoint* out) const override {
    out->total = 8;
    out->total_steps = 10;
  }
  bool resume(const CheckpointStore&, ShardCheckpoint*, std::string*) override { return false; }

 private:
  uint64_t v_;
};

ServerOptions shard_options(const std::string& dir, OnError errors = OnError::kStop) {
  ServerOptions o;
  o.num_workers = 1;
  o.tables = {sparse_test::table("sgd", kDim)};
  o.table_lr = 0.5;
  o.optimizer.lr = 0.5;
  o.checkpoint.dir = dir;
  o.checkpoint.errors = errors;
  return o;
}

// The store's tables at version `steps` (one worker's pushes).
void push_steps(SparseStore& store, uint64_t from, uint64_t to) {
  for (uint64_t step = from; step < to; ++step) {
    SparseSection s;
    s.table = sparse_test::kTable;
    s.dim = kDim;
    for (uint64_t i = 0; i < 500; ++i) s.ids.push_back((i + 100 * step) * 0x9e3779b97f4a7c15ull + 1);
    s.values.assign(s.ids.size() * kDim, 0.25f + static_cast<float>(step));
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

void mark(ShardCheckpoints& checkpoints, uint64_t version) {
  Header push;
  push.step = version - 1;
  push.checkpoint = version;
  checkpoints.mark(push);
}

// The shard's file of version 4 is written while the tables go on to version 6; PARAMS announce
// version 4 durable only once the writer is done.
TEST(BackgroundCheckpointTest, TheShardAnnouncesTheVersionDurableOnlyOnceItsFileIsWritten) {
  TempDir dir("background-checkpoint");
  const ServerOptions o = shard_options(dir.path);
  SparseStore store(sparse_store_options(o, test::small_job_shape()), Mode::kSync, 0, 0);
  push_steps(store, 0, 4);
  std::vector<std::string> want;
  store.save(&want);
  ShardCheckpoints checkpoints(o);
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  checkpoints.set_write_gate([opened] { opened.wait(); });
  mark(checkpoints, 4);
  checkpoints.advanced(AtVersion(4), &store);  // captured; the writer waits at the gate
  Header params;
  params.step = 4;
  checkpoints.stamp(&params);
  EXPECT_EQ(params.durable, 0u);
  push_steps(store, 4, 6);  // the apply goes on meanwhile
  open.set_value();
  checkpoints.finish();
  params.step = 6;
  checkpoints.stamp(&params);
  EXPECT_EQ(params.durable, 4u);

  ShardCheckpoint c;
  std::string error;
  ASSERT_TRUE(decode_shard_checkpoint(test::read_file(dir.path + "/v0000000004/shard0of1.ckpt"), &c, &error)) << error;
  ASSERT_EQ(c.tables.size(), 1u);
  EXPECT_TRUE(c.tables[0] == want.at(0)) << "the file holds the tables of version 4";
}

// A background write that fails stops the job at the shard's next step with the file, the
// version and the errno text (--checkpoint-errors stop); with warn it is logged and never
// announced durable.
TEST(BackgroundCheckpointTest, ABackgroundFailureStopsTheJobAtTheNextStep) {
  TempDir dir("background-checkpoint-fails");
  const std::string not_a_dir = dir.path + "/file";
  write_file_durably(not_a_dir, "x");
  for (OnError errors : {OnError::kStop, OnError::kWarn}) {
    const ServerOptions o = shard_options(not_a_dir, errors);
    SparseStore store(sparse_store_options(o, test::small_job_shape()), Mode::kSync, 0, 0);
    push_steps(store, 0, 4);
    ShardCheckpoints checkpoints(o);
    mark(checkpoints, 4);
    checkpoints.advanced(AtVersion(4), &store);  // started; fails in the background
    checkpoints.finish();
    if (errors == OnError::kStop) {
      try {
        checkpoints.advanced(AtVersion(5), &store);
        ADD_FAILURE() << "the next step went on";
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("checkpoint of version 4 failed"), std::string::npos) << what;
        EXPECT_NE(what.find(not_a_dir + "/v0000000004"), std::string::npos) << what;
        EXPECT_NE(what.find("Not a directory"), std::string::npos) << what;
      }
    } else {
      EXPECT_NO_THROW(checkpoints.advanced(AtVersion(5), &store));
      Header params;
      params.step = 5;
      checkpoints.stamp(&params);
      EXPECT_EQ(params.durable, 0u);
    }
  }
}

// The chief writes a version's manifest once every shard announced it durable, not when the
// version arrives.
TEST(BackgroundCheckpointTest, TheChiefWritesTheManifestOnceEveryShardAnnouncedTheVersion) {
  TempDir dir("background-checkpoint-chief");
  CheckpointOptions o;
  o.dir = dir.path;
  Layout layout;
  layout.add("w", {8});
  ShardCheckpoint c;
  c.version = 4;
  c.num_shards = 1;
  c.total = 8;
  c.total_steps = 10;
  c.values.assign(8, 1.0f);
  c.optimizer = "sgd";
  CheckpointStore(o, "ps0").write(c);
  ChiefCheckpoints chief(o, /*chief=*/true, /*shards=*/1, layout, ModelDescription(), 10, nullptr);
  const std::string manifest = dir.path + "/v0000000004/MANIFEST";
  chief.step_done(/*marked=*/4, /*durable=*/0);
  EXPECT_FALSE(exists(manifest)) << "a manifest before the shard's file is durable";
  chief.step_done(0, 3);
  EXPECT_FALSE(exists(manifest));
  chief.step_done(0, 4);
  EXPECT_TRUE(exists(manifest));
}

}  // namespace
}  // namespace pstrain
