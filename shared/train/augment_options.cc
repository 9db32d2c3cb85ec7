#include "shared/train/augment_options.h"

namespace pstrain {

std::string AugmentOptions::text() const {
  std::string out = flip ? "flip" : "";
  if (shift > 0) out += std::string(out.empty() ? "" : " ") + "shift " + std::to_string(shift);
  return out;
}

}  // namespace pstrain
