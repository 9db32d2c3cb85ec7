#include "worker/cuda/cuda_check.h"

#include <cstring>
#include <string>

#include "shared/error.h"
#include "shared/log.h"

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

ScopedDevice::ScopedDevice(int device) {
  int current = -1;
  PSTRAIN_CUDA_CHECK(cudaGetDevice(&current));
  if (current == device) return;
  PSTRAIN_CUDA_CHECK(cudaSetDevice(device));
  previous_ = current;
}

ScopedDevice::ScopedDevice(int device, std::nothrow_t) noexcept {
  int current = -1;
  cudaError_t err = cudaGetDevice(&current);
  if (err == cudaSuccess && current != device) {
    err = cudaSetDevice(device);
    if (err == cudaSuccess) previous_ = current;
  }
  cuda_detail::warn_cuda_error(err, "ScopedDevice(device, std::nothrow)", __FILE__, __LINE__);
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) PSTRAIN_CUDA_WARN(cudaSetDevice(previous_));
}

}  // namespace pstrain
