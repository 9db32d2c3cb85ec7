// The compute backend of a worker: the few primitives an MLP needs. The CPU backend
// (worker/cpu/) uses OpenBLAS; the CUDA backend (worker/cuda/) implements the same interface.
// All float pointers passed to a backend point into memory it allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace pstrain {

using BufferPtr = std::unique_ptr<float[], std::function<void(float*)>>;

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
  // y[r, :] += bias, then ReLU if `relu`.
  virtual void bias_activation(float* y, const float* bias, int rows, int cols, bool relu) = 0;
  // dy[i] = 0 where y[i] <= 0 (y is the ReLU output).
  virtual void relu_backward(float* dy, const float* y, size_t n) = 0;
  // dbias[c] = sum over rows of dy[r, c], added to dbias[c] when `accumulate`.
  virtual void column_sums(const float* dy, int rows, int cols, float* dbias, bool accumulate) = 0;
  // Softmax cross-entropy of logits[rows, cols] against host labels. If dlogits is not null it
  // receives the gradient of the summed loss (softmax - onehot), per sample.
  virtual BatchStats softmax_xent(const float* logits, const int32_t* labels, int rows, int cols,
                                  float* dlogits) = 0;
};

// OpenBLAS with `threads` threads.
std::unique_ptr<Backend> make_cpu_backend(int threads);

// CUDA (worker/cuda/): the number of usable GPUs, 0 when the build has no CUDA or no device is
// present (never throws).
int cuda_device_count();
// cuBLAS backend on GPU `device`. Throws pstrain::Error if CUDA is unavailable, or if an
// allocation would take the backend past memory_limit_bytes (0 = no limit).
std::unique_ptr<Backend> make_cuda_backend(int device, size_t memory_limit_bytes);

}  // namespace pstrain
