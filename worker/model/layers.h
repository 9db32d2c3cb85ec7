// The layers a model is made of (docs/models.md): their specs as written in --model, their
// shapes, parameters and forward and backward passes in terms of Backend operations. A layer
// holds no buffers (batchnorm keeps only its last training forward's 2C statistics, on the host,
// for its backward); worker/model/model.h plans and owns the buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/train/layout.h"
#include "worker/backend/backend.h"
#include "worker/exchange/stats_exchange.h"

namespace pstrain {

// One sample's activations: an image of c x h x w (NCHW), or a flat vector of c values.
struct Shape {
  int c = 1, h = 1, w = 1;
  bool flat = true;
  size_t size() const { return static_cast<size_t>(c) * h * w; }
  std::string text() const;  // "32x28x28" or "784"
  static Shape image(int c, int h, int w) { return Shape{c, h, w, false}; }
  static Shape vector(size_t n) { return Shape{static_cast<int>(n), 1, 1, true}; }
};

// The layers of the --model grammar, and its blocks: residual(...), bottom K(...), parallel(... | ...)
// and a parallel block's branches. Parsed from their words once (worker/model/layer_spec.cc).
enum class LayerKind {
  kDense, kConv, kMaxPool, kAvgPool, kFlatten, kGlobalAvgPool, kLayerNorm, kBatchNorm, kRelu, kTanh, kSigmoid,
  kGelu, kDropout, kDot, kCross, kSoftmax, kResidual, kBottom, kParallel, kBranch
};
const char* layer_kind_name(LayerKind kind);  // the grammar's word: "dense", "conv", ..., "branch"
bool layer_kind_of(const std::string& name, LayerKind* kind);  // false for any other word

// A layer as written: "conv 32 3 pad=1" is kind conv, args {32, 3}, options {pad: 1}.
struct LayerSpec {
  LayerKind kind = LayerKind::kDense;
  std::vector<double> args;  // positional numbers (batchnorm: its momentum=, when given)
  std::vector<std::pair<std::string, int>> options;  // key=value
  std::string text;          // as written, trimmed
  size_t position = 0;       // of text in the whole spec, for errors
  // residual(...) and bottom K(...) (args {K}): the block's layers, and the whole list as given
  // (for errors that point at it).
  std::vector<LayerSpec> layers;
  std::string list;
};

// Parses a layer list ("conv 32 3 pad=1, relu, maxpool 2, flatten, dense 10"; a trailing
// "softmax" names the loss and is dropped). An item "residual(<layer list>)" is one layer of kind
// residual whose `layers` are the list inside, "bottom K(<layer list>)" one of kind bottom (blocks
// do not nest). Throws pstrain::UsageError naming the offending token and showing where it is.
// Shapes are checked later, by Network.
std::vector<LayerSpec> parse_model(const std::string& spec);
// The layer list of --hidden's MLP: dense h, relu for each hidden width, then dense classes.
std::string mlp_model(const std::vector<int>& hidden, int classes);

// What a layer's passes need besides its inputs.
struct LayerContext {
  Backend& backend;
  float* col = nullptr;               // scratch, the largest Layer::col_floats(batch, backend)
  bool training = true;               // dropout is the identity when false
  uint64_t salt = 0;                  // dropout: a function of (seed, step); each layer mixes in its index
  const uint64_t* keys = nullptr;     // dropout: one per sample (its record), host memory
  float* scratch = nullptr;           // the layer's own, Layer::scratch_floats() x batch floats, kept
                                      // from its forward to its backward
  // batchnorm: the model's state (Network::state_layout(): running statistics), host memory;
  // training updates it unless `update_state` is false (a block recomputed by --recompute).
  float* state = nullptr;
  bool update_state = true;
  // batchnorm in training: its sums combined across the workers of the step (global statistics,
  // worker/exchange/stats_exchange.h); null: this worker's batch alone.
  StatsExchange* stats = nullptr;
};

class Layer {
 public:
  virtual ~Layer() = default;

  const Shape& in() const { return in_; }
  const Shape& out() const { return out_; }
  const std::string& text() const { return text_; }
  LayerKind kind() const { return kind_; }  // as in LayerSpec
  int index() const { return index_; }

  // Variables, appended to the layout as "layer<p>.weight" and "layer<p>.bias" (p counts the
  // layers that have parameters; in a residual block its inner layers, then its projection).
  virtual bool has_params() const { return false; }
  virtual void declare(Layout& layout, int p) { (void)layout, (void)p; }
  // How many of the counter p declare() takes (a residual block: its inner layers' and its
  // projection's).
  virtual int param_layers() const { return has_params() ? 1 : 0; }
  size_t weight_offset() const { return weight_; }
  // State: variables that are not trained but assigned by the forward pass (batchnorm's running
  // statistics), appended to the model's state layout as "layer<p>.<name>".
  virtual bool has_state() const { return false; }
  virtual void declare_state(Layout& state, int p) { (void)state, (void)p; }
  // Element-wise layers (relu, tanh, dropout) may run in place over their input.
  virtual bool elementwise() const { return false; }
  // Layers whose backward reads only their input (dense, conv) let the next element-wise layer
  // overwrite their output.
  virtual bool output_free_after_forward() const { return false; }
  // flatten: no computation, the output is the input.
  virtual bool identity() const { return false; }
  // Scratch for a batch on `backend` (conv: Backend::conv_scratch_floats, which does not grow
  // with the batch past a point).
  virtual size_t col_floats(int batch, const Backend& backend) const {
    (void)batch, (void)backend;
    return 0;
  }
  // Per sample: memory of the layer's own that its backward reads after its forward (a residual
  // block's inner activations and gradients), given as LayerContext::scratch.
  virtual size_t scratch_floats() const { return 0; }
  // The layer in Network::summary (a residual block: its inner layers and their shapes).
  virtual std::string describe() const { return text_; }

  virtual void forward(LayerContext& ctx, const float* params, const float* x, float* y, int batch) = 0;
  // dy: the loss's gradient w.r.t. y. Writes dx (skipped when null: the first layer) and the
  // parameters' gradients into grad (added when `accumulate`). y and x are forward's (x may be y
  // for an element-wise layer run in place).
  virtual void backward(LayerContext& ctx, const float* params, const float* x, const float* y, const float* dy,
                        float* dx, float* grad, int batch, bool accumulate) = 0;

 protected:
  Shape in_, out_;
  std::string text_;
  LayerKind kind_ = LayerKind::kDense;
  int index_ = 0;
  size_t weight_ = 0, bias_ = 0;  // offsets of the variables (has_params)
  size_t state_ = 0;              // offset of the state (has_state)
  friend std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const Shape& in, int index,
                                           const std::string& name);
};

// The layer of `spec` at position `index` of the list, on input shape `in`. Throws
// pstrain::UsageError naming the layer ("layer <index + 1>", or `name`: "layer 3.2" inside a
// residual block) when the shape does not suit it.
std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const Shape& in, int index, const std::string& name = "");

}  // namespace pstrain
