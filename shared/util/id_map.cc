#include "shared/util/id_map.h"

#include <random>

namespace pstrain {

uint64_t id_map_salt() {
  static const uint64_t salt = [] {
    std::random_device device;
    return uint64_t{device()} << 32 | device();
  }();
  return salt;
}

}  // namespace pstrain
