// What the trainer reports about a GPU. Plain C++ (no CUDA headers), so any translation unit can
// include it; in a build without CUDA worker/cuda/stubs/cuda_stub.cc returns zeros and "".
#pragma once

#include <cstddef>
#include <string>

namespace pstrain {

struct GpuMemory {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// cudaMemGetInfo on `device` (creates its CUDA context if there is none yet). Throws
// pstrain::Error if the device does not exist or CUDA fails.
GpuMemory gpu_memory(int device);

// The device's name, e.g. "NVIDIA H100 80GB HBM3". Throws pstrain::Error like gpu_memory().
std::string gpu_name(int device);

}  // namespace pstrain
