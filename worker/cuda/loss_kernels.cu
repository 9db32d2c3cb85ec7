#include "worker/cuda/loss_kernels.cuh"

#include "worker/backend/loss_math.h"
#include "worker/cuda/cuda_check.h"

namespace pstrain {
namespace kernels {
namespace {

constexpr int kLossThreads = 128;

// One thread per row: its loss summed in column order (the CPU's order), then its gradient.
__global__ void target_loss_kernel(Loss loss, const float* outputs, const float* targets, int rows, int cols,
                                   float huber_delta, float* doutputs, double* row_loss) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kLossThreads + threadIdx.x;
  if (row >= static_cast<size_t>(rows)) return;
  const float* z = outputs + row * cols;
  const float* t = targets + row * cols;
  double sum = 0;
  for (int c = 0; c < cols; ++c) sum += element_loss(loss, z[c], t[c], huber_delta);
  row_loss[row] = sum / cols;
  if (doutputs == nullptr) return;
  float* d = doutputs + row * cols;
  for (int c = 0; c < cols; ++c) d[c] = element_grad(loss, z[c], t[c], huber_delta, cols);
}

}  // namespace

void target_loss(Loss loss, const float* outputs, const float* targets, int rows, int cols, float huber_delta,
                 float* doutputs, double* row_loss, cudaStream_t stream) {
  const unsigned grid = static_cast<unsigned>((static_cast<size_t>(rows) + kLossThreads - 1) / kLossThreads);
  target_loss_kernel<<<grid, kLossThreads, 0, stream>>>(loss, outputs, targets, rows, cols, huber_delta, doutputs,
                                                        row_loss);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace kernels
}  // namespace pstrain
