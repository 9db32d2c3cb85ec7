#include <cuda_runtime.h>

#include "worker/cuda/cuda_check.h"
#include "worker/cuda/cuda_info.h"

namespace pstrain {

GpuMemory gpu_memory(int device) {
  ScopedDevice guard(device);
  GpuMemory memory;
  PSTRAIN_CUDA_CHECK(cudaMemGetInfo(&memory.free_bytes, &memory.total_bytes));
  return memory;
}

std::string gpu_name(int device) {
  cudaDeviceProp prop{};
  PSTRAIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

}  // namespace pstrain
