#include "shared/util/modes.h"

namespace pstrain {

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kSync: return "sync";
    case Mode::kAsync: return "async";
    case Mode::kSsp: return "ssp";
    case Mode::kAllreduce: return "allreduce";
  }
  return "?";
}

}  // namespace pstrain
