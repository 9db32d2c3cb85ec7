// The CPU backend's products (worker/cpu/cpu_gemm.h): oneDNN at the CPU's own instruction set,
// never a generic fallback on a CPU with AVX2; the worker's first lines name the kernels and warn
// when something holds them below the CPU; every transpose against a plain double-precision loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "shared/util/error.h"
#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"
#include "test_util/random.h"
#include "worker/backend/backend.h"
#include "worker/cpu/cpu_gemm.h"

namespace pstrain {
namespace {

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

TEST(CpuKernelsTest, NoGenericFallbackOnACpuWithAvx2) {
  const CpuKernels k = cpu_kernels();
  std::printf("CPU kernels: %s (AVX2 on this CPU: %s)\n", k.text().c_str(), cpu_has_avx2() ? "yes" : "no");
  EXPECT_EQ(k.library.rfind("oneDNN ", 0), 0u) << k.text();
  EXPECT_FALSE(k.generic) << k.text();
  if (cpu_has_avx2()) {
    EXPECT_TRUE(k.isa.find("avx2") != std::string::npos || k.isa.find("avx512") != std::string::npos) << k.text();
  }
  // The worker's lines name the device by the backend's name: the kernels are in it.
  EXPECT_EQ(make_cpu_backend(1)->name(), "cpu (" + k.text() + ")");
  // And pstrain-worker --kernels prints the same, with no job flags (what the benchmarks run).
  TempDir dir("cpu-kernels-flag");
  const pid_t pid = test::spawn({PSTRAIN_WORKER_BIN, "--kernels"}, dir.path + "/out.txt");
  EXPECT_TRUE(test::wait_for(pid, 30).ok());
  EXPECT_EQ(test::read_file(dir.path + "/out.txt"), "pstrain-worker: CPU kernels: " + k.text() + "\n");
}

// op(A) m x k times op(B) k x n plus beta C, for every transpose, odd sizes and padded leading
// dimensions, against the same sum in double.
TEST(CpuKernelsTest, EveryTransposeMatchesAPlainLoop) {
  const int m = 13, n = 7, k = 29, pad = 3;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
      const auto a = test::random_floats(static_cast<size_t>(ta ? k : m) * lda, 1);
      const auto b = test::random_floats(static_cast<size_t>(tb ? n : k) * ldb, 2);
      const auto c0 = test::random_floats(static_cast<size_t>(m) * ldc, 3);
      std::vector<float> c = c0;
      cpu_sgemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c.data(), ldc);
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double sum = 0;
          for (int p = 0; p < k; ++p) {
            sum += static_cast<double>(ta ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p]) *
                   (tb ? b[static_cast<size_t>(j) * ldb + p] : b[static_cast<size_t>(p) * ldb + j]);
          }
          const size_t at = static_cast<size_t>(i) * ldc + j;
          EXPECT_NEAR(c[at], 0.5 * sum + 2.0 * c0[at], 1e-5 * (1 + std::fabs(sum))) << ta << tb << " " << i << "," << j;
        }
        for (int j = n; j < ldc; ++j) {  // the padding is left alone
          const size_t at = static_cast<size_t>(i) * ldc + j;
          EXPECT_EQ(c[at], c0[at]) << ta << tb << " padding " << i << "," << j;
        }
      }
    }
  }
}

TEST(CpuKernelsTest, ARefusedCallIsAnErrorNamingTheShape) {
  std::vector<float> a(64), b(64), c(64);
  try {
    cpu_sgemm(false, false, 4, 4, 8, 1.0f, a.data(), 2, b.data(), 4, 0.0f, c.data(), 4);  // lda 2 < k 8
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("oneDNN sgemm (NN, m 4, n 4, k 8) failed"), std::string::npos) << e.what();
  }
}

// What a user sees when oneDNN is held below the CPU (here by ONEDNN_MAX_CPU_ISA, as a stray
// environment would): a warning naming the kernels, and the job still trains.
TEST(CpuKernelsTest, AWorkerWarnsWhenItsKernelsAreGeneric) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU has no AVX2: SSE4.1 kernels are its own, not a fallback";
  TempDir dir("cpu-kernels");
  write_synthetic_mnist(dir.path, "train", 64, 8, 8, 1, false);
  write_synthetic_mnist(dir.path, "t10k", 16, 8, 8, 2, false);
  const std::string log = dir.path + "/w0.log";
  const pid_t pid = test::spawn({PSTRAIN_WORKER_BIN, "--mode", "allreduce", "--coordinator", "127.0.0.1:0",
                                 "--num-workers", "1", "--index", "0", "--data-dir", dir.path, "--cache-dir", dir.path,
                                 "--hidden", "8", "--steps", "2", "--batch-size", "8", "--device", "cpu"},
                                log, {{"ONEDNN_MAX_CPU_ISA", "SSE41"}});
  const test::ExitStatus status = test::wait_for(pid, 60);
  const std::string text = test::read_file(log);
  EXPECT_TRUE(status.ok()) << text;
  EXPECT_NE(text.find("W CPU kernels: oneDNN "), std::string::npos) << text;
  EXPECT_NE(text.find(", sse41 on a CPU with AVX2: oneDNN is limited below what this CPU runs"), std::string::npos)
      << text;
  EXPECT_NE(text.find("device cpu (oneDNN "), std::string::npos) << text;
}

}  // namespace
}  // namespace pstrain
