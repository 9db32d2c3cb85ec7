// SparseStore's pushes in parts at the store itself (docs/wire_protocol.md, "Sparse tables"):
// what a replacement's part 0 does to its predecessor's parts, and what a backup-worker step
// does to a push whose parts are under way. The jobs' tests (CtrJobTest.*Parts*) cannot make a
// kill land between two parts; these decide the order.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ps/sparse/sparse_store.h"
#include "ps/sparse_service.h"
#include "sparse_test_util.h"
#include "test_util/job_shape.h"

namespace pstrain {
namespace {

using sparse_test::kTable;

constexpr size_t kDim = 2;
constexpr int kWorkers = 2;

ServerOptions store_options(int backup_workers) {
  ServerOptions o;
  o.num_workers = kWorkers;
  o.backup_workers = backup_workers;
  o.tables = {sparse_test::table("sgd", kDim)};
  o.table_lr = 0.5;
  o.optimizer.lr = 0.5;
  return o;
}


// A store of one shard, 2 workers, one SGD table of 2 floats.
struct Shard {
  explicit Shard(int backup_workers = 0)
      : options(store_options(backup_workers)),
        store(sparse_store_options(options, test::small_job_shape()), Mode::kSync, 0, 0) {}
  const ServerOptions options;
  SparseStore store;
};

Header part_header(uint64_t step, uint64_t part, uint64_t parts) {
  Header h;
  h.op = Op::kSparsePush;
  h.step = step;
  h.samples = 2;
  h.part = part;
  h.parts = parts;
  return h;
}

// A section of kTable: these IDs, each gradient row filled with `value`.
std::vector<SparseSection> grads(const std::vector<uint64_t>& ids, float value) {
  SparseSection s;
  s.table = kTable;
  s.dim = kDim;
  s.ids = ids;
  s.values.assign(ids.size() * kDim, value);
  return {s};
}

void push_ok(SparseStore& store, int worker, bool rejoined, const Header& h, std::vector<SparseSection> sections,
             bool* applied = nullptr) {
  bool done = false;
  std::string error;
  ASSERT_TRUE(store.push(worker, rejoined, h, std::move(sections), &done, &error)) << error;
  if (applied != nullptr) *applied = done;
}

std::vector<float> rows(const SparseStore& store, const std::vector<uint64_t>& ids) {
  SparseSection pull;
  pull.table = kTable;
  pull.ids = ids;
  std::vector<SparseSection> out;
  std::string error;
  EXPECT_TRUE(store.rows({pull}, store.version(), &out, &error)) << error;
  return out.empty() ? std::vector<float>{} : out[0].values;
}

// Worker 0 sends part 0 of 2 of step 0 and is replaced: its replacement's part 0 starts the push
// over (the predecessor's part is dropped, so its ID 5 is not in the step), and the step equals
// one where worker 0 only ever sent the replacement's push.
TEST(SparsePartsTest, AReplacementsPartZeroDropsItsPredecessorsParts) {
  Shard shard, reference, fresh;
  SparseStore& store = shard.store;
  push_ok(store, 0, false, part_header(0, 0, 2), grads({5, 6}, 1.0f));
  EXPECT_TRUE(store.in_parts(0));
  push_ok(store, 0, true, part_header(0, 0, 2), grads({6}, 0.5f));
  push_ok(store, 0, true, part_header(0, 1, 2), grads({7}, 0.25f));
  EXPECT_FALSE(store.in_parts(0));
  bool applied = false;
  push_ok(store, 1, false, part_header(0, 0, 1), grads({6}, 2.0f), &applied);
  EXPECT_TRUE(applied);

  SparseStore& want = reference.store;
  push_ok(want, 0, false, part_header(0, 0, 1), [] {
    std::vector<SparseSection> s = grads({6, 7}, 0.5f);
    s[0].values[2] = s[0].values[3] = 0.25f;  // ID 7's row
    return s;
  }());
  push_ok(want, 1, false, part_header(0, 0, 1), grads({6}, 2.0f));
  ASSERT_EQ(want.version(), 1u);
  EXPECT_EQ(store.version(), 1u);
  EXPECT_EQ(rows(store, {5, 6, 7}), rows(want, {5, 6, 7}));
  EXPECT_NE(rows(store, {6}), rows(fresh.store, {6})) << "the step moved nothing";
}

// With a backup worker the step is applied with worker 0 alone while worker 1's push is in
// parts: that push is dropped and counted once, its next part is late (accepted, dropped), and a
// part of the next step starts a new push.
TEST(SparsePartsTest, ABackupStepDropsAPushWhosePartsAreUnderWay) {
  Shard shard(1), fresh(1);
  SparseStore& store = shard.store;
  push_ok(store, 0, false, part_header(0, 0, 1), grads({6}, 1.0f));
  push_ok(store, 1, false, part_header(0, 0, 2), grads({5}, 3.0f));
  ASSERT_TRUE(store.in_parts(1));
  EXPECT_FALSE(store.pushed(1));
  store.apply_step({true, false}, 2);
  EXPECT_EQ(store.version(), 1u);
  EXPECT_FALSE(store.in_parts(1));
  const std::string dropped = "late sparse pushes dropped: 1";
  EXPECT_NE(store.counters_text().find(dropped), std::string::npos) << store.counters_text();
  push_ok(store, 1, false, part_header(0, 1, 2), grads({7}, 3.0f));  // its last part, late
  EXPECT_NE(store.counters_text().find(dropped), std::string::npos) << store.counters_text();
  EXPECT_EQ(rows(store, {5, 7}), rows(fresh.store, {5, 7})) << "a dropped push's rows moved";

  push_ok(store, 1, false, part_header(1, 0, 2), grads({5}, 1.0f));  // step 1: a new push
  EXPECT_TRUE(store.in_parts(1));
  bool applied = false;
  std::string error;
  EXPECT_FALSE(store.push(1, false, part_header(1, 0, 2), grads({7}, 1.0f), &applied, &error));
  EXPECT_EQ(error, "SPARSE_PUSH of step 1 part 0 of 2: that part came already");
}

}  // namespace
}  // namespace pstrain
