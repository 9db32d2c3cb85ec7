#include <algorithm>
#include <climits>
#include <cmath>

#include "worker/cuda/cuda_check.h"
#include "worker/cuda/kernels.cuh"

namespace pstrain {
namespace kernels {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;


// ---- column sums: 32 columns per block, 32 row lanes each, then a tree over the lanes ----

constexpr int kSumCols = 32, kSumLanes = 32;

__global__ void column_sums_kernel(const float* dy, int rows, int cols, float* dbias, bool accumulate) {
  __shared__ float partial[kSumLanes][kSumCols];
  const size_t c = static_cast<size_t>(blockIdx.x) * kSumCols + threadIdx.x;
  float sum = 0.0f;
  if (c < static_cast<size_t>(cols)) {
    for (size_t r = threadIdx.y; r < static_cast<size_t>(rows); r += kSumLanes) sum += dy[r * cols + c];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  for (unsigned half = kSumLanes / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) partial[threadIdx.y][threadIdx.x] += partial[threadIdx.y + half][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < static_cast<size_t>(cols)) {
    dbias[c] = accumulate ? dbias[c] + partial[0][threadIdx.x] : partial[0][threadIdx.x];
  }
}

// ---- ordered sums: one thread per element, the terms in order ----

constexpr int kOrderedSumThreads = 256;

__global__ void ordered_sum_kernel(const float* terms, int count, size_t elems, float beta, float* c) {
  const size_t i = static_cast<size_t>(blockIdx.x) * kOrderedSumThreads + threadIdx.x;
  if (i >= elems) return;
  float acc = beta == 0.0f ? 0.0f : beta * c[i];
  for (int t = 0; t < count; ++t) acc = __fadd_rn(acc, terms[static_cast<size_t>(t) * elems + i]);
  c[i] = acc;
}

// ---- softmax cross-entropy: one warp per row, then one block sums the rows ----

constexpr int kXentRowsPerBlock = 4;

// All lanes return the same sum: each butterfly step adds the same two values (in either order).
__device__ double warp_sum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// The warp's (value, index) maximum, the lowest index among equal values; broadcast from lane 0.
__device__ void warp_argmax(float& value, int& index) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float v = __shfl_down_sync(kFullMask, value, offset);
    const int i = __shfl_down_sync(kFullMask, index, offset);
    if (v > value || (v == value && i < index)) {
      value = v;
      index = i;
    }
  }
  value = __shfl_sync(kFullMask, value, 0);
  index = __shfl_sync(kFullMask, index, 0);
}

__global__ void softmax_xent_kernel(const float* logits, const int32_t* labels, int rows, int cols, float smoothing,
                                    float* dlogits, double* row_loss, int32_t* row_correct) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kXentRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= static_cast<size_t>(rows)) return;  // the whole warp leaves together
  const float* z = logits + row * cols;

  // Each lane keeps its first maximum (std::max_element's strict '<'); empty lanes lose ties.
  float zmax = -INFINITY;
  int argmax = INT_MAX;
  for (int c = lane; c < cols; c += kWarp) {
    if (argmax == INT_MAX || z[c] > zmax) {
      zmax = z[c];
      argmax = c;
    }
  }
  warp_argmax(zmax, argmax);

  double denom = 0, shifted_sum = 0;
  for (int c = lane; c < cols; c += kWarp) {
    denom += exp(static_cast<double>(z[c] - zmax));
    shifted_sum += static_cast<double>(z[c] - zmax);
  }
  denom = warp_sum(denom);
  shifted_sum = warp_sum(shifted_sum);

  const int label = labels[row];
  if (lane == 0) {
    const double target = smoothing == 0.0f ? static_cast<double>(z[label] - zmax)
                                            : (1.0 - smoothing) * static_cast<double>(z[label] - zmax) +
                                                  smoothing * shifted_sum / cols;
    row_loss[row] = log(denom) - target;
    row_correct[row] = argmax == label;
  }
  __syncwarp();  // z[label] is read before any lane overwrites it when dlogits aliases logits
  if (dlogits == nullptr) return;
  float* d = dlogits + row * cols;
  const float spread = smoothing / static_cast<float>(cols), hit = 1.0f - smoothing + spread;
  for (int c = lane; c < cols; c += kWarp) {
    const float q = smoothing == 0.0f ? (c == label ? 1.0f : 0.0f) : (c == label ? hit : spread);
    d[c] = static_cast<float>(exp(static_cast<double>(z[c] - zmax)) / denom) - q;
  }
}

constexpr int kTotalsThreads = 256;

__global__ void xent_totals_kernel(const double* row_loss, const int32_t* row_correct, int rows,
                                   XentTotals* totals) {
  __shared__ double loss[kTotalsThreads];
  __shared__ long long correct[kTotalsThreads];
  double l = 0;
  long long k = 0;
  for (size_t r = threadIdx.x; r < static_cast<size_t>(rows); r += kTotalsThreads) {
    l += row_loss[r];
    k += row_correct[r];
  }
  loss[threadIdx.x] = l;
  correct[threadIdx.x] = k;
  __syncthreads();
  for (unsigned half = kTotalsThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      loss[threadIdx.x] += loss[threadIdx.x + half];
      correct[threadIdx.x] += correct[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *totals = XentTotals{loss[0], correct[0]};
}

}  // namespace

void column_sums(const float* dy, int rows, int cols, float* dbias, bool accumulate, cudaStream_t stream) {
  if (cols <= 0) return;
  const unsigned grid = static_cast<unsigned>((static_cast<size_t>(cols) + kSumCols - 1) / kSumCols);
  column_sums_kernel<<<grid, dim3(kSumCols, kSumLanes), 0, stream>>>(dy, rows, cols, dbias, accumulate);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void ordered_sum(const float* terms, int count, size_t elems, float beta, float* c, cudaStream_t stream) {
  if (elems == 0) return;
  const unsigned grid = static_cast<unsigned>((elems + kOrderedSumThreads - 1) / kOrderedSumThreads);
  ordered_sum_kernel<<<grid, kOrderedSumThreads, 0, stream>>>(terms, count, elems, beta, c);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void softmax_xent(const float* logits, const int32_t* labels, int rows, int cols, float smoothing, float* dlogits,
                  double* row_loss, int32_t* row_correct, XentTotals* totals, cudaStream_t stream) {
  const unsigned grid =
      static_cast<unsigned>((static_cast<size_t>(rows) + kXentRowsPerBlock - 1) / kXentRowsPerBlock);
  softmax_xent_kernel<<<grid, kXentRowsPerBlock * kWarp, 0, stream>>>(logits, labels, rows, cols, smoothing,
                                                                      dlogits, row_loss, row_correct);
  PSTRAIN_CUDA_CHECK_LAUNCH();
  xent_totals_kernel<<<1, kTotalsThreads, 0, stream>>>(row_loss, row_correct, rows, totals);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace kernels
}  // namespace pstrain
