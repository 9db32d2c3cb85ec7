#include "worker/cuda/cuda_check.h"

#include <cuda.h>  // the driver's types only: nothing links libcuda, which CPU machines lack

#include <cstring>
#include <string>

#include "shared/util/error.h"
#include "shared/util/log.h"

namespace pstrain {
namespace cuda_detail {
namespace {

// "worker/cuda/x.cu" rather than the absolute path the build passed to the compiler.
const char* source_path(const char* file) {
  for (const char* dir : {"/worker/", "/shared/", "/tests/"}) {
    const char* at = std::strstr(file, dir);
    if (at != nullptr) return at + 1;
  }
  return file;
}

std::string describe(const char* what, const char* name, const char* text, const char* call, const char* file,
                     int line) {
  return std::string(what) + " error at " + source_path(file) + ":" + std::to_string(line) + " in " + call +
         ": " + name + " (" + text + ")";
}

std::string describe_cuda(cudaError_t err, const char* call, const char* file, int line) {
  std::string message = describe("CUDA", cudaGetErrorName(err), cudaGetErrorString(err), call, file, line);
  if (err == cudaErrorMemoryAllocation) {
    message += "; HINT: lower the batch size or the model, or see nvidia-smi for other processes on this GPU";
  }
  return message;
}

std::string describe_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  return describe("cuBLAS", cublasGetStatusName(status), cublasGetStatusString(status), call, file, line);
}

}  // namespace

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  (void)cudaGetLastError();
  throw Error(describe_cuda(err, call, file, line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  (void)cudaGetLastError();
  throw Error(describe_cublas(status, call, file, line));
}

void warn_cuda_error(cudaError_t err, const char* call, const char* file, int line) noexcept {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  if (err == cudaErrorCudartUnloading) return;  // at process exit, after the runtime shut down
  try {
    PSLOG(ERROR) << describe_cuda(err, call, file, line);
  } catch (...) {
  }
}

void warn_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) noexcept {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  (void)cudaGetLastError();
  try {
    PSLOG(ERROR) << describe_cublas(status, call, file, line);
  } catch (...) {
  }
}

}  // namespace cuda_detail

namespace {

// Whether the calling thread has a CUDA context current. On a thread that never used CUDA,
// cudaGetDevice answers 0 without creating anything, but restoring that 0 with cudaSetDevice would
// create GPU 0's primary context (since CUDA 12, cudaSetDevice initialises it at once): hundreds of
// MiB on a GPU the thread never used, perhaps another worker's. The runtime cannot tell the two
// cases apart; the driver's cuCtxGetCurrent can, reached through the runtime so that nothing
// links libcuda. Where the driver cannot be asked, this says true: restore, as before.
bool thread_has_context() noexcept {
  using CtxGetCurrent = CUresult (*)(CUcontext*);
  static const CtxGetCurrent get_current = []() -> CtxGetCurrent {
#if CUDART_VERSION >= 12000
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 4000, cudaEnableDefault, &found);
#else
    const cudaError_t err = cudaGetDriverEntryPoint("cuCtxGetCurrent", &fn, cudaEnableDefault, &found);
#endif
    if (err == cudaSuccess && found == cudaDriverEntryPointSuccess) return reinterpret_cast<CtxGetCurrent>(fn);
    (void)cudaGetLastError();
#endif
    return nullptr;  // before CUDA 12, cudaSetDevice created no context: nothing to avoid
  }();
  CUcontext context = nullptr;
  return get_current == nullptr || (get_current(&context) == CUDA_SUCCESS && context != nullptr);
}

}  // namespace

// A thread without a context keeps `device` current afterwards: its context exists by then, and
// "nothing current" cannot be set back through the runtime (the next runtime call would pick a
// device again). A worker's threads that compute make their GPU current for good anyway
// (make_cuda_backend), so this changes what a helper thread, or a test's, has current.
ScopedDevice::ScopedDevice(int device) {
  int current = -1;
  PSTRAIN_CUDA_CHECK(cudaGetDevice(&current));
  if (current == device) return;
  const bool restore = thread_has_context();
  PSTRAIN_CUDA_CHECK(cudaSetDevice(device));
  if (restore) previous_ = current;
}

ScopedDevice::ScopedDevice(int device, std::nothrow_t) noexcept {
  int current = -1;
  cudaError_t err = cudaGetDevice(&current);
  if (err == cudaSuccess && current != device) {
    const bool restore = thread_has_context();
    err = cudaSetDevice(device);
    if (err == cudaSuccess && restore) previous_ = current;
  }
  cuda_detail::warn_cuda_error(err, "ScopedDevice(device, std::nothrow)", __FILE__, __LINE__);
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) PSTRAIN_CUDA_WARN(cudaSetDevice(previous_));
}

}  // namespace pstrain
