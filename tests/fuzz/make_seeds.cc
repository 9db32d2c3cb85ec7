// Writes the seed corpus of the fuzz targets: make_seeds DIR creates DIR/{protocol_fuzz,
// ring_fuzz,ps_fuzz,checkpoint_fuzz,sparse_fuzz}/seed-*. The committed corpus (tests/fuzz/corpus/) was made with it; rerun
// it after a change of the wire formats.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "shared/checkpoint/checkpoint.h"
#include "shared/checkpoint/table_file.h"
#include "shared/wire/protocol.h"
#include "shared/wire/sparse_wire.h"
#include "worker/collective/ring_wire.h"

namespace {

void write(const std::filesystem::path& dir, int n, const std::string& bytes) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / ("seed-" + std::to_string(n)), std::ios::binary) << bytes;
}

std::string be(uint64_t v, int bytes) {  // ps_fuzz reads numbers big-endian
  std::string s;
  for (int i = bytes - 1; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// One structured ps_fuzz message (see ps_fuzz.cc for the layout).
std::string ps_message(int op, char route, int sender, int step, int offset, int length, int samples,
                       int floats_of_one) {
  std::string m = be(0, 1) + be(static_cast<uint64_t>(op - 1), 1) + be(static_cast<uint64_t>(route - 'a'), 1) +
                  be(1, 1) + be(static_cast<uint64_t>(sender), 1) + be(static_cast<uint64_t>(step), 1) +
                  be(static_cast<uint64_t>(offset), 2) + be(static_cast<uint64_t>(length), 2) + be(1, 1) +
                  be(2, 1) + be(static_cast<uint64_t>(samples), 1);
  for (int i = 0; i < floats_of_one; ++i) m += std::string("\x00\x00\x80\x3f", 4);  // 1.0f
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds DIR\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  int n = 0;
  for (int op = 1; op <= 8; ++op) {
    pstrain::Header h;
    h.op = static_cast<pstrain::Op>(op);
    h.step = 3;
    h.offset = 256;
    h.length = 256;
    h.total = 700;
    h.num_workers = 2;
    h.samples = 8;
    h.message = op == 8 ? "why" : "";
    write(dir / "protocol_fuzz", n++, pstrain::encode_header(h));
  }
  for (pstrain::Op op : {pstrain::Op::kStats, pstrain::Op::kStatsSum}) {  // batch norm's sums: 3 doubles
    pstrain::Header h;
    h.op = op;
    h.step = 3;
    h.offset = 1;
    h.length = 6;
    write(dir / "protocol_fuzz", n++, pstrain::encode_header(h));
  }
  n = 0;
  for (int op = 1; op <= 8; ++op) {
    pstrain::RingHeader h;
    h.op = static_cast<pstrain::RingOp>(op);
    h.world = 3;
    h.seq = 1;
    h.length = 16;
    h.total = 48;
    const pstrain::Frame m = pstrain::encode_ring_header(h);
    write(dir / "ring_fuzz", n++, m.to_string());
  }
  // A PS (shard 1 of 2 of a 700-float model: [350, +350) in chunks of 256) through a whole step:
  // both workers say HELLO, the chief initialises both chunks, both push step 0, pull, are done.
  std::string job;
  job += ps_message(1, 'a', 0, 0, 0, 0, 0, 0) + ps_message(1, 'b', 1, 0, 0, 0, 0, 0);
  job += ps_message(3, 'a', 0, 0, 350, 256, 0, 256) + ps_message(3, 'a', 0, 0, 606, 94, 0, 94);
  for (char w : {'a', 'b'}) {
    job += ps_message(4, w, w - 'a', 0, 350, 256, 8, 256) + ps_message(4, w, w - 'a', 0, 606, 94, 8, 94);
    job += ps_message(5, w, w - 'a', 1, 0, 0, 0, 0);
  }
  write(dir / "ps_fuzz", 0, job);
  job += ps_message(7, 'a', 0, 0, 0, 0, 0, 0) + ps_message(7, 'b', 1, 0, 0, 0, 0, 0);
  write(dir / "ps_fuzz", 1, job);
  // Checkpoint files: a shard file ('S' + bytes) per optimizer, and a manifest.
  n = 0;
  for (const char* optimizer : {"sgd", "momentum", "adam"}) {
    pstrain::ShardCheckpoint c;
    c.shard = 1;
    c.num_shards = 2;
    c.version = 40;
    c.total = 12;
    c.total_steps = 100;
    c.offset = 6;
    c.optimizer = optimizer;
    c.values = {1, 2, 3, 4, 5, 6};
    for (size_t k = 0; k < std::string(optimizer).size() / 4; ++k) c.slots.push_back({0.5f, 0, 0, 0, 0, -1});
    write(dir / "checkpoint_fuzz", n++, "S" + pstrain::encode_shard_checkpoint(c));
  }
  pstrain::CheckpointManifest m;
  m.version = 40;
  m.total = 12;
  m.total_steps = 100;
  m.shards = {{"shard0of2.ckpt", 120, 7}, {"shard1of2.ckpt", 120, 9}};
  m.layout = "layer0.weight 0 2x3\nlayer0.bias 6 6\n";
  write(dir / "checkpoint_fuzz", n++, "M" + pstrain::encode_manifest(m));
  {  // a shard file of format 2: with embedding tables (their bytes are opaque to this decoder)
    pstrain::ShardCheckpoint c;
    c.shard = 0;
    c.num_shards = 1;
    c.version = 7;
    c.total = 4;
    c.total_steps = 10;
    c.optimizer = "sgd";
    c.values = {1, 2, 3, 4};
    c.tables = {std::string("PSEMBTBL\x01\0\0\0table-0", 19), std::string("PSEMBTBL\x01\0\0\0\x01\0\0\0", 16)};
    write(dir / "checkpoint_fuzz", n++, "S" + pstrain::encode_shard_checkpoint(c));
  }
  // Saved embedding tables ('T' + bytes), one per optimizer (its slots), with three rows and
  // two sightings between and after them.
  const std::pair<const char*, uint32_t> optimizers[] = {{"sgd", 0}, {"adagrad", 1}, {"adam", 2}, {"ftrl", 2}};
  for (const auto& optimizer : optimizers) {
    pstrain::SavedTable t;
    t.header.table = 1;
    t.header.dim = 2;
    t.header.slots = optimizer.second;
    t.header.name = "C1";
    t.header.optimizer = optimizer.first;
    t.rows = {{3, 4, 2}, {uint64_t{1} << 40, 5, 1}, {~uint64_t{0}, 5, 5}};
    for (size_t i = 0; i < t.rows.size() * 2 * (1 + t.header.slots); ++i) {
      t.values.push_back(0.25f * static_cast<float>(i) - 1);
    }
    t.sightings = {{7, 1, 5}, {uint64_t{1} << 41, 2, 4}};
    write(dir / "checkpoint_fuzz", n++, "T" + pstrain::encode_saved_table(t));
  }
  // Sparse bodies (a byte picking the op, 0 pull, 1 rows, 2 push; then the body): a pull of two
  // tables, its rows, a push of both, and an empty pull.
  pstrain::SparseSection clicks, ads;
  clicks.table = 1;
  clicks.ids = {3, 5, 7};
  ads.table = 2;
  ads.ids = {uint64_t{1} << 40};
  const std::vector<pstrain::SparseSection> pull = {clicks, ads};
  clicks.dim = 4;
  ads.dim = 2;
  clicks.values.assign(12, 0.5f);
  ads.values = {-1, 2};
  const std::vector<pstrain::SparseSection> push = {clicks, ads};
  clicks.ids.clear();
  ads.ids.clear();
  const std::vector<pstrain::SparseSection> rows = {clicks, ads};
  write(dir / "sparse_fuzz", 0, '\0' + pstrain::encode_sparse_body(pstrain::Op::kSparsePull, pull));
  write(dir / "sparse_fuzz", 1, '\1' + pstrain::encode_sparse_body(pstrain::Op::kSparseRows, rows));
  write(dir / "sparse_fuzz", 2, '\2' + pstrain::encode_sparse_body(pstrain::Op::kSparsePush, push));
  write(dir / "sparse_fuzz", 3, '\0' + pstrain::encode_sparse_body(pstrain::Op::kSparsePull, {}));
  return 0;
}
