#include "worker/cpu/cpu_gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <string>

#include "shared/util/error.h"

// The OpenMP runtime oneDNN is built on (Debian's libdnnl: DNNL_CPU_RUNTIME_OMP, libgomp). Declared
// here rather than through <omp.h>, which clang's sanitizer builds do not have.
extern "C" void omp_set_num_threads(int);

namespace pstrain {
namespace {

std::string isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_all: return "all";
  }
  return "isa " + std::to_string(static_cast<int>(isa));
}

// Whether oneDNN's set includes AVX2: each set's bits include those of the sets below it.
bool has_avx2(dnnl_cpu_isa_t isa) {
  return (static_cast<unsigned>(isa) & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2;
}

}  // namespace

void cpu_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
               int ldb, float beta, float* c, int ldc) {
  static thread_local const bool one_thread = (omp_set_num_threads(1), true);
  (void)one_thread;
  const dnnl_status_t status =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) {
    throw Error("oneDNN sgemm (" + std::string(trans_a ? "T" : "N") + (trans_b ? "T" : "N") + ", m " +
                std::to_string(m) + ", n " + std::to_string(n) + ", k " + std::to_string(k) + ") failed: status " +
                std::to_string(static_cast<int>(status)));
  }
}

std::string CpuKernels::text() const { return library + ", " + isa; }

CpuKernels cpu_kernels() {
  const dnnl_version_t* v = dnnl_version();
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  CpuKernels k;
  k.library = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  k.isa = isa_name(isa);
  __builtin_cpu_init();
  k.generic = !has_avx2(isa) && __builtin_cpu_supports("avx2");
  return k;
}

}  // namespace pstrain
