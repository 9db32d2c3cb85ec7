// The CPU backend's pooling (docs/models.md, "CPU kernels"): oneDNN's pooling primitives for every
// window but the usual 2x2 max pooling of stride 2 that tiles its plane, which keeps the backend's
// own straight-line loop (measured 2-5x faster than oneDNN's primitive on NCHW, 3-6x than its
// blocked layout with the reorders); every other window ran 1.3-5x faster on oneDNN than on the
// loops it replaces.
//
// Planes (batch x channels) are cut into blocks of kBlock planes (the last may be shorter), the cut
// fixed by the number of planes alone, never by --threads; each block is one primitive call on one
// thread (a [1, planes, H, W] NCHW tensor: oneDNN's JIT kernel vectorises over the channels), the
// blocks split over the backend's threads. No value is summed across planes, so a plane's result
// does not depend on the block it falls in.
//
// What this relies on from oneDNN: a primitive run on one thread gives the same bits every time
// (oneDNN's run-to-run determinism; created and run with OpenMP limited to the calling thread, as
// in cpu_conv.h); its max pooling keeps the first position (row major) of a window holding the
// maximum, as Backend::pool_backward asks, and passes NaN over, as the backend's loop does (a
// window of NaN alone, which the loop made -inf without a gradient, becomes the lowest float with
// its gradient on the window's first position).
// tests/cpu_pool_test.cc checks both, and the same bits on 1, 2 and 3 threads.
//
// Max pooling's backward needs the forward's workspace (the maximum's position in each window):
// backward runs the block's forward again into its scratch, so forward and backward keep nothing
// between them (--recompute and the activation plan are unchanged). The primitives' scratchpads, the
// workspaces and the forward's output run again lie in `scratch`, of scratch_floats(...) floats,
// which the memory plan counts (the Pool layer's col_floats).
#pragma once

#include <cstddef>
#include <memory>

#include "worker/backend/backend.h"

namespace pstrain {

class ThreadPool;

class CpuPool {
 public:
  static constexpr int kBlock = 64;  // planes per primitive call

  explicit CpuPool(ThreadPool& pool);
  ~CpuPool();
  CpuPool(const CpuPool&) = delete;
  CpuPool& operator=(const CpuPool&) = delete;

  // Whether a pooling runs on oneDNN (false: the 2x2 max pooling that tiles its plane).
  static bool on_onednn(PoolKind kind, const PoolGeometry& g);
  // Floats of scratch for up to `planes` planes (0 where on_onednn is false).
  size_t scratch_floats(PoolKind kind, int planes, const PoolGeometry& g) const;
  // As Backend::pool and pool_backward, where on_onednn holds.
  void forward(PoolKind kind, const float* x, int planes, const PoolGeometry& g, float* y, float* scratch);
  void backward(PoolKind kind, const float* x, const float* dy, int planes, const PoolGeometry& g, float* dx,
                float* scratch);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pstrain
