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

const char* embedding_tables_name(EmbeddingTables tables) {
  return tables == EmbeddingTables::kPerField ? "per-field" : "shared";
}

const char* embedding_pool_name(EmbeddingPool pool) { return pool == EmbeddingPool::kMean ? "mean" : "sum"; }

const char* table_optimizer_name(TableOptimizer optimizer) {
  switch (optimizer) {
    case TableOptimizer::kSgd: return "sgd";
    case TableOptimizer::kAdagrad: return "adagrad";
    case TableOptimizer::kAdam: return "adam";
    case TableOptimizer::kFtrl: return "ftrl";
  }
  return "?";
}

}  // namespace pstrain
