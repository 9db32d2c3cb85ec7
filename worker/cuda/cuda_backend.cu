// The CUDA backend: cuBLAS (full FP32) for the GEMMs, the kernels of kernels.cu for the rest, all
// on one non-blocking stream of its own. Each buffer from allocate() is one cudaMalloc of exactly
// the size asked for. bytes_allocated() counts those plus the backend's own scratch (the cuBLAS
// workspace, the softmax's labels and per-row results), and all of it stays under
// memory_limit_bytes. A backend is driven by one thread at a time; several may share a device.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/backend/backend.h"
#include "worker/cuda/cuda_check.h"
#include "worker/cuda/cuda_info.h"
#include "worker/cuda/kernels.cuh"
#include "worker/cuda/layer_kernels.cuh"
#include "worker/cuda/loss_kernels.cuh"
#include "worker/cuda/pinned.h"

namespace pstrain {
namespace {

using ByteCount = std::shared_ptr<std::atomic<size_t>>;

std::string bytes_text(size_t bytes) {
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f", static_cast<double>(bytes) / 1048576.0);
  return std::to_string(bytes) + " bytes (" + mib + " MiB)";
}

// Frees one cudaMalloc allocation and takes it off its backend's count. It shares the count, so
// a buffer may outlive the backend.
struct DeviceFree {
  int device;
  size_t bytes;
  ByteCount allocated;

  void operator()(float* p) const noexcept {
    ScopedDevice guard(device, std::nothrow);
    PSTRAIN_CUDA_WARN(cudaFree(p));
    allocated->fetch_sub(bytes);
  }
};

// A stream that does not synchronise with the legacy default stream.
class CudaStream {
 public:
  explicit CudaStream(int device) : device_(device) {
    ScopedDevice guard(device);
    PSTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaStream() {
    if (stream_ == nullptr) return;
    ScopedDevice guard(device_, std::nothrow);
    PSTRAIN_CUDA_WARN(cudaStreamSynchronize(stream_));
    PSTRAIN_CUDA_WARN(cudaStreamDestroy(stream_));
  }
  CudaStream(CudaStream&& other) noexcept
      : device_(other.device_), stream_(std::exchange(other.stream_, nullptr)) {}
  CudaStream& operator=(CudaStream&&) = delete;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return stream_; }
  void synchronize() const { PSTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

struct CublasDestroy {
  int device;
  void operator()(cublasHandle_t handle) const noexcept {
    ScopedDevice guard(device, std::nothrow);
    PSTRAIN_CUBLAS_WARN(cublasDestroy(handle));
  }
};
using CublasHandle = std::unique_ptr<cublasContext, CublasDestroy>;

// A cuBLAS handle on `stream` that computes in full FP32: no TF32, the GPU must match the CPU to
// float rounding.
CublasHandle make_cublas(int device, cudaStream_t stream) {
  ScopedDevice guard(device);
  cublasHandle_t raw = nullptr;
  PSTRAIN_CUBLAS_CHECK(cublasCreate(&raw));
  CublasHandle handle(raw, CublasDestroy{device});
  PSTRAIN_CUBLAS_CHECK(cublasSetStream(raw, stream));
  PSTRAIN_CUBLAS_CHECK(cublasSetMathMode(raw, CUBLAS_DEFAULT_MATH));
  return handle;
}

// cuBLAS's recommended workspace (see cublasSetWorkspace): 32 MiB from Hopper on, 4 MiB before.
size_t cublas_workspace_bytes(int device) {
  int major = 0;
  PSTRAIN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return static_cast<size_t>(major >= 9 ? 32 : 4) << 20;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, size_t memory_limit_bytes)
      : device_(device),
        limit_(memory_limit_bytes),
        name_("cuda:" + std::to_string(device) + " (" + gpu_name(device) + ")"),
        free_with_context_(gpu_memory(device).free_bytes),
        stream_(device),
        blas_(make_cublas(device, stream_.get())) {
    // The baseline of device_bytes_used(): the CUDA context, our stream and the cuBLAS handle are
    // the runtime's, not the plan's; what they took is logged, not hidden.
    free_at_start_ = gpu_memory(device_).free_bytes;
    if (free_with_context_ > free_at_start_) {
      PSLOG(INFO) << name_ << ": the stream and cuBLAS handle took "
                  << (free_with_context_ - free_at_start_) / 1048576.0 << " MiB of device memory (outside the plan)";
    }
    const size_t bytes = cublas_workspace_bytes(device_);
    if (limit_ != 0 && bytes > limit_) {  // the plan's first term: no plan could fit
      throw Error(name_ + ": the memory plan needs at least the cuBLAS workspace of " + bytes_text(bytes) +
                  " (the GPU's generation asks for that much), more than --gpu-memory-limit " + bytes_text(limit_) +
                  ", before parameters and activations");
    }
    workspace_ = allocate_floats(bytes / sizeof(float), "the cuBLAS workspace");
    sum_terms_ = allocate_floats(kSumTermFloats, "gemm_sum's products");
    ScopedDevice guard(device_);
    // Set after cublasSetStream, which would reset it to cuBLAS's own (uncounted) pool.
    PSTRAIN_CUBLAS_CHECK(cublasSetWorkspace(blas_.get(), workspace_.get(), bytes));
  }
  ~CudaBackend() override {
    ScopedDevice guard(device_, std::nothrow);
    PSTRAIN_CUDA_WARN(cudaStreamSynchronize(stream_.get()));
  }

  std::string name() const override { return name_; }
  bool host_accessible() const override { return false; }
  size_t bytes_allocated() const override { return allocated_->load(); }
  size_t device_bytes_used() const override {
    try {
      const size_t free_now = gpu_memory(device_).free_bytes;
      return free_at_start_ > free_now ? free_at_start_ - free_now : 0;
    } catch (const Error& e) {
      PSLOG(WARN) << "cannot measure device memory: " << e.what();
      return 0;
    }
  }
  int cuda_device() const override { return device_; }
  size_t batch_scratch_bytes(int rows) const override {
    return xent_bytes(rows) + static_cast<size_t>(rows) * sizeof(uint64_t);  // + dropout's keys
  }
  size_t free_device_bytes() const override { return gpu_memory(device_).free_bytes; }
  void reserve_batch(int rows) override {
    PSTRAIN_CHECK(rows > 0);
    xent_scratch(rows);
    keys_scratch(rows);
  }
  void synchronize() override {
    ScopedDevice guard(device_);
    stream_.synchronize();
  }

  BufferPtr allocate(size_t n) override { return allocate_floats(n, "a buffer"); }

  BufferPtr allocate_host(size_t n) override {
    if (n == 0) return BufferPtr(nullptr, [](float*) {});
    ScopedDevice guard(device_);  // pinned memory is mapped for the current device's context
    auto* pinned = new PinnedBuffer(n);
    return BufferPtr(pinned->data(), [pinned](float*) { delete pinned; });
  }

  void upload(float* dst, const float* host, size_t n) override {
    if (n == 0) return;
    PSTRAIN_CHECK(dst != nullptr && host != nullptr);
    copy(dst, host, n * sizeof(float), cudaMemcpyHostToDevice);
  }
  void download(float* host, const float* src, size_t n) override {
    if (n == 0) return;
    PSTRAIN_CHECK(host != nullptr && src != nullptr);
    copy(host, src, n * sizeof(float), cudaMemcpyDeviceToHost);
  }

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, const float* b,
            float beta, float* c) override {
    PSTRAIN_CHECK(m >= 0 && n >= 0 && k >= 0);
    if (m == 0 || n == 0) return;
    ScopedDevice guard(device_);
    // A row-major [r, c] array read column-major is its [c, r] transpose, so row-major
    // C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands and m with n,
    // keep each operand's op and leading dimension.
    const int lda = trans_a ? m : k, ldb = trans_b ? k : n;
    PSTRAIN_CUBLAS_CHECK(cublasSgemm(blas_.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                                     std::max(ldb, 1), a, std::max(lda, 1), &beta, c, n));
  }

  void gemm_batched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, size_t stride_a,
                    const float* b, size_t stride_b, float beta, float* c, size_t stride_c, int count) override {
    PSTRAIN_CHECK(m >= 0 && n >= 0 && k >= 0 && count >= 0 && stride_c > 0);
    if (m == 0 || n == 0 || count == 0) return;
    ScopedDevice guard(device_);
    const int lda = trans_a ? m : k, ldb = trans_b ? k : n;  // as in gemm: operands swapped
    PSTRAIN_CUBLAS_CHECK(cublasSgemmStridedBatched(
        blas_.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
        std::max(ldb, 1), static_cast<long long>(stride_b), a, std::max(lda, 1), static_cast<long long>(stride_a),
        &beta, c, n, static_cast<long long>(stride_c), count));
  }

  // The products in batches (one strided-batched GEMM each, into sum_terms_), then added in order
  // by one kernel: a convolution's weight gradient in two launches per batch of samples instead of
  // one GEMM per sample. Where one product does not leave room for two, a GEMM per term.
  void gemm_sum(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, size_t stride_a,
                const float* b, size_t stride_b, float beta, float* c, int count) override {
    PSTRAIN_CHECK(m >= 0 && n >= 0 && k >= 0 && count >= 0);
    const size_t product = static_cast<size_t>(m) * static_cast<size_t>(n);
    const size_t per_batch = product == 0 ? 0 : kSumTermFloats / product;
    if (count < 2 || per_batch < 2) {
      Backend::gemm_sum(trans_a, trans_b, m, n, k, alpha, a, stride_a, b, stride_b, beta, c, count);
      return;
    }
    for (int first = 0; first < count; first += static_cast<int>(per_batch)) {
      const int terms = static_cast<int>(std::min<size_t>(per_batch, static_cast<size_t>(count - first)));
      gemm_batched(trans_a, trans_b, m, n, k, alpha, a + first * stride_a, stride_a, b + first * stride_b, stride_b,
                   0.0f, sum_terms_.get(), product, terms);
      ScopedDevice guard(device_);
      kernels::ordered_sum(sum_terms_.get(), terms, product, first == 0 ? beta : 1.0f, c, stream_.get());
    }
  }

  void add_bias(float* y, const float* bias, int outer, int channels, int inner) override {
    PSTRAIN_CHECK(outer >= 0 && channels >= 0 && inner >= 1);
    ScopedDevice guard(device_);
    kernels::add_bias(y, bias, outer, channels, inner, stream_.get());
  }

  void bias_grad(const float* dy, int outer, int channels, int inner, float* db, bool accumulate) override {
    PSTRAIN_CHECK(outer >= 0 && channels >= 0 && inner >= 1);
    ScopedDevice guard(device_);
    if (inner == 1) {
      kernels::column_sums(dy, outer, channels, db, accumulate, stream_.get());
    } else {
      kernels::channel_sums(dy, outer, channels, inner, db, accumulate, stream_.get());
    }
  }

  void activation(Activation f, const float* x, float* y, size_t n) override {
    ScopedDevice guard(device_);
    kernels::activation(f, x, y, n, stream_.get());
  }

  void add(const float* a, const float* b, float* y, size_t n) override {
    ScopedDevice guard(device_);
    kernels::add(a, b, y, n, stream_.get());
  }

  void multiply(const float* a, const float* b, float* y, size_t n) override {
    ScopedDevice guard(device_);
    kernels::multiply(a, b, y, n, stream_.get());
  }

  void activation_backward(Activation f, const float* x, const float* y, const float* dy, float* dx,
                           size_t n) override {
    ScopedDevice guard(device_);
    kernels::activation_backward(f, x, y, dy, dx, n, stream_.get());
  }

  void layer_norm(const float* x, int rows, int cols, const float* gamma, const float* beta, float eps,
                  float* y) override {
    PSTRAIN_CHECK(rows >= 0 && cols >= 0);
    ScopedDevice guard(device_);
    kernels::layer_norm(x, rows, cols, gamma, beta, eps, y, stream_.get());
  }

  void layer_norm_backward(const float* x, const float* dy, int rows, int cols, const float* gamma, float eps,
                           float* dx, float* dy_xhat) override {
    PSTRAIN_CHECK(rows >= 0 && cols >= 0);
    ScopedDevice guard(device_);
    kernels::layer_norm_backward(x, dy, rows, cols, gamma, eps, dx, dy_xhat, stream_.get());
  }

  void batch_norm_sums(const float* x, int outer, int channels, int inner, double* host_sums) override {
    PSTRAIN_CHECK(outer >= 0 && channels >= 0 && inner >= 1);
    ScopedDevice guard(device_);
    double* sums = batch_norm_scratch(channels);
    kernels::batch_norm_sums(x, outer, channels, inner, sums, stream_.get());
    copy(host_sums, sums, 2 * static_cast<size_t>(channels) * sizeof(double), cudaMemcpyDeviceToHost);
  }

  void batch_norm_apply(const float* x, int outer, int channels, int inner, const float* stats, const float* gamma,
                        const float* beta, float* y) override {
    PSTRAIN_CHECK(outer >= 0 && channels >= 0 && inner >= 1);
    ScopedDevice guard(device_);
    kernels::batch_norm_apply(x, outer, channels, inner, stats, gamma, beta, y, stream_.get());
  }

  void batch_norm_backward_sums(const float* x, const float* dy, int outer, int channels, int inner,
                                const float* stats, double* host_sums) override {
    PSTRAIN_CHECK(outer >= 0 && channels >= 0 && inner >= 1);
    ScopedDevice guard(device_);
    double* sums = batch_norm_scratch(channels);
    kernels::batch_norm_backward_sums(x, dy, outer, channels, inner, stats, sums, stream_.get());
    copy(host_sums, sums, 2 * static_cast<size_t>(channels) * sizeof(double), cudaMemcpyDeviceToHost);
  }

  void batch_norm_backward_apply(const float* x, const float* dy, int outer, int channels, int inner,
                                 const float* stats, const float* gamma, float* dx) override {
    PSTRAIN_CHECK(outer >= 0 && channels >= 0 && inner >= 1);
    ScopedDevice guard(device_);
    kernels::batch_norm_backward_apply(x, dy, outer, channels, inner, stats, gamma, dx, stream_.get());
  }

  void dot_interaction(const float* x, int rows, int cols, int fields, int dim, float* y) override {
    PSTRAIN_CHECK(rows >= 0 && fields >= 2 && dim >= 1 &&
                  static_cast<size_t>(fields) * dim <= static_cast<size_t>(cols));
    ScopedDevice guard(device_);
    kernels::dot_interaction(x, rows, cols, fields, dim, y, stream_.get());
  }

  void dot_interaction_backward(const float* x, const float* dy, int rows, int cols, int fields, int dim,
                                float* dx) override {
    PSTRAIN_CHECK(rows >= 0 && fields >= 2 && dim >= 1 &&
                  static_cast<size_t>(fields) * dim <= static_cast<size_t>(cols));
    ScopedDevice guard(device_);
    kernels::dot_interaction_backward(x, dy, rows, cols, fields, dim, dx, stream_.get());
  }

  void copy_columns(const float* src, int rows, int src_cols, int src_from, int n, float* dst, int dst_cols,
                    int dst_from) override {
    PSTRAIN_CHECK(rows >= 0 && n >= 0 && src_from >= 0 && dst_from >= 0 && src_from + n <= src_cols &&
                  dst_from + n <= dst_cols);
    ScopedDevice guard(device_);
    kernels::copy_columns(src, rows, src_cols, src_from, n, dst, dst_cols, dst_from, stream_.get());
  }

  void im2col(const float* x, int batch, const ConvGeometry& g, float* col) override {
    PSTRAIN_CHECK(batch >= 0);
    ScopedDevice guard(device_);
    kernels::im2col(x, batch, g, col, stream_.get());
  }

  void col2im(const float* col, int batch, const ConvGeometry& g, float* dx) override {
    PSTRAIN_CHECK(batch >= 0);
    ScopedDevice guard(device_);
    kernels::col2im(col, batch, g, dx, stream_.get());
  }

  void pool(PoolKind kind, const float* x, int planes, const PoolGeometry& g, float* y, float*) override {
    PSTRAIN_CHECK(planes >= 0);
    ScopedDevice guard(device_);
    kernels::pool(kind, x, planes, g, y, stream_.get());
  }

  void pool_backward(PoolKind kind, const float* x, const float* y, const float* dy, int planes, const PoolGeometry& g,
                     float* dx, float*) override {
    PSTRAIN_CHECK(planes >= 0);
    ScopedDevice guard(device_);
    kernels::pool_backward(kind, x, y, dy, planes, g, dx, stream_.get());
  }

  void dropout(const float* x, float* y, int rows, int cols, float rate, const uint64_t* keys, uint64_t salt) override {
    PSTRAIN_CHECK(rows >= 0 && cols >= 0 && keys != nullptr);
    if (rows == 0 || cols == 0) return;
    ScopedDevice guard(device_);
    uint64_t* device_keys = keys_scratch(rows);
    PSTRAIN_CUDA_CHECK(cudaMemcpyAsync(device_keys, keys, static_cast<size_t>(rows) * sizeof(uint64_t),
                                       cudaMemcpyHostToDevice, stream_.get()));
    kernels::dropout(x, y, rows, cols, rate, device_keys, salt, stream_.get());
    // The host keys may change once we return (the next batch): wait for the copy.
    stream_.synchronize();
  }

  BatchStats softmax_xent(const float* logits, const int32_t* labels, int rows, int cols, float* dlogits,
                          float smoothing) override {
    PSTRAIN_CHECK(rows >= 0 && cols >= 1);
    if (rows == 0) return BatchStats{};
    PSTRAIN_CHECK(logits != nullptr && labels != nullptr);
    for (int r = 0; r < rows; ++r) {  // on the GPU a bad label would read out of bounds
      if (labels[r] < 0 || labels[r] >= cols) {
        throw Error(label() + ": label " + std::to_string(labels[r]) + " of sample " + std::to_string(r) +
                    " is outside [0, " + std::to_string(cols) + ")");
      }
    }
    ScopedDevice guard(device_);
    const XentScratch s = xent_scratch(rows);
    PSTRAIN_CUDA_CHECK(cudaMemcpyAsync(s.labels, labels, static_cast<size_t>(rows) * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream_.get()));
    kernels::softmax_xent(logits, s.labels, rows, cols, smoothing, dlogits, s.row_loss, s.row_correct, s.totals,
                          stream_.get());
    kernels::XentTotals totals{};
    PSTRAIN_CUDA_CHECK(
        cudaMemcpyAsync(&totals, s.totals, sizeof totals, cudaMemcpyDeviceToHost, stream_.get()));
    stream_.synchronize();
    return BatchStats{totals.loss_sum, static_cast<int64_t>(totals.correct)};
  }

  BatchStats target_loss(Loss loss, const float* outputs, const float* targets, int rows, int cols,
                         float huber_delta, float* doutputs) override {
    PSTRAIN_CHECK(loss != Loss::kSoftmax && rows >= 0 && cols >= 1);
    if (rows == 0) return BatchStats{};
    PSTRAIN_CHECK(outputs != nullptr && targets != nullptr);
    ScopedDevice guard(device_);
    const XentScratch s = xent_scratch(rows);  // its per-row losses
    kernels::target_loss(loss, outputs, targets, rows, cols, huber_delta, doutputs, s.row_loss, stream_.get());
    row_loss_.resize(static_cast<size_t>(rows));
    PSTRAIN_CUDA_CHECK(cudaMemcpyAsync(row_loss_.data(), s.row_loss, row_loss_.size() * sizeof(double),
                                       cudaMemcpyDeviceToHost, stream_.get()));
    stream_.synchronize();
    BatchStats stats;
    for (double l : row_loss_) stats.loss_sum += l;  // in row order, as the CPU adds them
    return stats;
  }

 private:
  struct XentScratch {
    kernels::XentTotals* totals;
    double* row_loss;
    int32_t* labels;
    int32_t* row_correct;
  };

  std::string label() const { return "cuda:" + std::to_string(device_); }

  // One cudaMalloc of exactly n floats, zeroed, counted, refused past the limit.
  BufferPtr allocate_floats(size_t n, const std::string& what) {
    if (n == 0) return BufferPtr(nullptr, [](float*) {});
    if (n > std::numeric_limits<size_t>::max() / sizeof(float)) {
      throw Error(label() + ": " + what + " of " + std::to_string(n) + " floats: the size overflows");
    }
    const size_t bytes = n * sizeof(float);
    const size_t held = allocated_->load();
    if (limit_ != 0 && (bytes > limit_ || held > limit_ - bytes)) {
      throw Error(label() + ": allocating " + what + " of " + bytes_text(bytes) +
                  " would exceed --gpu-memory-limit " + bytes_text(limit_) + "; " + bytes_text(held) +
                  " are already allocated");
    }
    ScopedDevice guard(device_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error(malloc_failure(err, what, bytes, held));
    }
    allocated_->fetch_add(bytes);
    BufferPtr buffer(static_cast<float*>(p), DeviceFree{device_, bytes, allocated_});
    PSTRAIN_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_.get()));
    stream_.synchronize();  // zero before any stream, not only this backend's, can use it
    return buffer;
  }

  std::string malloc_failure(cudaError_t err, const std::string& what, size_t bytes, size_t held) const {
    std::string message = label() + ": cudaMalloc of " + what + " of " + bytes_text(bytes) +
                          " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                          "); this backend holds " + bytes_text(held);
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      message += ", the device has " + bytes_text(free_bytes) + " free of " + bytes_text(total_bytes);
    } else {
      (void)cudaGetLastError();
    }
    return message;
  }

  void copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    ScopedDevice guard(device_);
    PSTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream_.get()));
    stream_.synchronize();  // the host side may be reused (or be pageable) once we return
  }

  static size_t xent_bytes(int rows) {
    const size_t bytes = sizeof(kernels::XentTotals) + static_cast<size_t>(rows) * (sizeof(double) + 2 * sizeof(int32_t));
    return (bytes + sizeof(float) - 1) / sizeof(float) * sizeof(float);
  }

  // Dropout's per-row keys on the device, grown to the largest batch seen, never shrunk.
  uint64_t* keys_scratch(int rows) {
    if (rows > keys_rows_) {
      keys_scratch_.reset();
      keys_rows_ = 0;
      keys_scratch_ = allocate_floats(static_cast<size_t>(rows) * sizeof(uint64_t) / sizeof(float),
                                      "dropout keys for " + std::to_string(rows) + " rows");
      keys_rows_ = rows;
    }
    return reinterpret_cast<uint64_t*>(keys_scratch_.get());
  }

  // Batch normalisation's per-channel sums (2 x channels doubles), grown to the widest layer
  // seen, never shrunk.
  double* batch_norm_scratch(int channels) {
    if (channels > bn_channels_) {
      bn_scratch_.reset();
      bn_channels_ = 0;
      bn_scratch_ = allocate_floats(4 * static_cast<size_t>(channels), "batch-norm sums of " +
                                                                         std::to_string(channels) + " channels");
      bn_channels_ = channels;
    }
    return reinterpret_cast<double*>(bn_scratch_.get());
  }

  // [totals | row_loss x rows | labels x rows | row_correct x rows], grown to the largest batch
  // seen, never shrunk.
  XentScratch xent_scratch(int rows) {
    if (rows > xent_rows_) {
      xent_scratch_.reset();  // first, so that the limit sees only the new size
      xent_rows_ = 0;
      xent_scratch_ = allocate_floats(xent_bytes(rows) / sizeof(float),
                                      "softmax scratch for " + std::to_string(rows) + " rows");
      xent_rows_ = rows;
    }
    char* base = reinterpret_cast<char*>(xent_scratch_.get());
    XentScratch s;
    s.totals = reinterpret_cast<kernels::XentTotals*>(base);
    s.row_loss = reinterpret_cast<double*>(base + sizeof(kernels::XentTotals));
    s.labels = reinterpret_cast<int32_t*>(s.row_loss + xent_rows_);
    s.row_correct = s.labels + xent_rows_;
    return s;
  }

  std::vector<double> row_loss_;  // target_loss's per-row losses, summed on the host

  const int device_;
  const size_t limit_;  // bytes; 0 = none
  const std::string name_;
  const size_t free_with_context_;  // device memory free once the CUDA context existed
  size_t free_at_start_ = 0;        // ... and once the stream and cuBLAS handle did: before our allocations
  ByteCount allocated_ = std::make_shared<std::atomic<size_t>>(0);
  // Destroyed in reverse: scratch, then the cuBLAS handle, then its workspace, then the stream.
  CudaStream stream_;
  BufferPtr workspace_;
  CublasHandle blas_;
  // gemm_sum's products of one batch of terms: 4 MiB, in every plan's workspace.
  static constexpr size_t kSumTermFloats = size_t{1} << 20;
  BufferPtr sum_terms_;
  BufferPtr xent_scratch_;
  int xent_rows_ = 0;
  BufferPtr keys_scratch_;
  int keys_rows_ = 0;
  BufferPtr bn_scratch_;
  int bn_channels_ = 0;
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // "no device" / "no driver" must not show up as a later launch error
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int device, size_t memory_limit_bytes) {
  const int count = cuda_device_count();
  if (count == 0) {
    throw Error("no CUDA device is usable (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them all)");
  }
  if (device < 0 || device >= count) {
    throw Error("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                " visible)");
  }
  // A worker computes on one GPU: make it this thread's current device for good, so that its
  // ScopedDevice guards find it current and switch nothing (a switch back to another device would
  // create, since CUDA 12, that device's context too: hundreds of MiB on a GPU not its own).
  PSTRAIN_CUDA_CHECK(cudaSetDevice(device));
  return std::make_unique<CudaBackend>(device, memory_limit_bytes);
}

}  // namespace pstrain
