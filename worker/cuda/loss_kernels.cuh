// Launchers of the CUDA backend's kernels for the losses of float targets (--loss bce | mse |
// huber; the kernels are file-local in loss_kernels.cu). Each computes what the CPU backend's
// target_loss computes, from worker/backend/loss_math.h's definitions, enqueues on `stream`, checks the
// launch and returns without synchronising. All pointers are device memory.
#pragma once

#include <cuda_runtime.h>

#include "shared/util/modes.h"

namespace pstrain {
namespace kernels {

// row_loss[r] = the mean over c < cols of element_loss(outputs[r, c], targets[r, c]) (in double,
// in column order, as on the CPU); if doutputs is not null it receives element_grad (it may alias
// outputs). rows >= 1, cols >= 1, loss not kSoftmax.
void target_loss(Loss loss, const float* outputs, const float* targets, int rows, int cols, float huber_delta,
                 float* doutputs, double* row_loss, cudaStream_t stream);

}  // namespace kernels
}  // namespace pstrain
