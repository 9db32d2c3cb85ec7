// Launchers of the CUDA backend's element-wise and reduction kernels (the kernels themselves are
// file-local in kernels.cu). Each computes what the CPU backend's op of the same name computes
// (worker/cpu/cpu_backend.cc), enqueues on `stream`, checks the launch and returns without
// synchronising. All pointers are device memory; sizes are validated by the caller.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace pstrain {
namespace kernels {

// dbias[c] = sum over rows of dy[r, c] (+ dbias[c] when accumulate).
void column_sums(const float* dy, int rows, int cols, float* dbias, bool accumulate, cudaStream_t stream);

// c[i] = beta * c[i] (0 when beta is 0) + terms[0][i] + terms[1][i] + ..., added in that order,
// for i < elems; terms is [count, elems]. gemm_sum's per-sample products, summed as the loop of
// gemms with beta 1 would add them.
void ordered_sum(const float* terms, int count, size_t elems, float beta, float* c, cudaStream_t stream);

struct XentTotals {
  double loss_sum;
  long long correct;
};

// Softmax cross-entropy of logits[rows, cols] against device labels (each in [0, cols)), the
// target q = (1 - smoothing) onehot + smoothing / cols: row_loss[r] = log(sum_c exp(z_c - max)) -
// sum_c q_c (z_c - max) (in double, as on the CPU), row_correct[r] = (arg-max == label), ties
// going to the lowest index; if dlogits is not null it receives softmax - q (it may alias
// logits). Then *totals = the sums of row_loss and row_correct, in a fixed order. rows >= 1.
void softmax_xent(const float* logits, const int32_t* labels, int rows, int cols, float smoothing, float* dlogits,
                  double* row_loss, int32_t* row_correct, XentTotals* totals, cudaStream_t stream);

}  // namespace kernels
}  // namespace pstrain
