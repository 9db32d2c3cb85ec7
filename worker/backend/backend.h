// The compute backend of a worker: GEMMs and the operations of the layers of worker/model/layers.h. The
// CPU backend (worker/cpu/) uses oneDNN; the CUDA backend (worker/cuda/) implements the same
// interface, each op computing what the CPU's computes (tests/cuda_backend_test.cc).
// All float pointers passed to a backend point into memory it allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "shared/util/modes.h"

namespace pstrain {

using BufferPtr = std::unique_ptr<float[], std::function<void(float*)>>;

#if defined(__CUDACC__)
#define PSTRAIN_HOST_DEVICE __host__ __device__
#else
#define PSTRAIN_HOST_DEVICE
#endif

// relu, tanh, sigmoid (logistic), gelu (exact: x * Phi(x), Phi the standard normal CDF, erf-based,
// as PyTorch's nn.GELU() by default).
enum class Activation { kRelu, kTanh, kSigmoid, kGelu };
enum class PoolKind { kMax, kAverage };

// A 2-D convolution's input and output sizes (per sample; NCHW).
struct ConvGeometry {
  int channels = 1, height = 1, width = 1;  // input
  int kernel = 1, stride = 1, pad = 0;
  int out_height = 1, out_width = 1;        // (H + 2P - K) / S + 1
  PSTRAIN_HOST_DEVICE size_t patch() const { return static_cast<size_t>(channels) * kernel * kernel; }  // rows of col
  PSTRAIN_HOST_DEVICE size_t positions() const { return static_cast<size_t>(out_height) * out_width; }   // columns of col
  PSTRAIN_HOST_DEVICE size_t input_size() const { return static_cast<size_t>(channels) * height * width; }
};

// The default convolution (Backend::conv_forward) unfolds this many floats' worth of samples at a
// time (at least one sample).
constexpr size_t kColumnChunkFloats = size_t{4} << 20;

// A pooling window over planes of [H, W] (no padding; windows that would pass the edge are not
// taken: OH = (H - K) / S + 1).
struct PoolGeometry {
  int height = 1, width = 1, kernel = 1, stride = 1, out_height = 1, out_width = 1;
};

// Whether dropout keeps element `col` of the row of sample `key`: a hash of (key, salt, col) as a
// uniform in [0, 1) compared with `rate`. The same function on every backend, so masks agree
// bit for bit, and a function of the sample's record (not the worker), so N workers equal one.
PSTRAIN_HOST_DEVICE inline bool dropout_keep(uint64_t key, uint64_t salt, uint64_t col, float rate) {
  uint64_t z = key * 0x9e3779b97f4a7c15ULL ^ salt ^ (col * 0xd1b54a32d192ed03ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
  return u >= rate;
}

struct BatchStats {
  double loss_sum = 0;   // summed cross-entropy over the batch
  int64_t correct = 0;   // samples whose arg-max logit is the label
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Whether buffers from allocate() are ordinary host memory (CPU) or device memory (CUDA).
  virtual bool host_accessible() const = 0;
  // Bytes currently held: allocate()d buffers plus the backend's own workspace and scratch.
  virtual size_t bytes_allocated() const = 0;
  // Device memory measured as taken since the backend was made (CUDA: the drop in cudaMemGetInfo's
  // free bytes, which other processes on the same GPU disturb); 0 for host backends, and 0 when
  // CUDA cannot measure it (never throws).
  virtual size_t device_bytes_used() const { return 0; }
  // The CUDA device index the backend computes on; -1 for host backends.
  virtual int cuda_device() const { return -1; }

  // Returns once all work queued so far has finished (CUDA launches are asynchronous).
  virtual void synchronize() {}
  // Allocates now whatever per-batch scratch batches of up to `rows` need, so that it is in
  // bytes_allocated() (and in the worker's memory plan) before the first step.
  virtual void reserve_batch(int rows) { (void)rows; }
  // What reserve_batch(rows) would hold in all, for a memory plan made before it is called.
  virtual size_t batch_scratch_bytes(int rows) const { (void)rows; return 0; }
  // Device memory free now (CUDA: cudaMemGetInfo); 0 for host backends (no limit known).
  virtual size_t free_device_bytes() const { return 0; }

  virtual BufferPtr allocate(size_t n) = 0;  // n floats, zeroed
  // n floats of host memory for staging transfers (pinned on CUDA); not in bytes_allocated().
  virtual BufferPtr allocate_host(size_t n) = 0;
  virtual void upload(float* dst, const float* host, size_t n) = 0;
  virtual void download(float* host, const float* src, size_t n) = 0;

  // Row-major C[m,n] = alpha * op(A) op(B) + beta * C; op(A) is [m,k], op(B) is [k,n].
  virtual void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;
  // gemm on `count` triples: A_i = a + i * stride_a (stride 0: one A for all), B_i, C_i likewise
  // (C's stride must not be 0).
  virtual void gemm_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                            size_t stride_a, const float* b, size_t stride_b, float beta, float* c,
                            size_t stride_c, int count) = 0;
  // C = beta * C + the sum over i < count of alpha * op(A_i) op(B_i), the terms added in order of i
  // (a convolution's weight gradient over the samples of a batch). By default a gemm per term.
  virtual void gemm_sum(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                        size_t stride_a, const float* b, size_t stride_b, float beta, float* c, int count) {
    for (int i = 0; i < count; ++i) {
      gemm(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, b + i * stride_b, i == 0 ? beta : 1.0f, c);
    }
  }

  // A convolution layer (worker/model/layers.cc, Conv) of `outputs` channels: y[batch, outputs, OH, OW] =
  // the correlation of x[batch, C, H, W] with w[outputs, C, K, K] (zero padding) + bias[outputs].
  // `scratch` holds conv_scratch_floats(batch, g, outputs) floats (part of the memory plan; any
  // smaller batch needs no more). By default: im2col of kColumnChunkFloats' worth of samples at a
  // time and one gemm per sample (gemm_batched), then add_bias.
  virtual size_t conv_scratch_floats(int batch, const ConvGeometry& g, int outputs) const;
  virtual void conv_forward(const float* x, int batch, const ConvGeometry& g, int outputs, const float* w,
                            const float* bias, float* y, float* scratch);
  // Its backward: dw = the sum over the samples of their weight gradients (added to dw when
  // `accumulate`), db likewise (bias_grad), dx (skipped when null) the input's gradient. By
  // default the per-sample products of gemm_sum, added in sample order, and col2im.
  virtual void conv_backward(const float* x, const float* dy, int batch, const ConvGeometry& g, int outputs,
                             const float* w, float* dx, float* dw, float* db, bool accumulate,
                             float* scratch);

  // The layer operations (worker/model/layers.h). Arrays are row-major; "planes" index batch x channels.
  // y[o, c, i] += bias[c] for o < outer, c < channels, i < inner (dense: inner 1; conv: H x W).
  virtual void add_bias(float* y, const float* bias, int outer, int channels, int inner) = 0;
  // db[c] = sum over o, i of dy[o, c, i], added to db[c] when `accumulate`.
  virtual void bias_grad(const float* dy, int outer, int channels, int inner, float* db, bool accumulate) = 0;
  // y = f(x) element-wise; y may be x.
  virtual void activation(Activation f, const float* x, float* y, size_t n) = 0;
  // y = a + b element-wise (a residual block's output, and its input's two gradients); y may be
  // a or b.
  virtual void add(const float* a, const float* b, float* y, size_t n) = 0;
  // y = a * b element-wise (a cross layer's x0 * (W x + b) and its gradients), one rounding; y may
  // be a or b. By default a loop on the host, for host-accessible backends (the CPU's); the CUDA
  // backend has a kernel.
  virtual void multiply(const float* a, const float* b, float* y, size_t n);
  // dx = dy * f'(x): from the activation's output y (relu, tanh, sigmoid; x may then be null) or
  // its input x (gelu); dx may be dy.
  virtual void activation_backward(Activation f, const float* x, const float* y, const float* dy, float* dx,
                                   size_t n) = 0;
  // col[b] = the [C*K*K, OH*OW] patch matrix of sample b of x[batch, C, H, W] (zero padding):
  // row (c*K + ki)*K + kj, column oy*OW + ox holds x[b, c, oy*S - P + ki, ox*S - P + kj].
  virtual void im2col(const float* x, int batch, const ConvGeometry& g, float* col) = 0;
  // The adjoint: dx[batch, C, H, W] = the sum of every col entry over the pixel it was read from.
  virtual void col2im(const float* col, int batch, const ConvGeometry& g, float* dx) = 0;
  // y[p, oy, ox] = max (or mean) of x[p] over the window at (oy*S, ox*S), for p < planes.
  // `scratch` holds pool_scratch_floats(kind, planes, g) floats (part of the
  // memory plan; fewer planes need no more); 0 by default.
  virtual size_t pool_scratch_floats(PoolKind kind, int planes, const PoolGeometry& g) const {
    (void)kind, (void)planes, (void)g;
    return 0;
  }
  virtual void pool(PoolKind kind, const float* x, int planes, const PoolGeometry& g, float* y, float* scratch) = 0;
  // dx of pool: max sends dy to the first position of its window holding the maximum, mean
  // spreads it evenly; dx is overwritten (sums over overlapping windows in a fixed order).
  virtual void pool_backward(PoolKind kind, const float* x, const float* y, const float* dy, int planes,
                             const PoolGeometry& g, float* dx, float* scratch) = 0;
  // y[r, c] = x[r, c] * (dropout_keep(keys[r], salt, c, rate) ? 1 / (1 - rate) : 0), keys in host
  // memory (one per row: the sample's record); y may be x. The same call is its own backward.
  virtual void dropout(const float* x, float* y, int rows, int cols, float rate, const uint64_t* keys,
                       uint64_t salt) = 0;

  // Layer normalisation of each row of x[rows, cols]: y = (x - mean) / sqrt(var + eps) * gamma +
  // beta, the mean and (biased) variance over the row. y may not be x.
  virtual void layer_norm(const float* x, int rows, int cols, const float* gamma, const float* beta, float eps,
                          float* y) = 0;
  // Its backward, the row's statistics recomputed from x: dx = rstd (g - mean(g) - xhat mean(g
  // xhat)) with g = dy gamma and xhat = (x - mean) rstd; and dy_xhat = dy * xhat, whose column
  // sums are gamma's gradient (beta's: dy's). dx may not alias x or dy.
  virtual void layer_norm_backward(const float* x, const float* dy, int rows, int cols, const float* gamma, float eps,
                                   float* dx, float* dy_xhat) = 0;

  // Batch normalisation (worker/model/layers.cc, `batchnorm`) over x[outer, channels, inner]: channel c's
  // values are x[o, c, i] for every o < outer, i < inner (after a dense layer: inner 1, a feature
  // per channel; after a conv: inner H x W). host_sums (host memory, 2 x channels) receives each
  // channel's sum of x, then its sum of x^2, summed in double in a fixed order per channel (the
  // same bits every run, whatever --threads).
  virtual void batch_norm_sums(const float* x, int outer, int channels, int inner, double* host_sums) = 0;
  // y = (x - mean[c]) * invstd[c] * gamma[c] + beta[c], with stats = [mean | invstd] (2 x channels,
  // backend memory). y may be x.
  virtual void batch_norm_apply(const float* x, int outer, int channels, int inner, const float* stats,
                                const float* gamma, const float* beta, float* y) = 0;
  // Backward's sums: host_sums[c] = the sum of dy over channel c, host_sums[channels + c] = that of
  // dy * xhat, xhat = (x - mean[c]) * invstd[c] (stats as batch_norm_apply's); in double, fixed
  // order.
  virtual void batch_norm_backward_sums(const float* x, const float* dy, int outer, int channels, int inner,
                                        const float* stats, double* host_sums) = 0;
  // dx = gamma[c] * invstd[c] * (dy - stats[2C + c] - xhat * stats[3C + c]), stats = [mean | invstd |
  // mean of dy | mean of dy * xhat] (4 x channels, backend memory). dx may be dy, not x.
  virtual void batch_norm_backward_apply(const float* x, const float* dy, int outer, int channels, int inner,
                                         const float* stats, const float* gamma, float* dx) = 0;

  // The pairwise dot products of the `fields` vectors of `dim` floats that end each row of
  // x[rows, cols] (v_f = x[r, cols - fields*dim + f*dim ...]): y[r] = x[r] followed by <v_i, v_j>
  // for i < j in the order (0,1), (0,2), ..., (1,2), ...; y is [rows, cols + fields(fields-1)/2].
  // Each dot is summed in float in order of the element, products rounded before they are added
  // (no fused multiply-add), on every backend. y may not alias x.
  virtual void dot_interaction(const float* x, int rows, int cols, int fields, int dim, float* y) = 0;
  // Its backward: dx[r] = dy[r, :cols], plus on v_i's part dy(i,j) * v_j for each j != i, added in
  // increasing j after dy's own value (dy(i,j) = dy(j,i) the pair's gradient). dx may not alias x
  // or dy.
  virtual void dot_interaction_backward(const float* x, const float* dy, int rows, int cols, int fields,
                                        int dim, float* dx) = 0;

  // Copies n columns between row-major matrices of `rows` rows: dst[r, dst_from + c] = src[r,
  // src_from + c] for c < n (a bottom block's split of its input and joining of its output). Exact
  // (copies only); src and dst must not overlap.
  virtual void copy_columns(const float* src, int rows, int src_cols, int src_from, int n, float* dst, int dst_cols,
                            int dst_from) = 0;

  // Softmax cross-entropy of logits[rows, cols] against host labels, smoothed: the target is
  // q = (1 - smoothing) onehot(label) + smoothing / cols (0: the label alone), and the loss
  // -sum_c q_c log softmax_c. If dlogits is not null it receives the gradient of the summed loss
  // (softmax - q), per sample. `correct` counts arg-max == label either way.
  virtual BatchStats softmax_xent(const float* logits, const int32_t* labels, int rows, int cols, float* dlogits,
                                  float smoothing) = 0;

  // A loss of float targets (--loss bce | mse | huber, never kSoftmax) of outputs[rows, cols]
  // against targets[rows, cols] in backend memory: a sample's loss is the mean over its cols of
  // worker/backend/loss_math.h's element_loss (in double, in column order), loss_sum the samples' sum in
  // row order; `correct` is 0. If doutputs is not null it receives the summed loss's gradient,
  // element_grad (it may alias outputs).
  virtual BatchStats target_loss(Loss loss, const float* outputs, const float* targets, int rows, int cols,
                                 float huber_delta, float* doutputs) = 0;
};

// The device a worker computes on (filled from the job's flags in main: worker/options_from_job.h).
struct BackendOptions {
  DeviceKind device = DeviceKind::kAuto;  // --device (auto: a GPU where one is visible)
  int device_index = -1;                  // cuda:K's K; -1: none given (local_rank's GPU)
  int threads = 1;                  // --threads: BLAS threads of the CPU backend
  int local_rank = -1;              // --device auto and cuda: GPU local_rank mod visible GPUs (-1: GPU 0)
  double gpu_memory_limit_mib = 0;  // --gpu-memory-limit: a GPU backend allocates no more (0 = no limit)
};

// The backend for --device (BackendOptions::device): the CPU, a GPU by number, or with auto GPU
// (local rank mod visible GPUs) where one is visible. Throws pstrain::Error if a GPU is asked for
// and none is usable.
std::unique_ptr<Backend> make_backend(const BackendOptions& options);

// oneDNN's kernels (worker/cpu/), the work split over `threads` threads.
std::unique_ptr<Backend> make_cpu_backend(int threads);

// CUDA (worker/cuda/): the number of usable GPUs, 0 when the build has no CUDA or no device is
// present (never throws).
int cuda_device_count();
// cuBLAS backend on GPU `device`. Throws pstrain::Error if CUDA is unavailable, or if an
// allocation would take the backend past memory_limit_bytes (0 = no limit).
std::unique_ptr<Backend> make_cuda_backend(int device, size_t memory_limit_bytes);

}  // namespace pstrain
