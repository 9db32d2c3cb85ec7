// Checks for every CUDA runtime and cuBLAS call (llm.c's cudaCheck, with pstrain's error policy).
//
// Policy (docs/errors.md):
// * A failed CUDA or cuBLAS call throws pstrain::Error, with file:line, the call, the error's name
//   and its description. It does not abort: out of memory, a missing or mismatched driver, an
//   ECC error or a GPU that fell off the bus are failures of the environment, and main() must
//   still be able to report them and leave the parameter servers cleanly. After a sticky error
//   (an illegal address, a failed launch) the CUDA context is unusable; the exception carries
//   that message to main(), which exits.
// * Invariants (shapes, null pointers, a device index already validated) are checked with
//   PSTRAIN_CHECK before the call, so a bug is never first noticed as a CUDA error.
// * Destructors use the _WARN forms: they log the failure and never throw.
// * PSTRAIN_CUDA_CHECK_LAUNCH() follows every kernel launch (cudaGetLastError: bad launch
//   configurations; errors of earlier asynchronous work surface at the next synchronisation).
//
// Plain C++: usable from .cc files compiled by the host compiler as well as from .cu files.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <new>

#define PSTRAIN_CUDA_CHECK(call)                                                              \
  do {                                                                                        \
    const cudaError_t pstrain_cuda_err_ = (call);                                             \
    if (pstrain_cuda_err_ != cudaSuccess)                                                     \
      ::pstrain::cuda_detail::throw_cuda_error(pstrain_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define PSTRAIN_CUBLAS_CHECK(call)                                                               \
  do {                                                                                           \
    const cublasStatus_t pstrain_cublas_st_ = (call);                                            \
    if (pstrain_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::pstrain::cuda_detail::throw_cublas_error(pstrain_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

#define PSTRAIN_CUDA_CHECK_LAUNCH() PSTRAIN_CUDA_CHECK(cudaGetLastError())

#define PSTRAIN_CUDA_WARN(call) ::pstrain::cuda_detail::warn_cuda_error((call), #call, __FILE__, __LINE__)
#define PSTRAIN_CUBLAS_WARN(call) ::pstrain::cuda_detail::warn_cublas_error((call), #call, __FILE__, __LINE__)

namespace pstrain {

// Makes `device` current for the calling thread for the guard's lifetime, then restores the
// previous device where the thread had one (a context current); a thread that had none keeps
// `device`, rather than gain a context on GPU 0. The throwing form is for ordinary code; the
// std::nothrow form is for destructors (a failure is logged, and the caller goes on).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device);
  ScopedDevice(int device, std::nothrow_t) noexcept;
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

namespace cuda_detail {

// Clears the thread's last-error state where the error is not sticky, so a later
// PSTRAIN_CUDA_CHECK_LAUNCH() does not report a failure that was already thrown.
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
void warn_cuda_error(cudaError_t err, const char* call, const char* file, int line) noexcept;
void warn_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) noexcept;

}  // namespace cuda_detail
}  // namespace pstrain
