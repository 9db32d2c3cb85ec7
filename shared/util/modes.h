// The job's choices that the parts act on (--mode, --collective, --checkpoint-errors, --loss, the
// embedding tables'): parsed once into these enums by shared/config/ (options.cc,
// job_topology.cc), never compared as text elsewhere. A part
// includes this header, not options.h: it needs the words of the job, not its flags. Here in
// util/, which every room may include, so that shared/config/ stays at the edge (no other room of
// shared/ includes it).
#pragma once

#include <string>

namespace pstrain {

enum class Mode { kSync, kAsync, kSsp, kAllreduce };
enum class CollectiveKind { kRing, kNccl };
enum class OnError { kStop, kWarn };
// --loss: softmax cross-entropy over class labels, or a loss of float targets (docs/models.md,
// "Losses"): binary cross-entropy with logits (multi-label), mean squared error, Huber.
enum class Loss { kSoftmax, kBce, kMse, kHuber };
// --embedding-tables, --embedding-pool, --embedding-optimizer (docs/sparse.md).
enum class EmbeddingTables { kShared, kPerField };
// How a field's row in the model's input is made from the rows of its IDs when it lists several
// (docs/sparse.md, "Pooling"): their sum or their mean. A field of one ID is its row under either.
enum class EmbeddingPool { kSum, kMean };
enum class TableOptimizer { kSgd, kAdagrad, kAdam, kFtrl };
// --device: a GPU where one is visible (auto), the CPU, or CUDA (its index beside it, as cuda:K).
enum class DeviceKind { kAuto, kCpu, kCuda };
// --optimizer (the dense parameters'; adamw: Adam with decoupled weight decay) and --lr-schedule
// (shared/train/optimizer.h).
enum class OptimizerKind { kSgd, kMomentum, kAdam, kAdamW };
enum class LrSchedule { kConstant, kCosine, kStep, kCosineRestarts };

const char* mode_name(Mode mode);  // "sync" | "async" | "ssp" | "allreduce"
const char* loss_name(Loss loss);  // "softmax" | "bce" | "mse" | "huber"
const char* embedding_tables_name(EmbeddingTables tables);  // "shared" | "per-field"
const char* embedding_pool_name(EmbeddingPool pool);         // "sum" | "mean" (also model.json's "pool")
const char* table_optimizer_name(TableOptimizer optimizer);  // "sgd" | "adagrad" | "adam" | "ftrl"
const char* device_kind_name(DeviceKind kind);              // "auto" | "cpu" | "cuda"
const char* optimizer_kind_name(OptimizerKind kind);         // "sgd" | "momentum" | "adam" | "adamw"
const char* lr_schedule_name(LrSchedule schedule);           // "constant" | "cosine" | "step" | "cosine-restarts"
// The enum of a name above, for words read back from files (a checkpoint's or table's saved
// optimizer): false for any other word.
bool table_optimizer_of(const std::string& name, TableOptimizer* optimizer);
bool optimizer_kind_of(const std::string& name, OptimizerKind* kind);

}  // namespace pstrain
