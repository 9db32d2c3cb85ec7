// Built only when CUDA is off (see CMakeLists.txt): the CUDA entry points report no GPU.
#include "shared/error.h"
#include "worker/backend.h"

namespace pstrain {

int cuda_device_count() { return 0; }

std::unique_ptr<Backend> make_cuda_backend(int, size_t) {
  throw Error("this build of pstrain has no CUDA support (nvcc was not found at build time)");
}

}  // namespace pstrain
