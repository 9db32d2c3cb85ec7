#include "worker/backend.h"

#include <algorithm>
#include <string>

#include "shared/util/error.h"

namespace pstrain {

std::unique_ptr<Backend> make_backend(const BackendOptions& o) {
  if (o.device == "cpu") return make_cpu_backend(o.threads);  // without asking CUDA anything
  const int gpus = cuda_device_count();
  if (o.device == "auto" && gpus == 0) return make_cpu_backend(o.threads);
  if (gpus == 0) throw Error("--device " + o.device + ": no CUDA device is visible to this worker");
  const int device = o.device.rfind("cuda:", 0) == 0 ? std::stoi(o.device.substr(5)) : std::max(o.local_rank, 0) % gpus;
  if (device >= gpus) {
    throw Error("--device " + o.device + ": only " + std::to_string(gpus) + " CUDA device(s) are visible");
  }
  const auto limit = static_cast<size_t>(o.gpu_memory_limit_mib * 1048576.0);
  return make_cuda_backend(device, limit);
}

}  // namespace pstrain
