// Launchers of the CUDA kernels of the layer operations (worker/backend/backend.h; the kernels are
// file-local in layer_kernels.cu). Each computes what the CPU backend's op of the same name
// computes (worker/cpu/cpu_backend.cc), in the same order where sums are involved, enqueues on
// `stream`, checks the launch and returns without synchronising. Pointers are device memory
// (dropout's keys too: the backend uploads them); sizes are validated by the caller.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "worker/backend/backend.h"

namespace pstrain {
namespace kernels {

void add_bias(float* y, const float* bias, int outer, int channels, int inner, cudaStream_t stream);
// inner > 1 (dense biases use column_sums of kernels.cuh).
void channel_sums(const float* dy, int outer, int channels, int inner, float* db, bool accumulate,
                  cudaStream_t stream);
void activation(Activation f, const float* x, float* y, size_t n, cudaStream_t stream);
void add(const float* a, const float* b, float* y, size_t n, cudaStream_t stream);
void multiply(const float* a, const float* b, float* y, size_t n, cudaStream_t stream);
void layer_norm(const float* x, int rows, int cols, const float* gamma, const float* beta, float eps, float* y,
                cudaStream_t stream);
void layer_norm_backward(const float* x, const float* dy, int rows, int cols, const float* gamma, float eps, float* dx,
                         float* dy_xhat, cudaStream_t stream);
// Batch normalisation: the sums one block per channel (channels < 2^31), into device doubles
// (2 x channels); apply and backward apply element-wise.
void batch_norm_sums(const float* x, int outer, int channels, int inner, double* sums, cudaStream_t stream);
void batch_norm_apply(const float* x, int outer, int channels, int inner, const float* stats, const float* gamma,
                      const float* beta, float* y, cudaStream_t stream);
void batch_norm_backward_sums(const float* x, const float* dy, int outer, int channels, int inner, const float* stats,
                              double* sums, cudaStream_t stream);
void batch_norm_backward_apply(const float* x, const float* dy, int outer, int channels, int inner,
                               const float* stats, const float* gamma, float* dx, cudaStream_t stream);
void activation_backward(Activation f, const float* x, const float* y, const float* dy, float* dx, size_t n,
                         cudaStream_t stream);
void im2col(const float* x, int batch, const ConvGeometry& g, float* col, cudaStream_t stream);
void col2im(const float* col, int batch, const ConvGeometry& g, float* dx, cudaStream_t stream);
void pool(PoolKind kind, const float* x, int planes, const PoolGeometry& g, float* y, cudaStream_t stream);
void pool_backward(PoolKind kind, const float* x, const float* y, const float* dy, int planes, const PoolGeometry& g,
                   float* dx, cudaStream_t stream);
void dropout(const float* x, float* y, int rows, int cols, float rate, const uint64_t* keys, uint64_t salt,
             cudaStream_t stream);
// One block per row (rows < 2^31).
void dot_interaction(const float* x, int rows, int cols, int fields, int dim, float* y, cudaStream_t stream);
void dot_interaction_backward(const float* x, const float* dy, int rows, int cols, int fields, int dim,
                              float* dx, cudaStream_t stream);
// dst[r, dst_from + c] = src[r, src_from + c] for r < rows, c < n.
void copy_columns(const float* src, int rows, int src_cols, int src_from, int n, float* dst, int dst_cols,
                  int dst_from, cudaStream_t stream);

}  // namespace kernels
}  // namespace pstrain
