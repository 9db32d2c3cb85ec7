// The CPU backend's matrix products, on oneDNN (docs/models.md, "CPU kernels").
//
// oneDNN picks its kernels from what CPUID says the processor can do (AVX2, AVX-512, AMX, ...),
// not from a table of CPU models: a CPU newer than the library still gets its vector units. Debian
// 12's OpenBLAS, which this replaced, fell back to SSE3 kernels on CPUs it did not know (Intel
// family 6 model 207), 3-4x slower on the MLP's products (docs/models.md, "CPU kernels").
//
// Each call runs on the calling thread alone: the backend splits work over its own threads
// (--threads), and oneDNN's OpenMP team would otherwise take every core in every call. The same
// call on the same CPU gives the same bits every time (oneDNN's sgemm has no run-to-run
// variation on one thread); a row's result may depend on the shape of the call it is in, which
// the backend's callers keep fixed (cpu_backend.cc, gemm_sum).
#pragma once

#include <string>

namespace pstrain {

// Row-major C = alpha * op(A) * op(B) + beta * C, op(A) m x k, op(B) k x n. Throws Error when
// oneDNN refuses the call (it checks the sizes and leading dimensions).
void cpu_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
               int ldb, float beta, float* c, int ldc);

// What the products run on, for the worker's first lines and the benchmarks.
struct CpuKernels {
  std::string library;  // "oneDNN 2.6.3"
  std::string isa;      // oneDNN's instruction set in use: "avx512_core_amx", "avx2", "sse41", ...
  bool generic = false;  // true when that set is below AVX2 on a CPU that has AVX2: the slow fallback
  std::string text() const;  // "oneDNN 2.6.3, avx512_core_amx"
};
CpuKernels cpu_kernels();

}  // namespace pstrain
