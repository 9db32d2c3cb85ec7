// Built when NCCL is not (nvcc or nccl.h/libnccl missing at build time; see CMakeLists.txt):
// `--collective nccl` then fails with this clear error instead of a link error.
#include "shared/util/error.h"
#include "worker/cuda/nccl_collective.h"

namespace pstrain {

bool nccl_available() { return false; }

std::unique_ptr<Collective> make_nccl_collective(std::unique_ptr<Collective>, int, double) {
  throw Error("--collective nccl: this build of pstrain has no NCCL (nvcc, nccl.h or libnccl was not found at "
              "build time); use --collective ring");
}

}  // namespace pstrain
