#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/backend/backend.h"
#include "worker/backend/loss_math.h"
#include "worker/cpu/cpu_conv.h"
#include "worker/cpu/cpu_gemm.h"
#include "worker/cpu/cpu_pool.h"
#include "worker/cpu/thread_pool.h"

namespace pstrain {
namespace {

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc) {
  cpu_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The kernels, serial; the backend runs them on ranges of samples, planes or elements.
void add_bias_serial(float* y, const float* bias, int outer, int channels, int inner) {
  if (inner == 1) {  // dense: one loop over a row, which the compiler vectorises
    for (int o = 0; o < outer; ++o) {
      float* row = y + static_cast<size_t>(o) * channels;
      for (int c = 0; c < channels; ++c) row[c] += bias[c];
    }
    return;
  }
  for (int o = 0; o < outer; ++o) {
    for (int c = 0; c < channels; ++c) {
      float* row = y + (static_cast<size_t>(o) * channels + c) * inner;
      for (int i = 0; i < inner; ++i) row[i] += bias[c];
    }
  }
}

// Dense (inner 1): the rows of dy added in row order (as the CUDA kernel does per column).
void bias_grad_rows(const float* dy, int outer, int channels, float* db) {
  for (int o = 0; o < outer; ++o) {
    const float* row = dy + static_cast<size_t>(o) * channels;
    for (int c = 0; c < channels; ++c) db[c] += row[c];
  }
}

// Convolution, channels [c0, c1): each channel's planes summed in kLanes interleaved partial sums
// (a fixed order, which the compiler turns into vector adds), then the lanes in order.
void bias_grad_planes(const float* dy, int outer, int channels, int inner, float* db, size_t c0, size_t c1) {
  constexpr int kLanes = 16;
  const int whole = inner - inner % kLanes;
  for (size_t c = c0; c < c1; ++c) {
    float lanes[kLanes] = {};
    float tail = 0.0f;
    for (int o = 0; o < outer; ++o) {
      const float* plane = dy + (static_cast<size_t>(o) * channels + c) * inner;
      for (int i = 0; i < whole; i += kLanes) {
        for (int j = 0; j < kLanes; ++j) lanes[j] += plane[i + j];
      }
      for (int i = whole; i < inner; ++i) tail += plane[i];
    }
    float sum = tail;
    for (int j = 0; j < kLanes; ++j) sum += lanes[j];
    db[c] += sum;
  }
}

void activation_serial(Activation f, const float* x, float* y, size_t n) {
  switch (f) {
    case Activation::kRelu:
      for (size_t i = 0; i < n; ++i) y[i] = std::max(x[i], 0.0f);
      break;
    case Activation::kTanh:
      for (size_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
      break;
    case Activation::kSigmoid:
      for (size_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
      break;
    case Activation::kGelu:
      for (size_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * static_cast<float>(M_SQRT1_2)));
      break;
  }
}

void activation_backward_serial(Activation f, const float* x, const float* y, const float* dy, float* dx, size_t n) {
  if (f == Activation::kSigmoid) {
    for (size_t i = 0; i < n; ++i) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
  } else if (f == Activation::kGelu) {  // Phi(x) + x phi(x)
    const float inv_sqrt_2pi = 0.3989422804014327f;
    for (size_t i = 0; i < n; ++i) {
      const float v = x[i];
      dx[i] = dy[i] * (0.5f * (1.0f + std::erf(v * static_cast<float>(M_SQRT1_2))) +
                       v * inv_sqrt_2pi * std::exp(-0.5f * v * v));
    }
  } else if (f == Activation::kRelu) {
    // dy[i] read unconditionally: a select the compiler vectorises, not a branch per element
    // that mispredicts on half of them (this loop was 6% of a 64-sample MLP step).
    for (size_t i = 0; i < n; ++i) {
      const float g = dy[i];
      dx[i] = y[i] > 0.0f ? g : 0.0f;
    }
  } else {
    for (size_t i = 0; i < n; ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
  }
}

// A row's mean and 1 / sqrt(variance + eps), summed in double in order.
void row_stats(const float* x, int cols, float eps, float* mean, float* rstd) {
  double sum = 0;
  for (int j = 0; j < cols; ++j) sum += x[j];
  const double m = sum / cols;
  double sq = 0;
  for (int j = 0; j < cols; ++j) sq += (x[j] - m) * (x[j] - m);
  *mean = static_cast<float>(m);
  *rstd = static_cast<float>(1.0 / std::sqrt(sq / cols + eps));
}

void layer_norm_serial(const float* x, int rows, int cols, const float* gamma, const float* beta, float eps, float* y) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * cols;
    float* yr = y + static_cast<size_t>(r) * cols;
    float mean = 0, rstd = 0;
    row_stats(xr, cols, eps, &mean, &rstd);
    for (int j = 0; j < cols; ++j) yr[j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
  }
}

void layer_norm_backward_serial(const float* x, const float* dy, int rows, int cols, const float* gamma, float eps,
                                float* dx, float* dy_xhat) {
  for (int r = 0; r < rows; ++r) {
    const size_t at = static_cast<size_t>(r) * cols;
    float mean = 0, rstd = 0;
    row_stats(x + at, cols, eps, &mean, &rstd);
    double g_sum = 0, gx_sum = 0;
    for (int j = 0; j < cols; ++j) {
      const float xhat = (x[at + j] - mean) * rstd, g = dy[at + j] * gamma[j];
      g_sum += g;
      gx_sum += static_cast<double>(g) * xhat;
      dy_xhat[at + j] = dy[at + j] * xhat;
    }
    const auto g_mean = static_cast<float>(g_sum / cols), gx_mean = static_cast<float>(gx_sum / cols);
    for (int j = 0; j < cols; ++j) {
      const float xhat = (x[at + j] - mean) * rstd;
      dx[at + j] = rstd * (dy[at + j] * gamma[j] - g_mean - xhat * gx_mean);
    }
  }
}

// Batch normalisation over x[outer, channels, inner]: the sums of channels [lo, hi), each in
// double in order of (o, i), so a channel's result does not depend on how channels are split.
void batch_norm_sums_serial(const float* x, int outer, int channels, int inner, double* sums, size_t lo,
                            size_t hi) {
  for (size_t c = lo; c < hi; ++c) {
    double sum = 0, squares = 0;
    for (int o = 0; o < outer; ++o) {
      const float* v = x + (static_cast<size_t>(o) * channels + c) * inner;
      for (int i = 0; i < inner; ++i) {
        sum += v[i];
        squares += static_cast<double>(v[i]) * v[i];
      }
    }
    sums[c] = sum;
    sums[channels + c] = squares;
  }
}

void batch_norm_backward_sums_serial(const float* x, const float* dy, int outer, int channels, int inner,
                                     const float* stats, double* sums, size_t lo, size_t hi) {
  for (size_t c = lo; c < hi; ++c) {
    const float mean = stats[c], invstd = stats[channels + c];
    double dy_sum = 0, dy_xhat_sum = 0;
    for (int o = 0; o < outer; ++o) {
      const size_t at = (static_cast<size_t>(o) * channels + c) * inner;
      for (int i = 0; i < inner; ++i) {
        const float xhat = (x[at + i] - mean) * invstd;
        dy_sum += dy[at + i];
        dy_xhat_sum += static_cast<double>(dy[at + i]) * xhat;
      }
    }
    sums[c] = dy_sum;
    sums[channels + c] = dy_xhat_sum;
  }
}

// Rows [0, outer) of y = (x - mean) invstd gamma + beta (forward), or of backward's dx.
void batch_norm_apply_serial(const float* x, int outer, int channels, int inner, const float* stats,
                             const float* gamma, const float* beta, float* y) {
  for (int o = 0; o < outer; ++o) {
    for (int c = 0; c < channels; ++c) {
      const size_t at = (static_cast<size_t>(o) * channels + c) * inner;
      const float mean = stats[c], invstd = stats[channels + c], g = gamma[c], b = beta[c];
      for (int i = 0; i < inner; ++i) y[at + i] = (x[at + i] - mean) * invstd * g + b;
    }
  }
}

void batch_norm_backward_apply_serial(const float* x, const float* dy, int outer, int channels, int inner,
                                      const float* stats, const float* gamma, float* dx) {
  for (int o = 0; o < outer; ++o) {
    for (int c = 0; c < channels; ++c) {
      const size_t at = (static_cast<size_t>(o) * channels + c) * inner;
      const float mean = stats[c], invstd = stats[channels + c];
      const float dy_mean = stats[2 * channels + c], dy_xhat_mean = stats[3 * channels + c];
      const float scale = gamma[c] * invstd;
      for (int i = 0; i < inner; ++i) {
        const float xhat = (x[at + i] - mean) * invstd;
        dx[at + i] = scale * (dy[at + i] - dy_mean - xhat * dy_xhat_mean);
      }
    }
  }
}

void im2col_serial(const float* x, int batch, const ConvGeometry& g, float* col) {
  const size_t positions = g.positions();
  for (int b = 0; b < batch; ++b) {
    const float* xb = x + static_cast<size_t>(b) * g.input_size();
    float* cb = col + static_cast<size_t>(b) * g.patch() * positions;
    for (int c = 0; c < g.channels; ++c) {
      const float* plane = xb + static_cast<size_t>(c) * g.height * g.width;
      for (int ki = 0; ki < g.kernel; ++ki) {
        for (int kj = 0; kj < g.kernel; ++kj) {
          float* row = cb + ((static_cast<size_t>(c) * g.kernel + ki) * g.kernel + kj) * positions;
          // Output columns whose input column ox*S - P + kj lies inside [0, W).
          const int ox_lo = std::min(g.out_width, std::max(0, (g.pad - kj + g.stride - 1) / g.stride));
          const int ox_hi = std::max(ox_lo, std::min(g.out_width, (g.width + g.pad - kj + g.stride - 1) / g.stride));
          for (int oy = 0; oy < g.out_height; ++oy) {
            float* out = row + static_cast<size_t>(oy) * g.out_width;
            const int iy = oy * g.stride - g.pad + ki;
            if (iy < 0 || iy >= g.height) {
              std::fill(out, out + g.out_width, 0.0f);
              continue;
            }
            const float* in = plane + static_cast<size_t>(iy) * g.width - g.pad + kj;
            std::fill(out, out + ox_lo, 0.0f);
            if (g.stride == 1) {
              std::copy(in + ox_lo, in + ox_hi, out + ox_lo);
            } else {
              for (int ox = ox_lo; ox < ox_hi; ++ox) out[ox] = in[ox * g.stride];
            }
            std::fill(out + ox_hi, out + g.out_width, 0.0f);
          }
        }
      }
    }
  }
}

void col2im_serial(const float* col, int batch, const ConvGeometry& g, float* dx) {
  // Scattered in (c, ki, kj, oy, ox) order: each pixel receives its terms in (ki, kj) order
  // starting from 0, the order in which the CUDA kernel gathers them, so both sum alike.
  const size_t positions = g.positions();
  std::fill(dx, dx + static_cast<size_t>(batch) * g.input_size(), 0.0f);
  for (int b = 0; b < batch; ++b) {
    const float* cb = col + static_cast<size_t>(b) * g.patch() * positions;
    float* db = dx + static_cast<size_t>(b) * g.input_size();
    for (int c = 0; c < g.channels; ++c) {
      float* plane = db + static_cast<size_t>(c) * g.height * g.width;
      for (int ki = 0; ki < g.kernel; ++ki) {
        for (int kj = 0; kj < g.kernel; ++kj) {
          const float* row = cb + ((static_cast<size_t>(c) * g.kernel + ki) * g.kernel + kj) * positions;
          const int ox_lo = std::min(g.out_width, std::max(0, (g.pad - kj + g.stride - 1) / g.stride));
          const int ox_hi = std::max(ox_lo, std::min(g.out_width, (g.width + g.pad - kj + g.stride - 1) / g.stride));
          for (int oy = 0; oy < g.out_height; ++oy) {
            const int iy = oy * g.stride - g.pad + ki;
            if (iy < 0 || iy >= g.height) continue;
            const float* in = row + static_cast<size_t>(oy) * g.out_width;
            float* out = plane + static_cast<size_t>(iy) * g.width - g.pad + kj;
            for (int ox = ox_lo; ox < ox_hi; ++ox) out[ox * g.stride] += in[ox];
          }
        }
      }
    }
  }
}

// The 2x2 max pooling of stride 2 that tiles its plane (CpuPool::on_onednn false): a straight-line
// loop, 3-10x faster than oneDNN's primitive (cpu_pool.h); every other window runs on oneDNN.
void max_pool_2x2_serial(const float* x, int planes, const PoolGeometry& g, float* y) {
  for (int p = 0; p < planes; ++p) {
    const float* xp = x + static_cast<size_t>(p) * g.height * g.width;
    float* yp = y + static_cast<size_t>(p) * g.out_height * g.out_width;
    for (int oy = 0; oy < g.out_height; ++oy) {
      const float* r0 = xp + static_cast<size_t>(2 * oy) * g.width;
      const float* r1 = r0 + g.width;
      float* out = yp + static_cast<size_t>(oy) * g.out_width;
      for (int ox = 0; ox < g.out_width; ++ox) {  // row major; NaN never wins (as oneDNN's)
        float acc = -INFINITY;
        acc = r0[2 * ox] > acc ? r0[2 * ox] : acc;
        acc = r0[2 * ox + 1] > acc ? r0[2 * ox + 1] : acc;
        acc = r1[2 * ox] > acc ? r1[2 * ox] : acc;
        acc = r1[2 * ox + 1] > acc ? r1[2 * ox + 1] : acc;
        out[ox] = acc;
      }
    }
  }
}

// Its backward: dy to the first position of each window holding the maximum.
void max_pool_2x2_backward_serial(const float* x, const float* y, const float* dy, int planes, const PoolGeometry& g,
                                  float* dx) {
  for (int p = 0; p < planes; ++p) {
    const float* xp = x + static_cast<size_t>(p) * g.height * g.width;
    float* dxp = dx + static_cast<size_t>(p) * g.height * g.width;
    const size_t out_plane = static_cast<size_t>(p) * g.out_height * g.out_width;
    for (int oy = 0; oy < g.out_height; ++oy) {
      const size_t r0 = static_cast<size_t>(2 * oy) * g.width, r1 = r0 + g.width;
      const float* yr = y + out_plane + static_cast<size_t>(oy) * g.out_width;
      const float* dyr = dy + out_plane + static_cast<size_t>(oy) * g.out_width;
      for (int ox = 0; ox < g.out_width; ++ox) {  // the first position (row major) holding the maximum
        // Bitwise, not short-circuit: no branches to mispredict on data-dependent maxima.
        const float m = yr[ox], d = dyr[ox];
        const int a = xp[r0 + 2 * ox] == m;
        const int b = (xp[r0 + 2 * ox + 1] == m) & ~a;
        const int c = (xp[r1 + 2 * ox] == m) & ~(a | b);
        const int e = (xp[r1 + 2 * ox + 1] == m) & ~(a | b | c);
        dxp[r0 + 2 * ox] = a ? d : 0.0f;
        dxp[r0 + 2 * ox + 1] = b ? d : 0.0f;
        dxp[r1 + 2 * ox] = c ? d : 0.0f;
        dxp[r1 + 2 * ox + 1] = e ? d : 0.0f;
      }
    }
  }
}


void dropout_serial(const float* x, float* y, int rows, int cols, float rate, const uint64_t* keys, uint64_t salt) {
  const float scale = 1.0f / (1.0f - rate);
  for (int r = 0; r < rows; ++r) {
    const size_t base = static_cast<size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) {
      y[base + c] = x[base + c] * (dropout_keep(keys[r], salt, static_cast<uint64_t>(c), rate) ? scale : 0.0f);
    }
  }
}

// The dot interaction works in blocks of kDotBlock sums held in registers (two SSE vectors): the
// compiler unrolls the loop over a block and vectorises it; each sum is still its own chain of
// additions in a fixed order, so blocking changes no bits.
constexpr int kDotBlock = 8;

// The dot interaction of rows one by one. The fields' vectors are transposed into vt[dim][stride]
// (scratch: dot_scratch_floats), stride = fields + kDotBlock - 1 with zero columns after the last
// field, so that for a fixed i the sums <v_i, v_j> of a block of j > i advance together, one
// element k at a time, each summed in order of k from 0.
size_t dot_scratch_floats(int fields, int dim) { return static_cast<size_t>(dim) * (fields + kDotBlock - 1); }

void dot_interaction_serial(const float* x, int rows, int cols, int fields, int dim, float* y, float* vt) {
  const size_t pairs = static_cast<size_t>(fields) * (fields - 1) / 2, width = cols + pairs;
  const size_t first = static_cast<size_t>(cols) - static_cast<size_t>(fields) * dim;
  const size_t stride = static_cast<size_t>(fields) + kDotBlock - 1;
  std::fill(vt, vt + dot_scratch_floats(fields, dim), 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * cols;
    float* yr = y + static_cast<size_t>(r) * width;
    std::memcpy(yr, xr, static_cast<size_t>(cols) * sizeof(float));
    const float* v = xr + first;
    for (int f = 0; f < fields; ++f) {
      for (int k = 0; k < dim; ++k) vt[k * stride + f] = v[static_cast<size_t>(f) * dim + k];
    }
    float* out = yr + cols;
    for (int i = 0; i + 1 < fields; ++i) {
      for (int j0 = i + 1; j0 < fields; j0 += kDotBlock) {
        float acc[kDotBlock] = {};
        for (int k = 0; k < dim; ++k) {
          const float* row = vt + k * stride;
          const float a = row[i];
          for (int t = 0; t < kDotBlock; ++t) acc[t] += a * row[j0 + t];
        }
        const int n = std::min(kDotBlock, fields - j0);
        out = std::copy(acc, acc + n, out);
      }
    }
  }
}

// acc[t] += a * b[t] for a block.
inline void add_block(float* acc, float a, const float* b) {
  for (int t = 0; t < kDotBlock; ++t) acc[t] += a * b[t];
}

// The offset of pair (i, j), i < j, among a row's pair products.
size_t pair_index(size_t i, size_t j, size_t fields) { return i * (2 * fields - i - 1) / 2 + (j - i - 1); }

// Its backward; g: `fields` floats of scratch (field i's pair gradients). Each element of v_i's
// gradient: dy's own value, then g_j * v_j[k] for j != i in increasing j, in blocks of kDotBlock
// elements held in registers.
void dot_interaction_backward_serial(const float* x, const float* dy, int rows, int cols, int fields, int dim,
                                     float* dx, float* g) {
  const size_t n = static_cast<size_t>(fields), pairs = n * (n - 1) / 2, width = cols + pairs;
  const size_t first = static_cast<size_t>(cols) - n * dim;
  const int whole = dim - dim % kDotBlock;
  for (int r = 0; r < rows; ++r) {
    const float* dyr = dy + static_cast<size_t>(r) * width;
    float* dxr = dx + static_cast<size_t>(r) * cols;
    std::memcpy(dxr, dyr, first * sizeof(float));
    const float* v = x + static_cast<size_t>(r) * cols + first;
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j)
        g[j] = j == i ? 0.0f : dyr[cols + (j < i ? pair_index(j, i, n) : pair_index(i, j, n))];
      const float* own = dyr + first + i * dim;
      float* d = dxr + first + i * dim;
      for (int k0 = 0; k0 < whole; k0 += kDotBlock) {
        float acc[kDotBlock];
        for (int t = 0; t < kDotBlock; ++t) acc[t] = own[k0 + t];
        for (size_t j = 0; j < i; ++j) add_block(acc, g[j], v + j * dim + k0);
        for (size_t j = i + 1; j < n; ++j) add_block(acc, g[j], v + j * dim + k0);
        std::copy(acc, acc + kDotBlock, d + k0);
      }
      for (int k = whole; k < dim; ++k) {
        float acc = own[k];
        for (size_t j = 0; j < n; ++j) {
          if (j != i) acc += g[j] * v[j * dim + k];
        }
        d[k] = acc;
      }
    }
  }
}

class CpuBackend final : public Backend {
 public:
  // Each product runs on one thread (cpu_gemm.h): the backend splits the work itself.
  explicit CpuBackend(int threads)
      : threads_(std::max(threads, 1)),
        pool_(threads_),
        conv_(pool_),
        pooling_(pool_),
        name_("cpu (" + cpu_kernels().text() + ")") {}

  std::string name() const override { return name_; }
  bool host_accessible() const override { return true; }
  size_t bytes_allocated() const override { return *allocated_; }

  BufferPtr allocate(size_t n) override {
    *allocated_ += n * sizeof(float);
    return BufferPtr(new float[n](), [allocated = allocated_, n](float* p) {
      *allocated -= n * sizeof(float);
      delete[] p;
    });
  }
  BufferPtr allocate_host(size_t n) override {
    return BufferPtr(new float[n](), [](float* p) { delete[] p; });
  }

  void upload(float* dst, const float* host, size_t n) override {
    if (dst != host) std::memcpy(dst, host, n * sizeof(float));
  }
  void download(float* host, const float* src, size_t n) override {
    if (host != src) std::memcpy(host, src, n * sizeof(float));
  }

  // Large products split over the threads by rows of C (or columns, when C is wide and short);
  // each element is still one dot product over all of k, in OpenBLAS's order.
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override {
    const int lda = trans_a ? m : k, ldb = trans_b ? k : n;
    if (threads_ == 1 || static_cast<size_t>(m) * n * k < kMinGemmProduct) {
      sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, n);
    } else if (m >= n) {
      pool_.run(static_cast<size_t>(m), [&](size_t lo, size_t hi) {
        sgemm(trans_a, trans_b, static_cast<int>(hi - lo), n, k, alpha, a + (trans_a ? lo : lo * k), lda, b, ldb, beta,
              c + lo * n, n);
      });
    } else {
      pool_.run(static_cast<size_t>(n), [&](size_t lo, size_t hi) {
        sgemm(trans_a, trans_b, m, static_cast<int>(hi - lo), k, alpha, a, lda, b + (trans_b ? lo * k : lo), ldb, beta,
              c + lo, n);
      });
    }
  }

  // One GEMM per sample, the samples split over the threads (a convolution's products, tens of
  // output channels by a few hundred positions, are too small to split one by one).
  void gemm_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, size_t stride_a,
                    const float* b, size_t stride_b, float beta, float* c, size_t stride_c, int count) override {
    pool_.run(static_cast<size_t>(std::max(count, 0)), [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) {
        sgemm(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, trans_a ? m : k, b + i * stride_b, trans_b ? k : n,
              beta, c + i * stride_c, n);
      }
    });
  }

  // Split by rows of C; each row's terms still added in order of i.
  void gemm_sum(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, size_t stride_a,
                const float* b, size_t stride_b, float beta, float* c, int count) override {
    const int lda = trans_a ? m : k, ldb = trans_b ? k : n;
    // Every thread count makes the same sgemm calls, one per block of kSumRowBlock rows: OpenBLAS's
    // result for a row depends on the shape of the call it is in (Haswell's and Zen's sgemm round
    // differently for any other row count), so splitting the rows by threads would change bits.
    const size_t blocks = (static_cast<size_t>(m) + kSumRowBlock - 1) / kSumRowBlock;
    pool_.run(blocks, [&](size_t first, size_t last) {
      for (size_t block = first; block < last; ++block) {
        const size_t lo = block * kSumRowBlock, rows = std::min(kSumRowBlock, static_cast<size_t>(m) - lo);
        for (int i = 0; i < count; ++i) {
          sgemm(trans_a, trans_b, static_cast<int>(rows), n, k, alpha, a + i * stride_a + (trans_a ? lo : lo * k), lda,
                b + i * stride_b, ldb, i == 0 ? beta : 1.0f, c + lo * n, n);
        }
      }
    });
  }

  // Convolutions on oneDNN's primitives (cpu_conv.h); the bias's gradient is bias_grad's.
  size_t conv_scratch_floats(int batch, const ConvGeometry& g, int outputs) const override {
    return conv_.scratch_floats(batch, g, outputs);
  }
  void conv_forward(const float* x, int batch, const ConvGeometry& g, int outputs, const float* w,
                    const float* bias, float* y, float* scratch) override {
    conv_.forward(x, batch, g, outputs, w, bias, y, scratch);
  }
  void conv_backward(const float* x, const float* dy, int batch, const ConvGeometry& g, int outputs,
                     const float* w, float* dx, float* dw, float* db, bool accumulate,
                     float* scratch) override {
    conv_.backward(x, dy, batch, g, outputs, w, dx, dw, accumulate, scratch);
    bias_grad(dy, batch, outputs, static_cast<int>(g.positions()), db, accumulate);
  }

  void add_bias(float* y, const float* bias, int outer, int channels, int inner) override {
    const size_t sample = static_cast<size_t>(channels) * inner;
    pool_.run(static_cast<size_t>(outer), [&](size_t lo, size_t hi) {
      add_bias_serial(y + lo * sample, bias, static_cast<int>(hi - lo), channels, inner);
    }, kMinRows);
  }

  void bias_grad(const float* dy, int outer, int channels, int inner, float* db, bool accumulate) override {
    if (!accumulate) std::fill(db, db + channels, 0.0f);
    if (inner == 1) {
      bias_grad_rows(dy, outer, channels, db);
      return;
    }
    pool_.run(static_cast<size_t>(channels),
              [&](size_t lo, size_t hi) { bias_grad_planes(dy, outer, channels, inner, db, lo, hi); });
  }

  void activation(Activation f, const float* x, float* y, size_t n) override {
    pool_.run(n, [&](size_t lo, size_t hi) { activation_serial(f, x + lo, y + lo, hi - lo); }, kMinElements);
  }

  void add(const float* a, const float* b, float* y, size_t n) override {
    pool_.run(n, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) y[i] = a[i] + b[i];
    }, kMinElements);
  }

  void activation_backward(Activation f, const float* x, const float* y, const float* dy, float* dx,
                           size_t n) override {
    pool_.run(n, [&](size_t lo, size_t hi) {
      activation_backward_serial(f, x != nullptr ? x + lo : nullptr, y + lo, dy + lo, dx + lo, hi - lo);
    }, kMinElements);
  }

  void layer_norm(const float* x, int rows, int cols, const float* gamma, const float* beta, float eps,
                  float* y) override {
    pool_.run(static_cast<size_t>(rows), [&](size_t lo, size_t hi) {
      layer_norm_serial(x + lo * cols, static_cast<int>(hi - lo), cols, gamma, beta, eps, y + lo * cols);
    });
  }

  void layer_norm_backward(const float* x, const float* dy, int rows, int cols, const float* gamma, float eps,
                           float* dx, float* dy_xhat) override {
    pool_.run(static_cast<size_t>(rows), [&](size_t lo, size_t hi) {
      layer_norm_backward_serial(x + lo * cols, dy + lo * cols, static_cast<int>(hi - lo), cols, gamma, eps,
                                 dx + lo * cols, dy_xhat + lo * cols);
    });
  }

  // Sums split by channels, the element-wise passes by samples.
  void batch_norm_sums(const float* x, int outer, int channels, int inner, double* host_sums) override {
    pool_.run(static_cast<size_t>(channels), [&](size_t lo, size_t hi) {
      batch_norm_sums_serial(x, outer, channels, inner, host_sums, lo, hi);
    });
  }

  void batch_norm_apply(const float* x, int outer, int channels, int inner, const float* stats, const float* gamma,
                        const float* beta, float* y) override {
    const size_t sample = static_cast<size_t>(channels) * inner;
    pool_.run(static_cast<size_t>(outer), [&](size_t lo, size_t hi) {
      batch_norm_apply_serial(x + lo * sample, static_cast<int>(hi - lo), channels, inner, stats, gamma, beta,
                              y + lo * sample);
    });
  }

  void batch_norm_backward_sums(const float* x, const float* dy, int outer, int channels, int inner,
                                const float* stats, double* host_sums) override {
    pool_.run(static_cast<size_t>(channels), [&](size_t lo, size_t hi) {
      batch_norm_backward_sums_serial(x, dy, outer, channels, inner, stats, host_sums, lo, hi);
    });
  }

  void batch_norm_backward_apply(const float* x, const float* dy, int outer, int channels, int inner,
                                 const float* stats, const float* gamma, float* dx) override {
    const size_t sample = static_cast<size_t>(channels) * inner;
    pool_.run(static_cast<size_t>(outer), [&](size_t lo, size_t hi) {
      batch_norm_backward_apply_serial(x + lo * sample, dy + lo * sample, static_cast<int>(hi - lo), channels, inner,
                                       stats, gamma, dx + lo * sample);
    });
  }

  void im2col(const float* x, int batch, const ConvGeometry& g, float* col) override {
    const size_t col_sample = g.patch() * g.positions();
    pool_.run(static_cast<size_t>(batch), [&](size_t lo, size_t hi) {
      im2col_serial(x + lo * g.input_size(), static_cast<int>(hi - lo), g, col + lo * col_sample);
    });
  }

  void col2im(const float* col, int batch, const ConvGeometry& g, float* dx) override {
    const size_t col_sample = g.patch() * g.positions();
    pool_.run(static_cast<size_t>(batch), [&](size_t lo, size_t hi) {
      col2im_serial(col + lo * col_sample, static_cast<int>(hi - lo), g, dx + lo * g.input_size());
    });
  }

  size_t pool_scratch_floats(PoolKind kind, int planes, const PoolGeometry& g) const override {
    return pooling_.scratch_floats(kind, planes, g);
  }
  void pool(PoolKind kind, const float* x, int planes, const PoolGeometry& g, float* y, float* scratch) override {
    if (CpuPool::on_onednn(kind, g)) {
      pooling_.forward(kind, x, planes, g, y, scratch);
      return;
    }
    const size_t in = static_cast<size_t>(g.height) * g.width, out = static_cast<size_t>(g.out_height) * g.out_width;
    pool_.run(static_cast<size_t>(planes), [&](size_t lo, size_t hi) {
      max_pool_2x2_serial(x + lo * in, static_cast<int>(hi - lo), g, y + lo * out);
    });
  }

  void pool_backward(PoolKind kind, const float* x, const float* y, const float* dy, int planes, const PoolGeometry& g,
                     float* dx, float* scratch) override {
    if (CpuPool::on_onednn(kind, g)) {
      pooling_.backward(kind, x, dy, planes, g, dx, scratch);
      return;
    }
    const size_t in = static_cast<size_t>(g.height) * g.width, out = static_cast<size_t>(g.out_height) * g.out_width;
    pool_.run(static_cast<size_t>(planes), [&](size_t lo, size_t hi) {
      max_pool_2x2_backward_serial(x + lo * in, y + lo * out, dy + lo * out, static_cast<int>(hi - lo), g, dx + lo * in);
    });
  }

  void dropout(const float* x, float* y, int rows, int cols, float rate, const uint64_t* keys, uint64_t salt) override {
    pool_.run(static_cast<size_t>(rows), [&](size_t lo, size_t hi) {
      const size_t at = lo * static_cast<size_t>(cols);
      dropout_serial(x + at, y + at, static_cast<int>(hi - lo), cols, rate, keys + lo, salt);
    }, kMinRows);
  }

  void dot_interaction(const float* x, int rows, int cols, int fields, int dim, float* y) override {
    const size_t width = static_cast<size_t>(cols) + static_cast<size_t>(fields) * (fields - 1) / 2;
    pool_.run(static_cast<size_t>(rows), [&](size_t lo, size_t hi) {
      std::vector<float> scratch(dot_scratch_floats(fields, dim));
      dot_interaction_serial(x + lo * cols, static_cast<int>(hi - lo), cols, fields, dim, y + lo * width,
                             scratch.data());
    }, kMinRows);
  }

  void dot_interaction_backward(const float* x, const float* dy, int rows, int cols, int fields, int dim,
                                float* dx) override {
    const size_t width = static_cast<size_t>(cols) + static_cast<size_t>(fields) * (fields - 1) / 2;
    pool_.run(static_cast<size_t>(rows), [&](size_t lo, size_t hi) {
      std::vector<float> scratch(static_cast<size_t>(fields));
      dot_interaction_backward_serial(x + lo * cols, dy + lo * width, static_cast<int>(hi - lo), cols, fields, dim,
                                      dx + lo * cols, scratch.data());
    }, kMinRows);
  }

  void copy_columns(const float* src, int rows, int src_cols, int src_from, int n, float* dst, int dst_cols,
                    int dst_from) override {
    PSTRAIN_CHECK(rows >= 0 && n >= 0 && src_from >= 0 && dst_from >= 0 && src_from + n <= src_cols &&
                  dst_from + n <= dst_cols);
    if (rows == 0 || n == 0) return;  // no memcpy from a pointer that may be null
    pool_.run(static_cast<size_t>(rows), [&](size_t lo, size_t hi) {
      for (size_t r = lo; r < hi; ++r) {
        std::memcpy(dst + r * dst_cols + dst_from, src + r * src_cols + src_from, static_cast<size_t>(n) * sizeof(float));
      }
    }, kMinRows * 64);
  }

  BatchStats softmax_xent(const float* logits, const int32_t* labels, int rows, int cols, float* dlogits,
                          float smoothing) override {
    BatchStats stats;
    const float spread = smoothing / static_cast<float>(cols), hit = 1.0f - smoothing + spread;
    for (int r = 0; r < rows; ++r) {
      const float* z = logits + static_cast<size_t>(r) * cols;
      const int label = labels[r];
      const int argmax = static_cast<int>(std::max_element(z, z + cols) - z);
      const float zmax = z[argmax];
      double denom = 0, shifted_sum = 0;
      for (int c = 0; c < cols; ++c) {
        denom += std::exp(static_cast<double>(z[c] - zmax));
        shifted_sum += static_cast<double>(z[c] - zmax);
      }
      const double target = smoothing == 0.0f ? static_cast<double>(z[label] - zmax)
                                              : (1.0 - smoothing) * static_cast<double>(z[label] - zmax) +
                                                    smoothing * shifted_sum / cols;
      stats.loss_sum += std::log(denom) - target;
      stats.correct += argmax == label;
      if (dlogits != nullptr) {
        float* d = dlogits + static_cast<size_t>(r) * cols;
        for (int c = 0; c < cols; ++c) {
          const float q = smoothing == 0.0f ? (c == label ? 1.0f : 0.0f) : (c == label ? hit : spread);
          d[c] = static_cast<float>(std::exp(static_cast<double>(z[c] - zmax)) / denom) - q;
        }
      }
    }
    return stats;
  }

  BatchStats target_loss(Loss loss, const float* outputs, const float* targets, int rows, int cols,
                         float huber_delta, float* doutputs) override {
    PSTRAIN_CHECK(loss != Loss::kSoftmax && rows >= 0 && cols >= 1);
    BatchStats stats;
    for (int r = 0; r < rows; ++r) {
      const size_t at = static_cast<size_t>(r) * static_cast<size_t>(cols);
      double sum = 0;
      for (int c = 0; c < cols; ++c) sum += element_loss(loss, outputs[at + c], targets[at + c], huber_delta);
      stats.loss_sum += sum / cols;
      if (doutputs == nullptr) continue;
      for (int c = 0; c < cols; ++c) {
        doutputs[at + c] = element_grad(loss, outputs[at + c], targets[at + c], huber_delta, cols);
      }
    }
    return stats;
  }

 private:
  // Shared with the deleters, so a buffer may outlive the backend.
  std::shared_ptr<size_t> allocated_ = std::make_shared<size_t>(0);
  // Below these sizes a kernel runs on the calling thread alone (waking a helper costs more).
  static constexpr size_t kMinElements = 1 << 15, kMinRows = 16, kMinGemmProduct = 1 << 18;
  static constexpr size_t kSumRowBlock = 16;  // gemm_sum's rows per sgemm call
  int threads_;
  ThreadPool pool_;
  CpuConv conv_;     // after pool_, which they run on
  CpuPool pooling_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  static const bool warned = [] {  // once a process: the trainer and the evaluation each make one
    const CpuKernels k = cpu_kernels();
    if (k.generic) {
      PSLOG(WARN) << "CPU kernels: " << k.text() << " on a CPU with AVX2: oneDNN is limited below what this CPU "
                  << "runs (ONEDNN_MAX_CPU_ISA or DNNL_MAX_CPU_ISA in the environment?); products run several "
                  << "times slower";
    }
    return k.generic;
  }();
  (void)warned;
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace pstrain
