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

const char* loss_name(Loss loss) {
  switch (loss) {
    case Loss::kSoftmax: return "softmax";
    case Loss::kBce: return "bce";
    case Loss::kMse: return "mse";
    case Loss::kHuber: return "huber";
  }
  return "?";
}

}  // namespace pstrain
