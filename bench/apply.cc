// bench/apply: how fast the PS applies optimizer updates, against memcpy bandwidth measured in
// the same run. Rows give GB/s of parameters updated and the ratio to memcpy's GB/s (memcpy reads
// and writes one array; momentum reads 3 and writes 2, Adam reads 4 and writes 3).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "shared/util/numeric.h"
#include "shared/train/optimizer.h"

namespace pstrain::bench {
namespace {

template <typename F>
double best_seconds(int rounds, F&& body) {
  std::vector<double> times;
  for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms caches and pages
    const double start = now_seconds();
    body();
    if (r > 0) times.push_back(now_seconds() - start);
  }
  return median(times);
}

int run(size_t mib, int rounds, bool json) {
  const size_t n = (mib << 20) / sizeof(float);
  const double gb = static_cast<double>(n * sizeof(float)) / 1e9;
  std::vector<float> params(n, 0.5f), grad(n, 1e-3f), copy(n);
  const double memcpy_s = best_seconds(rounds, [&] { std::memcpy(copy.data(), grad.data(), n * sizeof(float)); });
  const double memcpy_gbps = gb / memcpy_s;
  if (json) std::printf("[\n");
  else std::printf("# bench/apply: %zu MiB of parameters, medians of %d rounds; memcpy %.2f GB/s\n", mib, rounds, memcpy_gbps);
  bool first = true;
  const auto row = [&](const std::string& name, double seconds) {
    const double gbps = gb / seconds;
    if (json) {
      std::printf("%s  {\"update\": \"%s\", \"mib\": %zu, \"ms\": %.3f, \"GBps\": %.3f, \"memcpy_GBps\": %.3f, \"ratio\": %.3f}",
                  first ? "" : ",\n", name.c_str(), mib, seconds * 1e3, gbps, memcpy_gbps, gbps / memcpy_gbps);
    } else {
      std::printf("update=%s mib=%zu ms=%.3f GBps=%.3f memcpy_GBps=%.3f ratio=%.3f\n", name.c_str(), mib, seconds * 1e3,
                  gbps, memcpy_gbps, gbps / memcpy_gbps);
    }
    first = false;
  };
  row("accumulate", best_seconds(rounds, [&] { add_into(copy.data(), grad.data(), n); }));
  row("finite-check", best_seconds(rounds, [&] { volatile bool ok = all_finite(grad.data(), n); (void)ok; }));
  for (const OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam}) {
    OptimizerOptions o;
    o.kind = kind;
    o.lr = 1e-6;
    auto optimizer = make_optimizer(o, n);
    uint64_t step = 0;
    row(optimizer_kind_name(kind), best_seconds(rounds, [&] { optimizer->apply(0, n, params.data(), grad.data(), 0.5f, o.lr, step++); }));
  }
  if (json) std::printf("\n]\n");
  return 0;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  size_t mib = 64;
  int rounds = 9;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) pstrain::bench::usage_error("missing value after " + arg);
      return argv[++i];
    };
    if (arg == "--json") json = true;
    else if (arg == "--mib") mib = static_cast<size_t>(pstrain::bench::parse_positive(value(), arg));
    else if (arg == "--rounds") rounds = pstrain::bench::parse_positive(value(), arg);
    else if (arg == "-h" || arg == "--help") {
      std::printf("usage: apply [--mib M] [--rounds R] [--json]   (defaults: --mib 64 --rounds 9)\n");
      return 0;
    } else pstrain::bench::usage_error("unknown flag " + arg);
  }
  return pstrain::bench::run(mib, rounds, json);
}
