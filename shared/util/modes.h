// The job's choices that the parts act on (--mode, --collective, --checkpoint-errors): parsed
// once into these enums by shared/config/options.cc, never compared as text elsewhere. A part
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

const char* mode_name(Mode mode);  // "sync" | "async" | "ssp" | "allreduce"
const char* loss_name(Loss loss);  // "softmax" | "bce" | "mse" | "huber"

}  // namespace pstrain
