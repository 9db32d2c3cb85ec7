// Built only when CUDA is off (see CMakeLists.txt): the CUDA entry points report no GPU.
#include "shared/util/error.h"
#include "worker/backend/backend.h"
#include "worker/cuda/cuda_info.h"

namespace pstrain {

int cuda_device_count() { return 0; }

std::unique_ptr<Backend> make_cuda_backend(int, size_t) {
  throw Error("this build of pstrain has no CUDA support (nvcc was not found at build time)");
}

GpuMemory gpu_memory(int) { return {}; }
std::string gpu_name(int) { return ""; }

}  // namespace pstrain
