// A multi-layer perceptron (ReLU hidden layers, softmax cross-entropy) over one flat parameter
// buffer. Layer l has variables "layer<l>.weight" [in, out] and "layer<l>.bias" [out].
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "shared/layout.h"
#include "worker/backend.h"

namespace pstrain {

class Mlp {
 public:
  // Activations are allocated for batches of up to max_batch samples.
  Mlp(int input_dim, const std::vector<int>& hidden, int classes, int max_batch, Backend& backend);

  const Layout& layout() const { return layout_; }
  int input_dim() const { return widths_.front(); }
  int classes() const { return widths_.back(); }
  size_t activation_floats() const;
  // The layout of such a model, and what activation_floats() will be, before constructing one
  // (for a memory plan).
  static Layout layout_for(int input_dim, const std::vector<int>& hidden, int classes);
  static size_t activation_floats(int input_dim, const std::vector<int>& hidden, int classes, int max_batch);

  // Deterministic initialisation from the seed alone (the same for any worker count): weights
  // He-uniform, biases zero. Writes layout().total() floats into host memory.
  void init(uint64_t seed, float* host_params) const;

  // Called during backward each time grad[from, total) is complete (layers finish last to
  // first), with the batch's loss statistics (known after the forward pass).
  using GradReady = std::function<void(size_t from, const BatchStats& stats)>;

  // Forward and backward on a batch (x, y in backend memory / host labels). grad receives the
  // gradient of the SUMMED loss over the batch (not the mean); with `accumulate` it is added to
  // what grad holds (gradient accumulation over micro-batches).
  BatchStats train_step(const float* params, const float* x, const int32_t* y, int batch, float* grad,
                        const GradReady& on_ready = nullptr, bool accumulate = false);
  // Forward only.
  BatchStats evaluate(const float* params, const float* x, const int32_t* y, int batch);

 private:
  const float* forward(const float* params, const float* x, int batch);

  Backend& backend_;
  std::vector<int> widths_;   // input, hidden..., classes
  Layout layout_;
  int max_batch_;
  std::vector<BufferPtr> acts_;  // output of each layer, [max_batch, width]
  BufferPtr delta_a_, delta_b_;  // back-propagated gradients, [max_batch, max width]
};

}  // namespace pstrain
