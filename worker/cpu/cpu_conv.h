// The CPU backend's convolutions, on oneDNN's convolution primitives (docs/models.md, "CPU kernels"),
// in place of im2col and per-sample products (Backend::conv_forward's default, still the CUDA
// backend's).
//
// Work is cut into blocks of kBlock samples (the last block may be shorter), the cut fixed by the
// batch alone, never by --threads: each block is one primitive call on one thread, the blocks
// split over the backend's threads. The weight gradient of each block is kept apart and the blocks'
// gradients are added to dw in block order, dw = ((dw + g_0) + g_1) + ..., so every thread count
// gives the same bits (the convolution's data passes have no sum over samples at all).
//
// What this relies on from oneDNN: a primitive run on one thread gives the same bits every time
// for the same inputs (oneDNN's run-to-run determinism "for a fixed environment"; its non-
// deterministic paths are reductions across threads, with atomics, and none runs here: every
// primitive is created and run with OpenMP limited to the calling thread, so oneDNN plans it for
// one thread). tests/cpu_conv_test.cc checks it: the same call twice, and 1, 2 and 3 threads, give
// the same bits.
//
// Layouts: the activations stay NCHW and the weights OIHW between layers; each primitive takes
// the layout oneDNN prefers ("any": channels in blocks of 16 on AVX-512, nChw16c), its inputs and
// outputs reordered per block. Measured faster including the reorders (2-5x the im2col path on
// 16 to 64 channels) except the data gradient of a layer with fewer than 16 input channels, whose
// channels the blocked kernel pads to 16 (4-5x slower on 1 channel): that one runs on NCHW.
//
// Primitives are made once per shape (channels, size, kernel, stride, padding, outputs, samples
// per call) and kept. Every buffer a call needs besides its arguments (reordered blocks and
// weights, the primitives' scratchpads, the blocks' weight gradients) lies in `scratch`, of
// scratch_floats(batch, ...) floats, which the memory plan counts (Layer::col_floats).
#pragma once

#include <cstddef>
#include <memory>

#include "worker/backend/backend.h"

namespace pstrain {

class ThreadPool;

class CpuConv {
 public:
  static constexpr int kBlock = 8;  // samples per primitive call

  explicit CpuConv(ThreadPool& pool);
  ~CpuConv();
  CpuConv(const CpuConv&) = delete;
  CpuConv& operator=(const CpuConv&) = delete;

  // Floats of scratch for batches of up to `batch` samples.
  size_t scratch_floats(int batch, const ConvGeometry& g, int outputs) const;
  // As Backend::conv_forward (bias included).
  void forward(const float* x, int batch, const ConvGeometry& g, int outputs, const float* w,
               const float* bias, float* y, float* scratch);
  // As Backend::conv_backward without the bias: dw (= or += when `accumulate`) and dx (skipped when
  // null).
  void backward(const float* x, const float* dy, int batch, const ConvGeometry& g, int outputs,
                const float* w, float* dx, float* dw, bool accumulate, float* scratch);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pstrain
