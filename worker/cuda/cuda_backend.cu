// Placeholder until the CUDA backend lands: reports the devices, refuses to create a backend.
#include <cuda_runtime.h>

#include "shared/error.h"
#include "worker/backend.h"

namespace pstrain {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int, size_t) {
  throw Error("the CUDA backend is not implemented yet");
}

}  // namespace pstrain
