#include <algorithm>
#include <cmath>

#include "worker/cuda/cuda_check.h"
#include "worker/cuda/layer_kernels.cuh"

namespace pstrain {
namespace kernels {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 65535;
constexpr int kDotThreads = 128;  // per row of the dot interaction (26 fields: 325 pairs, 429 inputs)

unsigned blocks_for(size_t n) { return static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks)); }

// Grid-stride loop over [0, n).
#define PSTRAIN_FOR_EACH(i, n)                                                                \
  for (size_t i = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x; i < (n);         \
       i += static_cast<size_t>(gridDim.x) * kThreads)

__global__ void add_bias_kernel(float* y, const float* bias, size_t n, int channels, int inner) {
  PSTRAIN_FOR_EACH(i, n) { y[i] += bias[(i / static_cast<size_t>(inner)) % static_cast<size_t>(channels)]; }
}

// One block per channel; each thread sums a strided share of the channel's (outer x inner)
// values, then a tree over the block. The CPU sums sequentially: results agree to rounding.
__global__ void channel_sums_kernel(const float* dy, int outer, int channels, int inner, float* db, bool accumulate) {
  __shared__ float partial[kThreads];
  const int c = blockIdx.x;
  const size_t per_channel = static_cast<size_t>(outer) * inner;
  float sum = 0.0f;
  for (size_t j = threadIdx.x; j < per_channel; j += kThreads) {
    const size_t o = j / inner, i = j % inner;
    sum += dy[(o * channels + c) * inner + i];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = accumulate ? db[c] + partial[0] : partial[0];
}

__global__ void add_kernel(const float* a, const float* b, float* y, size_t n) {
  PSTRAIN_FOR_EACH(i, n) { y[i] = __fadd_rn(a[i], b[i]); }
}

__global__ void multiply_kernel(const float* a, const float* b, float* y, size_t n) {
  PSTRAIN_FOR_EACH(i, n) { y[i] = __fmul_rn(a[i], b[i]); }
}

__global__ void activation_kernel(Activation f, const float* x, float* y, size_t n) {
  PSTRAIN_FOR_EACH(i, n) {
    const float v = x[i];
    switch (f) {
      case Activation::kRelu: y[i] = fmaxf(v, 0.0f); break;
      case Activation::kTanh: y[i] = tanhf(v); break;
      case Activation::kSigmoid: y[i] = 1.0f / (1.0f + expf(-v)); break;
      case Activation::kGelu: y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); break;
    }
  }
}

__global__ void activation_backward_kernel(Activation f, const float* x, const float* y, const float* dy, float* dx,
                                           size_t n) {
  PSTRAIN_FOR_EACH(i, n) {
    switch (f) {
      case Activation::kRelu: dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; break;
      case Activation::kTanh: dx[i] = dy[i] * (1.0f - y[i] * y[i]); break;
      case Activation::kSigmoid: dx[i] = dy[i] * y[i] * (1.0f - y[i]); break;
      case Activation::kGelu: {
        const float v = x[i];
        dx[i] = dy[i] * (0.5f * (1.0f + erff(v * 0.70710678118654752f)) +
                         v * 0.3989422804014327f * expf(-0.5f * v * v));
        break;
      }
    }
  }
}

// ---- layer normalisation: one block per row, sums by a fixed tree ----

// The block's sum of v, returned to every thread.
__device__ float block_sum(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();  // before the next call overwrites shared
  return total;
}

// This block's row's mean and 1 / sqrt(var + eps).
__device__ void row_stats(const float* x, int cols, float eps, float* shared, float* mean, float* rstd) {
  float sum = 0.0f;
  for (int j = threadIdx.x; j < cols; j += kThreads) sum += x[j];
  const float m = block_sum(sum, shared) / static_cast<float>(cols);
  float sq = 0.0f;
  for (int j = threadIdx.x; j < cols; j += kThreads) sq += (x[j] - m) * (x[j] - m);
  *mean = m;
  *rstd = 1.0f / sqrtf(block_sum(sq, shared) / static_cast<float>(cols) + eps);
}

__global__ void layer_norm_kernel(const float* x, int cols, const float* gamma, const float* beta, float eps,
                                  float* y) {
  __shared__ float shared[kThreads];
  const size_t at = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(cols);
  float mean = 0.0f, rstd = 0.0f;
  row_stats(x + at, cols, eps, shared, &mean, &rstd);
  for (int j = threadIdx.x; j < cols; j += kThreads) y[at + j] = (x[at + j] - mean) * rstd * gamma[j] + beta[j];
}

__global__ void layer_norm_backward_kernel(const float* x, const float* dy, int cols, const float* gamma, float eps,
                                           float* dx, float* dy_xhat) {
  __shared__ float shared[kThreads];
  const size_t at = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(cols);
  float mean = 0.0f, rstd = 0.0f;
  row_stats(x + at, cols, eps, shared, &mean, &rstd);
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int j = threadIdx.x; j < cols; j += kThreads) {
    const float xhat = (x[at + j] - mean) * rstd, g = dy[at + j] * gamma[j];
    g_sum += g;
    gx_sum += g * xhat;
    dy_xhat[at + j] = dy[at + j] * xhat;
  }
  const float g_mean = block_sum(g_sum, shared) / static_cast<float>(cols);
  const float gx_mean = block_sum(gx_sum, shared) / static_cast<float>(cols);
  for (int j = threadIdx.x; j < cols; j += kThreads) {
    const float xhat = (x[at + j] - mean) * rstd;
    dx[at + j] = rstd * (dy[at + j] * gamma[j] - g_mean - xhat * gx_mean);
  }
}

// ---- batch normalisation: one block per channel for the sums, in double by a fixed tree ----

// The block's sums of a and b (double), left in shared[0][0] and shared[1][0] for thread 0.
__device__ void block_sum_pair(double a, double b, double (*shared)[kThreads]) {
  shared[0][threadIdx.x] = a;
  shared[1][threadIdx.x] = b;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      shared[0][threadIdx.x] += shared[0][threadIdx.x + half];
      shared[1][threadIdx.x] += shared[1][threadIdx.x + half];
    }
    __syncthreads();
  }
}

// Channel blockIdx.x's values x[o, c, i], the j-th in order of (o, i).
__device__ size_t channel_at(size_t j, int channels, int inner) {
  const size_t o = j / static_cast<size_t>(inner), i = j % static_cast<size_t>(inner);
  return (o * static_cast<size_t>(channels) + blockIdx.x) * static_cast<size_t>(inner) + i;
}

__global__ void batch_norm_sums_kernel(const float* x, int outer, int channels, int inner, double* sums) {
  __shared__ double shared[2][kThreads];
  const size_t n = static_cast<size_t>(outer) * static_cast<size_t>(inner);
  double sum = 0.0, squares = 0.0;
  for (size_t j = threadIdx.x; j < n; j += kThreads) {
    const double v = x[channel_at(j, channels, inner)];
    sum += v;
    squares = __dadd_rn(squares, __dmul_rn(v, v));
  }
  block_sum_pair(sum, squares, shared);
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = shared[0][0];
    sums[channels + blockIdx.x] = shared[1][0];
  }
}

__global__ void batch_norm_backward_sums_kernel(const float* x, const float* dy, int outer, int channels, int inner,
                                                const float* stats, double* sums) {
  __shared__ double shared[2][kThreads];
  const size_t n = static_cast<size_t>(outer) * static_cast<size_t>(inner);
  const float mean = stats[blockIdx.x], invstd = stats[channels + blockIdx.x];
  double dy_sum = 0.0, dy_xhat_sum = 0.0;
  for (size_t j = threadIdx.x; j < n; j += kThreads) {
    const size_t at = channel_at(j, channels, inner);
    const float xhat = __fmul_rn(__fsub_rn(x[at], mean), invstd);
    dy_sum += dy[at];
    dy_xhat_sum = __dadd_rn(dy_xhat_sum, __dmul_rn(static_cast<double>(dy[at]), static_cast<double>(xhat)));
  }
  block_sum_pair(dy_sum, dy_xhat_sum, shared);
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = shared[0][0];
    sums[channels + blockIdx.x] = shared[1][0];
  }
}

// Element-wise, rounded as the CPU's loops (no fused multiply-add): the same bits.
__global__ void batch_norm_apply_kernel(const float* x, size_t n, int channels, int inner, const float* stats,
                                        const float* gamma, const float* beta, float* y) {
  PSTRAIN_FOR_EACH(i, n) {
    const size_t c = (i / static_cast<size_t>(inner)) % static_cast<size_t>(channels);
    const float xhat = __fmul_rn(__fsub_rn(x[i], stats[c]), stats[channels + c]);
    y[i] = __fadd_rn(__fmul_rn(xhat, gamma[c]), beta[c]);
  }
}

__global__ void batch_norm_backward_apply_kernel(const float* x, const float* dy, size_t n, int channels, int inner,
                                                 const float* stats, const float* gamma, float* dx) {
  PSTRAIN_FOR_EACH(i, n) {
    const size_t c = (i / static_cast<size_t>(inner)) % static_cast<size_t>(channels);
    const float invstd = stats[channels + c];
    const float xhat = __fmul_rn(__fsub_rn(x[i], stats[c]), invstd);
    const float centred = __fsub_rn(__fsub_rn(dy[i], stats[2 * channels + c]), __fmul_rn(xhat, stats[3 * channels + c]));
    dx[i] = __fmul_rn(__fmul_rn(gamma[c], invstd), centred);
  }
}

// One thread per col entry: (b, patch row, position).
__global__ void im2col_kernel(const float* x, int batch, ConvGeometry g, float* col) {
  const size_t positions = g.positions(), patch = g.patch();
  const size_t n = static_cast<size_t>(batch) * patch * positions;
  PSTRAIN_FOR_EACH(i, n) {
    const size_t pos = i % positions, row = (i / positions) % patch, b = i / (positions * patch);
    const int kj = static_cast<int>(row % g.kernel), ki = static_cast<int>((row / g.kernel) % g.kernel);
    const int c = static_cast<int>(row / (static_cast<size_t>(g.kernel) * g.kernel));
    const int oy = static_cast<int>(pos / g.out_width), ox = static_cast<int>(pos % g.out_width);
    const int iy = oy * g.stride - g.pad + ki, ix = ox * g.stride - g.pad + kj;
    const bool inside = iy >= 0 && iy < g.height && ix >= 0 && ix < g.width;
    col[i] = inside ? x[b * g.input_size() + (static_cast<size_t>(c) * g.height + iy) * g.width + ix] : 0.0f;
  }
}

// One thread per input pixel, gathering in (ki, kj) order as the CPU does.
__global__ void col2im_kernel(const float* col, int batch, ConvGeometry g, float* dx) {
  const size_t positions = g.positions(), plane = static_cast<size_t>(g.height) * g.width;
  const size_t n = static_cast<size_t>(batch) * g.input_size();
  PSTRAIN_FOR_EACH(i, n) {
    const int ix = static_cast<int>(i % g.width), iy = static_cast<int>((i / g.width) % g.height);
    const size_t c = (i / plane) % g.channels, b = i / g.input_size();
    const float* cb = col + b * g.patch() * positions;
    float sum = 0.0f;
    for (int ki = 0; ki < g.kernel; ++ki) {
      const int ty = iy + g.pad - ki;
      if (ty < 0 || ty % g.stride != 0 || ty / g.stride >= g.out_height) continue;
      for (int kj = 0; kj < g.kernel; ++kj) {
        const int tx = ix + g.pad - kj;
        if (tx < 0 || tx % g.stride != 0 || tx / g.stride >= g.out_width) continue;
        sum += cb[((c * g.kernel + ki) * g.kernel + kj) * positions + (ty / g.stride) * g.out_width + tx / g.stride];
      }
    }
    dx[i] = sum;
  }
}

__global__ void pool_kernel(PoolKind kind, const float* x, int planes, PoolGeometry g, float* y) {
  const size_t outs = static_cast<size_t>(g.out_height) * g.out_width;
  const size_t n = static_cast<size_t>(planes) * outs;
  const float inv = 1.0f / static_cast<float>(g.kernel * g.kernel);
  PSTRAIN_FOR_EACH(i, n) {
    const size_t p = i / outs;
    const int oy = static_cast<int>((i % outs) / g.out_width), ox = static_cast<int>(i % g.out_width);
    const float* xp = x + p * g.height * g.width;
    float acc = kind == PoolKind::kMax ? -INFINITY : 0.0f;
    for (int ki = 0; ki < g.kernel; ++ki) {
      for (int kj = 0; kj < g.kernel; ++kj) {
        const float v = xp[(oy * g.stride + ki) * g.width + ox * g.stride + kj];
        acc = kind == PoolKind::kMax ? (v > acc ? v : acc) : acc + v;
      }
    }
    y[i] = kind == PoolKind::kMax ? acc : acc * inv;
  }
}

// One thread per input pixel; the same window order and first-maximum rule as the CPU.
__global__ void pool_backward_kernel(PoolKind kind, const float* x, const float* y, const float* dy, int planes,
                                     PoolGeometry g, float* dx) {
  const size_t ins = static_cast<size_t>(g.height) * g.width, outs = static_cast<size_t>(g.out_height) * g.out_width;
  const size_t n = static_cast<size_t>(planes) * ins;
  const float inv = 1.0f / static_cast<float>(g.kernel * g.kernel);
  PSTRAIN_FOR_EACH(i, n) {
    const size_t p = i / ins;
    const int iy = static_cast<int>((i % ins) / g.width), ix = static_cast<int>(i % g.width);
    const float* xp = x + p * ins;
    const float* yp = y + p * outs;
    const float* dyp = dy + p * outs;
    const int oy_lo = iy >= g.kernel ? (iy - g.kernel) / g.stride + 1 : 0;
    const int oy_hi = min(iy / g.stride, g.out_height - 1);
    const int ox_lo = ix >= g.kernel ? (ix - g.kernel) / g.stride + 1 : 0;
    const int ox_hi = min(ix / g.stride, g.out_width - 1);
    float sum = 0.0f;
    for (int oy = oy_lo; oy <= oy_hi; ++oy) {
      for (int ox = ox_lo; ox <= ox_hi; ++ox) {
        const float d = dyp[oy * g.out_width + ox];
        if (kind == PoolKind::kAverage) {
          sum += d * inv;
          continue;
        }
        const float m = yp[oy * g.out_width + ox];
        int first = -1;
        for (int k = 0; k < g.kernel * g.kernel && first < 0; ++k) {
          const int wy = oy * g.stride + k / g.kernel, wx = ox * g.stride + k % g.kernel;
          if (xp[wy * g.width + wx] == m) first = wy * g.width + wx;
        }
        if (first == iy * g.width + ix) sum += d;
      }
    }
    dx[i] = sum;
  }
}

__global__ void dropout_kernel(const float* x, float* y, int rows, int cols, float rate, const uint64_t* keys,
                               uint64_t salt) {
  const float scale = 1.0f / (1.0f - rate);
  const size_t n = static_cast<size_t>(rows) * cols;
  PSTRAIN_FOR_EACH(i, n) {
    const size_t r = i / cols, c = i % cols;
    y[i] = x[i] * (dropout_keep(keys[r], salt, c, rate) ? scale : 0.0f);
  }
}

// ---- dot interaction: one block per row ----

// The offset of pair (i, j), i < j, among a row's pair products (as the CPU's).
__device__ size_t pair_index(size_t i, size_t j, size_t fields) {
  return i * (2 * fields - i - 1) / 2 + (j - i - 1);
}

// The row's input copied, then one thread per pair (i, j), its (i, j) found by walking the rows of
// the pair triangle; each dot summed in order of k with unfused products, as the CPU sums it.
__global__ void dot_interaction_kernel(const float* x, int cols, int fields, int dim, float* y) {
  const size_t n = static_cast<size_t>(fields), pairs = n * (n - 1) / 2;
  const float* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  float* yr = y + static_cast<size_t>(blockIdx.x) * (cols + pairs);
  for (int e = threadIdx.x; e < cols; e += blockDim.x) yr[e] = xr[e];
  const float* v = xr + (static_cast<size_t>(cols) - n * dim);
  for (size_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    size_t i = 0, rest = p;
    while (rest >= n - 1 - i) rest -= n - 1 - i++;
    const float* vi = v + i * dim;
    const float* vj = v + (i + 1 + rest) * dim;
    float sum = 0.0f;
    for (int k = 0; k < dim; ++k) sum = __fadd_rn(sum, __fmul_rn(vi[k], vj[k]));
    yr[cols + p] = sum;
  }
}

// One thread per input element: dy's own value, then dy(i, j) * v_j[k] for j != i in increasing j.
__global__ void dot_interaction_backward_kernel(const float* x, const float* dy, int cols, int fields,
                                                int dim, float* dx) {
  const size_t n = static_cast<size_t>(fields), pairs = n * (n - 1) / 2;
  const size_t first = static_cast<size_t>(cols) - n * dim;
  const float* v = x + static_cast<size_t>(blockIdx.x) * cols + first;
  const float* dyr = dy + static_cast<size_t>(blockIdx.x) * (cols + pairs);
  float* dxr = dx + static_cast<size_t>(blockIdx.x) * cols;
  for (size_t e = threadIdx.x; e < static_cast<size_t>(cols); e += blockDim.x) {
    float sum = dyr[e];
    if (e >= first) {
      const size_t i = (e - first) / dim, k = (e - first) % dim;
      for (size_t j = 0; j < n; ++j) {
        if (j == i) continue;
        const float g = dyr[cols + (j < i ? pair_index(j, i, n) : pair_index(i, j, n))];
        sum = __fadd_rn(sum, __fmul_rn(g, v[j * dim + k]));
      }
    }
    dxr[e] = sum;
  }
}

// One thread per copied element.
__global__ void copy_columns_kernel(const float* src, int src_cols, int src_from, int n, float* dst, int dst_cols,
                                    int dst_from, size_t count) {
  PSTRAIN_FOR_EACH(i, count) {
    const size_t r = i / static_cast<size_t>(n), c = i % static_cast<size_t>(n);
    dst[r * dst_cols + dst_from + c] = src[r * src_cols + src_from + c];
  }
}

}  // namespace

void add_bias(float* y, const float* bias, int outer, int channels, int inner, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(outer) * channels * inner;
  if (n == 0) return;
  add_bias_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, bias, n, channels, inner);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void channel_sums(const float* dy, int outer, int channels, int inner, float* db, bool accumulate,
                  cudaStream_t stream) {
  if (channels <= 0) return;
  channel_sums_kernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(dy, outer, channels, inner, db,
                                                                                accumulate);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void layer_norm(const float* x, int rows, int cols, const float* gamma, const float* beta, float eps, float* y,
                cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  layer_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, cols, gamma, beta, eps, y);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void layer_norm_backward(const float* x, const float* dy, int rows, int cols, const float* gamma, float eps, float* dx,
                         float* dy_xhat, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  layer_norm_backward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, dy, cols, gamma, eps, dx,
                                                                                  dy_xhat);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void batch_norm_sums(const float* x, int outer, int channels, int inner, double* sums, cudaStream_t stream) {
  if (channels <= 0) return;
  batch_norm_sums_kernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(x, outer, channels, inner, sums);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void batch_norm_apply(const float* x, int outer, int channels, int inner, const float* stats, const float* gamma,
                      const float* beta, float* y, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(outer) * channels * inner;
  if (n == 0) return;
  batch_norm_apply_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, channels, inner, stats, gamma, beta, y);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void batch_norm_backward_sums(const float* x, const float* dy, int outer, int channels, int inner, const float* stats,
                              double* sums, cudaStream_t stream) {
  if (channels <= 0) return;
  batch_norm_backward_sums_kernel<<<static_cast<unsigned>(channels), kThreads, 0, stream>>>(x, dy, outer, channels,
                                                                                           inner, stats, sums);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void batch_norm_backward_apply(const float* x, const float* dy, int outer, int channels, int inner,
                               const float* stats, const float* gamma, float* dx, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(outer) * channels * inner;
  if (n == 0) return;
  batch_norm_backward_apply_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, dy, n, channels, inner, stats, gamma,
                                                                           dx);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void activation(Activation f, const float* x, float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  activation_kernel<<<blocks_for(n), kThreads, 0, stream>>>(f, x, y, n);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void add(const float* a, const float* b, float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a, b, y, n);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void multiply(const float* a, const float* b, float* y, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  multiply_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a, b, y, n);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void activation_backward(Activation f, const float* x, const float* y, const float* dy, float* dx, size_t n,
                         cudaStream_t stream) {
  if (n == 0) return;
  activation_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(f, x, y, dy, dx, n);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void im2col(const float* x, int batch, const ConvGeometry& g, float* col, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(batch) * g.patch() * g.positions();
  if (n == 0) return;
  im2col_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, batch, g, col);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void col2im(const float* col, int batch, const ConvGeometry& g, float* dx, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(batch) * g.input_size();
  if (n == 0) return;
  col2im_kernel<<<blocks_for(n), kThreads, 0, stream>>>(col, batch, g, dx);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void pool(PoolKind kind, const float* x, int planes, const PoolGeometry& g, float* y, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(planes) * g.out_height * g.out_width;
  if (n == 0) return;
  pool_kernel<<<blocks_for(n), kThreads, 0, stream>>>(kind, x, planes, g, y);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void pool_backward(PoolKind kind, const float* x, const float* y, const float* dy, int planes, const PoolGeometry& g,
                   float* dx, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(planes) * g.height * g.width;
  if (n == 0) return;
  pool_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(kind, x, y, dy, planes, g, dx);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void dropout(const float* x, float* y, int rows, int cols, float rate, const uint64_t* keys, uint64_t salt,
             cudaStream_t stream) {
  const size_t n = static_cast<size_t>(rows) * cols;
  if (n == 0) return;
  dropout_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, rows, cols, rate, keys, salt);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void dot_interaction(const float* x, int rows, int cols, int fields, int dim, float* y, cudaStream_t stream) {
  if (rows <= 0) return;
  dot_interaction_kernel<<<static_cast<unsigned>(rows), kDotThreads, 0, stream>>>(x, cols, fields, dim, y);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void dot_interaction_backward(const float* x, const float* dy, int rows, int cols, int fields, int dim,
                              float* dx, cudaStream_t stream) {
  if (rows <= 0) return;
  dot_interaction_backward_kernel<<<static_cast<unsigned>(rows), kDotThreads, 0, stream>>>(x, dy, cols,
                                                                                           fields, dim, dx);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

void copy_columns(const float* src, int rows, int src_cols, int src_from, int n, float* dst, int dst_cols,
                  int dst_from, cudaStream_t stream) {
  const size_t count = static_cast<size_t>(rows) * static_cast<size_t>(n);
  if (count == 0) return;
  copy_columns_kernel<<<blocks_for(count), kThreads, 0, stream>>>(src, src_cols, src_from, n, dst, dst_cols,
                                                                  dst_from, count);
  PSTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace kernels
}  // namespace pstrain
