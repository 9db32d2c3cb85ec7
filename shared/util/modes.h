// The job's choices that the parts act on (--mode, --collective, --checkpoint-errors, --loss, the
// embedding tables'): parsed once into these enums by shared/config/ (options.cc,
// job_topology.cc), never compared as text elsewhere. A part
// includes this header, not options.h: it needs the words of the job, not its flags. Here in
// util/, which every room may include, so that shared/config/ stays at the edge (no other room of
// shared/ includes it).
#pragma once

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

const char* mode_name(Mode mode);  // "sync" | "async" | "ssp" | "allreduce"
const char* loss_name(Loss loss);  // "softmax" | "bce" | "mse" | "huber"
const char* embedding_tables_name(EmbeddingTables tables);  // "shared" | "per-field"
const char* embedding_pool_name(EmbeddingPool pool);         // "sum" | "mean" (also model.json's "pool")
const char* table_optimizer_name(TableOptimizer optimizer);  // "sgd" | "adagrad" | "adam" | "ftrl"

}  // namespace pstrain
