#include "shared/util/modes.h"

#include <initializer_list>

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

const char* device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kAuto: return "auto";
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
  }
  return "?";
}

const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kMomentum: return "momentum";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdamW: return "adamw";
  }
  return "?";
}

const char* lr_schedule_name(LrSchedule schedule) {
  switch (schedule) {
    case LrSchedule::kConstant: return "constant";
    case LrSchedule::kCosine: return "cosine";
    case LrSchedule::kStep: return "step";
    case LrSchedule::kCosineRestarts: return "cosine-restarts";
  }
  return "?";
}

namespace {
template <typename T>
bool named(const std::string& name, T* value, const char* (*name_of)(T), std::initializer_list<T> all) {
  for (T v : all) {
    if (name == name_of(v)) return (*value = v, true);
  }
  return false;
}
}  // namespace

bool table_optimizer_of(const std::string& name, TableOptimizer* optimizer) {
  return named(name, optimizer, table_optimizer_name,
               {TableOptimizer::kSgd, TableOptimizer::kAdagrad, TableOptimizer::kAdam, TableOptimizer::kFtrl});
}

bool optimizer_kind_of(const std::string& name, OptimizerKind* kind) {
  return named(name, kind, optimizer_kind_name,
               {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam, OptimizerKind::kAdamW});
}

}  // namespace pstrain
