// bench/checkpoint_stall: what a checkpoint of a large shard costs training (issue 48). A PS
// shard's embedding tables are filled to --gib GiB, steps of random row updates run, and a
// checkpoint is taken through the shard's own path (ShardCheckpoints: the capture at the step
// boundary, the background write, the `durable` announcement) while the steps go on. Prints the
// longest training stall the checkpoint causes (its capture, and the worst step during the write
// over the steps' median without one), the write's rate, and the disk's own sequential rate
// (a plain write + fsync of --disk-gib GiB in the same directory, measured first).
//
//   bench/checkpoint_stall [--gib 4.2] [--dim 64] [--step-rows 50000] [--dir DIR] [--disk-gib 2]
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "ps/checkpoints.h"
#include "ps/sparse/sparse_store.h"
#include "ps/sparse_service.h"
#include "ps/store.h"

namespace pstrain::bench {
namespace {

// The dense side of the shard: none (the tables are the file), at the version of the tables.
class TablesOnly : public Store {
 public:
  bool init(const Update&, Outcome*, std::string*) override { return false; }
  bool push(const Update&, Outcome*, std::string*) override { return false; }
  size_t parts() const override { return 0; }
  uint64_t version() const override { return version_; }
  std::string check_pull(uint64_t) const override { return "none"; }
  bool ready(size_t, uint64_t) const override { return false; }
  Header params_header(size_t, uint64_t, int) override { return Header(); }
  void save(ShardCheckpoint* out) const override {
    out->total = 0;
    out->total_steps = 1u << 30;
  }
  bool resume(const CheckpointStore&, ShardCheckpoint*, std::string*) override { return false; }
  uint64_t version_ = 0;
};

// Sequential write of `gib` GiB in 1 MiB pieces, then fsync: the disk's rate, GB/s.
double disk_rate(const std::string& dir, double gib) {
  const std::string path = dir + "/disk_probe";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return std::perror(path.c_str()), 0.0;
  std::vector<char> buffer(size_t{1} << 20, 'x');
  const size_t pieces = static_cast<size_t>(gib * 1024);
  const double start = now_seconds();
  for (size_t i = 0; i < pieces; ++i) {
    if (::write(fd, buffer.data(), buffer.size()) != static_cast<ssize_t>(buffer.size())) return 0.0;
  }
  ::fsync(fd);
  const double secs = now_seconds() - start;
  ::close(fd);
  ::unlink(path.c_str());
  return static_cast<double>(pieces) * buffer.size() / secs / 1e9;
}

struct Job {
  ServerOptions o;
  size_t dim = 64, step_rows = 50000;
  uint64_t rows = 0, step = 0;
};

uint64_t id_of(uint64_t i) { return i * 0x9e3779b97f4a7c15ull + 1; }

// One step: `ids` each get a gradient. Returns its seconds.
double push(SparseStore& store, Job& job, const std::vector<uint64_t>& ids) {
  SparseSection s;
  s.table = 1;
  s.dim = static_cast<uint32_t>(job.dim);
  s.ids = ids;
  s.values.assign(ids.size() * job.dim, 0.001f * static_cast<float>(job.step % 7));
  Header h;
  h.op = Op::kSparsePush;
  h.step = job.step++;
  h.samples = 1;
  bool applied = false;
  std::string error;
  const double start = now_seconds();
  if (!store.push(0, false, h, {s}, &applied, &error) || !applied) {
    std::fprintf(stderr, "push failed: %s\n", error.c_str());
    std::exit(1);
  }
  return now_seconds() - start;
}

std::vector<uint64_t> random_ids(Job& job, std::mt19937_64& rng) {
  std::vector<uint64_t> ids;
  std::uniform_int_distribution<uint64_t> pick(0, job.rows - 1);
  for (size_t i = 0; i < job.step_rows; ++i) ids.push_back(id_of(pick(rng)));
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

int run(double gib, Job& job, const std::string& dir, double disk_gib) {
  const double disk = disk_rate(dir, disk_gib);
  std::printf("# disk: sequential write + fsync of %.1f GiB: %.2f GB/s\n", disk_gib, disk);
  const size_t row_bytes = job.dim * 2 * sizeof(float) + 24;  // adagrad: weights and one slot
  job.rows = static_cast<uint64_t>(gib * (1ull << 30) / row_bytes);
  JobShape shape;
  shape.total_steps = 1u << 30;
  shape.global_batch = 1;
  SparseStore store(sparse_store_options(job.o, shape), Mode::kSync, 0, 0);
  const double fill_start = now_seconds();
  for (uint64_t first = 0; first < job.rows; first += 500000) {
    std::vector<uint64_t> ids;
    for (uint64_t i = first; i < std::min<uint64_t>(job.rows, first + 500000); ++i) ids.push_back(id_of(i));
    push(store, job, ids);
  }
  std::printf("# tables: %llu rows of dim %zu (adagrad), %.2f GiB of rows, filled in %.1f s\n",
              static_cast<unsigned long long>(job.rows), job.dim,
              static_cast<double>(job.rows * row_bytes) / (1ull << 30), now_seconds() - fill_start);
  std::mt19937_64 rng(7);
  std::vector<double> plain;
  for (int i = 0; i < 10; ++i) plain.push_back(push(store, job, random_ids(job, rng)));
  const double median_step = median(plain);

  ShardCheckpoints checkpoints(job.o);
  TablesOnly dense;
  dense.version_ = job.step;
  Header mark;
  mark.step = job.step - 1;
  mark.checkpoint = job.step;
  checkpoints.mark(mark);
  const double start = now_seconds();
  checkpoints.advanced(dense, &store);
  const double capture = now_seconds() - start;
  const uint64_t version = job.step;
  double worst = 0;
  int steps = 0;
  Header params;
  std::string first_steps;
  for (;; ++steps) {
    checkpoints.stamp(&params);
    if (params.durable == version) break;
    const double t = push(store, job, random_ids(job, rng));
    worst = std::max(worst, t);
    if (steps < 5) first_steps += " " + std::to_string(static_cast<int>(t * 1e3));
  }
  const double write_secs = now_seconds() - start;
  // The same write with training idle: the writer's own rate, without the apply beside it.
  dense.version_ = job.step;
  mark.step = job.step - 1;
  mark.checkpoint = job.step;
  checkpoints.mark(mark);
  const double idle_start = now_seconds();
  checkpoints.advanced(dense, &store);
  checkpoints.finish();
  const double idle_secs = now_seconds() - idle_start;
  char file[64];
  std::snprintf(file, sizeof file, "/v%010llu/shard0of1.ckpt", static_cast<unsigned long long>(version));
  FILE* f = std::fopen((dir + file).c_str(), "rb");
  std::fseek(f, 0, SEEK_END);
  const double bytes = static_cast<double>(std::ftell(f));
  std::fclose(f);
  std::printf("# steps of %zu random rows: median %.1f ms without a checkpoint\n", job.step_rows, median_step * 1e3);
  std::printf("# checkpoint: capture %.1f ms; %d steps during the write, the slowest %.1f ms (%.1f ms over the median); "
              "the first ms:%s\n",
              capture * 1e3, steps, worst * 1e3, std::max(0.0, worst - median_step) * 1e3, first_steps.c_str());
  std::printf("longest stall: %.1f ms\n", std::max(capture, worst - median_step) * 1e3);
  std::printf("write: %.2f GB in %.2f s: %.2f GB/s while training (disk %.2f GB/s); with training idle %.2f s: %.2f GB/s\n",
              bytes / 1e9, write_secs, bytes / write_secs / 1e9, disk, idle_secs, bytes / idle_secs / 1e9);
  return 0;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  double gib = 4.2, disk_gib = 2;
  pstrain::bench::Job job;
  std::string dir = "/tmp/pstrain_checkpoint_stall";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--gib") gib = std::stod(argv[i + 1]);
    else if (a == "--dim") job.dim = std::stoul(argv[i + 1]);
    else if (a == "--step-rows") job.step_rows = std::stoul(argv[i + 1]);
    else if (a == "--dir") dir = argv[i + 1];
    else if (a == "--disk-gib") disk_gib = std::stod(argv[i + 1]);
    else return std::fprintf(stderr, "unknown flag %s\n", a.c_str()), 2;
  }
  ::mkdir(dir.c_str(), 0755);
  pstrain::TableOptions t;
  t.name = "ids";
  t.id = 1;
  t.dim = job.dim;
  t.seed = 1;
  pstrain::table_optimizer_of("adagrad", &t.optimizer.kind);
  job.o.num_workers = 1;
  job.o.tables = {t};
  job.o.table_lr = 0.05;
  job.o.checkpoint.dir = dir;
  return pstrain::bench::run(gib, job, dir, disk_gib);
}
