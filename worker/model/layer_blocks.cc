// Blocks of layers in a model: residual(<layers>) and bottom K(<layers>), both a LayerChain
// inside.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "shared/util/error.h"
#include "worker/model/layers.h"
#include "worker/model/layers_internal.h"

namespace pstrain {
namespace {

// A block's list of layers run one after another (residual and bottom blocks). Their
// activations and backward's gradients live in the block's scratch (LayerContext::scratch): per
// sample, each inner buffer, each inner layer's own scratch, then two gradient buffers.
class LayerChain {
 public:
  explicit LayerChain(std::vector<std::unique_ptr<Layer>> layers) : layers_(std::move(layers)) {
    size_t offset = 0;
    for (size_t j = 0; j < layers_.size(); ++j) {
      const Layer& l = *layers_[j];
      if (l.identity()) {
        buffer_.push_back(j == 0 ? kInput : buffer_[j - 1]);
      } else if (j > 0 && l.elementwise() && layers_[j - 1]->output_free_after_forward()) {
        buffer_.push_back(buffer_[j - 1]);  // in place, as Network::plan does
      } else {
        buffer_.push_back(offset);
        offset += l.out().size();
      }
      own_scratch_.push_back(offset);
      offset += l.scratch_floats();
      delta_size_ = std::max({delta_size_, l.in().size(), l.out().size()});
    }
    deltas_ = offset;
  }
  const Shape& in() const { return layers_.front()->in(); }
  const Shape& out() const { return layers_.back()->out(); }
  int param_layers() const {
    int n = 0;
    for (const auto& l : layers_) n += l->param_layers();
    return n;
  }
  // Declares the layers' variables from layer<p>; returns the next p.
  int declare(Layout& layout, int p) const {
    for (const auto& l : layers_) {
      if (!l->has_params()) continue;
      l->declare(layout, p);
      p += l->param_layers();
    }
    return p;
  }
  // The inner batchnorm layers' running statistics, numbered as their variables.
  bool has_state() const {
    return std::any_of(layers_.begin(), layers_.end(), [](const std::unique_ptr<Layer>& l) { return l->has_state(); });
  }
  void declare_state(Layout& state, int p) const {
    for (const auto& l : layers_) {
      if (!l->has_params()) continue;
      if (l->has_state()) l->declare_state(state, p);
      p += l->param_layers();
    }
  }
  size_t col_floats(int batch, const Backend& backend) const {
    size_t col = 0;
    for (const auto& l : layers_) col = std::max(col, l->col_floats(batch, backend));
    return col;
  }
  size_t scratch_floats() const { return deltas_ + 2 * delta_size_; }
  // "conv 4 3 pad=1 -> 4x8x8 -> relu": each layer, and the shape where it may have changed (as in
  // Network::summary).
  std::string describe() const {
    std::string s;
    for (size_t j = 0; j < layers_.size(); ++j) {
      const Layer& l = *layers_[j];
      s += (j ? " -> " : "") + l.describe();
      if (!l.elementwise() && !(l.in().flat == l.out().flat && l.in().size() == l.out().size() && !l.has_params())) {
        s += " -> " + l.out().text();
      }
    }
    return s;
  }

  // Runs the layers on x, with ctx.scratch the chain's; returns their output (in the scratch, or x
  // itself when every layer is an identity).
  const float* forward(LayerContext& ctx, const float* params, const float* x, int batch) {
    float* scratch = ctx.scratch;
    for (size_t j = 0; j < layers_.size(); ++j) {
      if (layers_[j]->identity()) continue;
      ctx.scratch = scratch + own_scratch_[j] * static_cast<size_t>(batch);
      layers_[j]->forward(ctx, params, input(j, x, scratch, batch), output(j, x, scratch, batch), batch);
    }
    ctx.scratch = scratch;
    return output(layers_.size() - 1, x, scratch, batch);
  }
  // Runs the layers back to front from dy (the output's gradient, left as it is), x and ctx.scratch
  // forward's; returns the input's gradient (in the scratch, or dy itself when every layer is an
  // identity), or null when `want_dx` is false.
  const float* backward(LayerContext& ctx, const float* params, const float* x, const float* dy, float* grad,
                        int batch, bool accumulate, bool want_dx) {
    float* scratch = ctx.scratch;
    float* spare[2] = {scratch + deltas_ * static_cast<size_t>(batch),
                       scratch + (deltas_ + delta_size_) * static_cast<size_t>(batch)};
    size_t first = 0;  // the first layer that computes: its dx is the chain's
    while (first + 1 < layers_.size() && layers_[first]->identity()) ++first;
    const float* delta = dy;
    for (size_t j = layers_.size(); j-- > first;) {
      Layer& l = *layers_[j];
      if (l.identity()) continue;
      float* out = l.elementwise() && delta != dy ? const_cast<float*>(delta) : delta == spare[0] ? spare[1] : spare[0];
      if (j == first && !want_dx) out = nullptr;
      ctx.scratch = scratch + own_scratch_[j] * static_cast<size_t>(batch);
      l.backward(ctx, params, input(j, x, scratch, batch), output(j, x, scratch, batch), delta, out, grad, batch,
                 accumulate);
      delta = out;
    }
    ctx.scratch = scratch;
    return delta;
  }

 private:
  static constexpr size_t kInput = static_cast<size_t>(-1);  // a buffer that is the chain's input
  const float* input(size_t j, const float* x, float* scratch, int batch) const {
    return j == 0 ? x : output(j - 1, x, scratch, batch);
  }
  float* output(size_t j, const float* x, float* scratch, int batch) const {
    return buffer_[j] == kInput ? const_cast<float*>(x) : scratch + buffer_[j] * static_cast<size_t>(batch);
  }
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<size_t> buffer_, own_scratch_;  // per layer, per-sample offsets in the scratch
  size_t deltas_ = 0, delta_size_ = 0;        // where the two gradient buffers start; each's size
};

// residual(<layers>): y = block(x) + shortcut(x), the shortcut x itself or a learned projection
// (a 1x1 conv or a dense layer, `projection_`) where the block changes the shape. The scratch is
// the chain's.
class Residual final : public Layer {
 public:
  Residual(LayerChain chain, std::unique_ptr<Layer> projection)
      : chain_(std::move(chain)), projection_(std::move(projection)) {
    in_ = chain_.in();
    out_ = chain_.out();
  }
  bool has_params() const override { return param_layers() > 0; }
  int param_layers() const override { return chain_.param_layers() + (projection_ ? 1 : 0); }
  // Variables in order of appearance: the inner layers', then the projection's.
  void declare(Layout& layout, int p) override {
    weight_ = layout.total();
    p = chain_.declare(layout, p);
    if (projection_) projection_->declare(layout, p);
  }
  bool has_state() const override { return chain_.has_state(); }
  void declare_state(Layout& state, int p) override { chain_.declare_state(state, p); }
  // Backward reads x and the block's insides, not y.
  bool output_free_after_forward() const override { return true; }
  size_t col_floats(int batch, const Backend& backend) const override {
    return std::max(projection_ ? projection_->col_floats(batch, backend) : 0,
                    chain_.col_floats(batch, backend));
  }
  size_t scratch_floats() const override { return chain_.scratch_floats(); }
  std::string describe() const override {
    return "residual(" + chain_.describe() + ") + " +
           (projection_ ? "projection " + projection_->text() : std::string("identity"));
  }

  void forward(LayerContext& ctx, const float* params, const float* x, float* y, int batch) override {
    const float* h = chain_.forward(ctx, params, x, batch);
    const size_t n = static_cast<size_t>(batch) * out_.size();
    if (projection_) {
      projection_->forward(ctx, params, x, y, batch);
      ctx.backend.add(y, h, y, n);
    } else {
      ctx.backend.add(x, h, y, n);
    }
  }
  // dx = the block's dx + the shortcut's (dy, or the projection's dx).
  void backward(LayerContext& ctx, const float* params, const float* x, const float* y, const float* dy, float* dx,
                float* grad, int batch, bool accumulate) override {
    const float* delta = chain_.backward(ctx, params, x, dy, grad, batch, accumulate, dx != nullptr);
    if (projection_) projection_->backward(ctx, params, x, y, dy, dx, grad, batch, accumulate);
    if (dx == nullptr) return;
    ctx.backend.add(projection_ ? dx : dy, delta, dx, static_cast<size_t>(batch) * in_.size());
  }

 private:
  LayerChain chain_;
  std::unique_ptr<Layer> projection_;
};

// bottom K(<layers>) (DLRM's bottom MLP): y = [layers(x[:K]), x[K:]] per sample, on a flat input.
// Its scratch, per sample: x[:K] (kept for backward), the chain's, then the layers' dy.
class Bottom final : public Layer {
 public:
  Bottom(LayerChain chain, size_t inputs) : chain_(std::move(chain)) {
    in_ = Shape::vector(inputs);
    out_ = Shape::vector(chain_.out().size() + rest());
  }
  bool has_params() const override { return param_layers() > 0; }
  int param_layers() const override { return chain_.param_layers(); }
  void declare(Layout& layout, int p) override {
    weight_ = layout.total();
    chain_.declare(layout, p);
  }
  bool has_state() const override { return chain_.has_state(); }
  void declare_state(Layout& state, int p) override { chain_.declare_state(state, p); }
  // Backward reads its scratch and dy only.
  bool output_free_after_forward() const override { return true; }
  size_t col_floats(int batch, const Backend& backend) const override {
    return chain_.col_floats(batch, backend);
  }
  size_t scratch_floats() const override { return taken() + chain_.scratch_floats() + made(); }
  std::string describe() const override {
    return "bottom " + std::to_string(taken()) + "(" + chain_.describe() + "), the other " + std::to_string(rest()) +
           " passed on";
  }

  void forward(LayerContext& ctx, const float* params, const float* x, float* y, int batch) override {
    float* scratch = ctx.scratch;
    float* head = scratch;
    ctx.backend.copy_columns(x, batch, cols(in_), 0, cols(taken()), head, cols(taken()), 0);
    ctx.scratch = scratch + taken() * static_cast<size_t>(batch);
    const float* h = chain_.forward(ctx, params, head, batch);
    ctx.scratch = scratch;
    ctx.backend.copy_columns(h, batch, cols(made()), 0, cols(made()), y, cols(out_), 0);
    ctx.backend.copy_columns(x, batch, cols(in_), cols(taken()), cols(rest()), y, cols(out_), cols(made()));
  }
  // dx = [the layers' dx, dy[K:]].
  void backward(LayerContext& ctx, const float* params, const float*, const float*, const float* dy, float* dx,
                float* grad, int batch, bool accumulate) override {
    float* scratch = ctx.scratch;
    float* dh = scratch + (taken() + chain_.scratch_floats()) * static_cast<size_t>(batch);
    ctx.backend.copy_columns(dy, batch, cols(out_), 0, cols(made()), dh, cols(made()), 0);
    ctx.scratch = scratch + taken() * static_cast<size_t>(batch);
    const float* delta = chain_.backward(ctx, params, scratch, dh, grad, batch, accumulate, dx != nullptr);
    ctx.scratch = scratch;
    if (dx == nullptr) return;
    ctx.backend.copy_columns(delta, batch, cols(taken()), 0, cols(taken()), dx, cols(in_), 0);
    ctx.backend.copy_columns(dy, batch, cols(out_), cols(made()), cols(rest()), dx, cols(in_), cols(taken()));
  }

 private:
  size_t taken() const { return chain_.in().size(); }  // K
  size_t made() const { return chain_.out().size(); }  // the layers' outputs
  size_t rest() const { return in_.size() - taken(); }
  static int cols(size_t n) { return static_cast<int>(n); }
  static int cols(const Shape& s) { return static_cast<int>(s.size()); }
  LayerChain chain_;
};

// parallel(<layers> | <layers> | ...): y = the sum of the branches' outputs, each branch a chain
// on the same x (wide & deep: a linear branch beside an MLP). Backward runs each branch from dy,
// and dx is the sum of their input gradients, added in branch order. The scratch is the chains',
// one after another.
class Parallel final : public Layer {
 public:
  explicit Parallel(std::vector<LayerChain> branches) : branches_(std::move(branches)) {
    in_ = branches_.front().in();
    out_ = branches_.front().out();
  }
  bool has_params() const override { return param_layers() > 0; }
  int param_layers() const override {
    int n = 0;
    for (const LayerChain& b : branches_) n += b.param_layers();
    return n;
  }
  // Variables in order of appearance: the first branch's, then the second's, ...
  void declare(Layout& layout, int p) override {
    weight_ = layout.total();
    for (const LayerChain& b : branches_) p = b.declare(layout, p);
  }
  bool has_state() const override {
    return std::any_of(branches_.begin(), branches_.end(), [](const LayerChain& b) { return b.has_state(); });
  }
  void declare_state(Layout& state, int p) override {
    for (const LayerChain& b : branches_) {
      b.declare_state(state, p);
      p += b.param_layers();
    }
  }
  bool output_free_after_forward() const override { return true; }  // backward reads x and the insides
  size_t col_floats(int batch, const Backend& backend) const override {
    size_t col = 0;
    for (const LayerChain& b : branches_) col = std::max(col, b.col_floats(batch, backend));
    return col;
  }
  size_t scratch_floats() const override {
    size_t n = 0;
    for (const LayerChain& b : branches_) n += b.scratch_floats();
    return n;
  }
  std::string describe() const override {
    std::string s = "parallel(";
    for (size_t k = 0; k < branches_.size(); ++k) s += (k ? " | " : "") + branches_[k].describe();
    return s + ") summed";
  }

  void forward(LayerContext& ctx, const float* params, const float* x, float* y, int batch) override {
    float* scratch = ctx.scratch;
    const size_t n = static_cast<size_t>(batch) * out_.size();
    std::vector<const float*> h;
    for (size_t k = 0; k < branches_.size(); ++k) {
      ctx.scratch = scratch + offset(k) * static_cast<size_t>(batch);
      h.push_back(branches_[k].forward(ctx, params, x, batch));
    }
    ctx.scratch = scratch;
    ctx.backend.add(h[0], h[1], y, n);
    for (size_t k = 2; k < h.size(); ++k) ctx.backend.add(y, h[k], y, n);
  }
  void backward(LayerContext& ctx, const float* params, const float* x, const float*, const float* dy, float* dx,
                float* grad, int batch, bool accumulate) override {
    float* scratch = ctx.scratch;
    std::vector<const float*> deltas;
    for (size_t k = 0; k < branches_.size(); ++k) {
      ctx.scratch = scratch + offset(k) * static_cast<size_t>(batch);
      deltas.push_back(branches_[k].backward(ctx, params, x, dy, grad, batch, accumulate, dx != nullptr));
    }
    ctx.scratch = scratch;
    if (dx == nullptr) return;
    const size_t n = static_cast<size_t>(batch) * in_.size();
    ctx.backend.add(deltas[0], deltas[1], dx, n);
    for (size_t k = 2; k < deltas.size(); ++k) ctx.backend.add(dx, deltas[k], dx, n);
  }

 private:
  size_t offset(size_t k) const {  // per sample, where branch k's scratch starts
    size_t n = 0;
    for (size_t i = 0; i < k; ++i) n += branches_[i].scratch_floats();
    return n;
  }
  std::vector<LayerChain> branches_;
};

// A block's layers on input `in` (named "<name>.<j>" in errors). Dropout inside draws masks of its
// own: its index is apart from every top-level layer's (`first`: the index of the first, past the
// layers of a parallel block's earlier branches).
std::vector<std::unique_ptr<Layer>> make_block_layers(const LayerSpec& spec, const Shape& in, int index,
                                                      const std::string& name, int first = 0) {
  std::vector<std::unique_ptr<Layer>> layers;
  Shape shape = in;
  for (size_t j = 0; j < spec.layers.size(); ++j) {
    const int inner_index = (index + 1) * 65536 + first + static_cast<int>(j);
    layers.push_back(make_layer(spec.layers[j], shape, inner_index, name + "." + std::to_string(j + 1)));
    shape = layers.back()->out();
  }
  return layers;
}

// A block's shape error: "--model: <name> '<text>' <message>", pointing at the block in the list
// where it was parsed from one.
[[noreturn]] void fail_block(const LayerSpec& spec, const std::string& name, const std::string& message) {
  const std::string text = name + " '" + spec.text + "' " + message;
  if (spec.list.empty()) throw UsageError("--model: " + text);
  fail_at_spec(spec.list, spec.position, spec.text.size(), text);
}

}  // namespace

// The layers of a residual block on input `in`, and the shortcut's projection where the block
// changes the shape; throws UsageError pointing at the block where no projection fits.
std::unique_ptr<Layer> make_residual(const LayerSpec& spec, const Shape& in, int index, const std::string& name) {
  std::vector<std::unique_ptr<Layer>> inner = make_block_layers(spec, in, index, name);
  const Shape shape = inner.back()->out();
  const auto fail = [&](const std::string& why) {
    fail_block(spec, name, "maps " + in.text() + " to " + shape.text() + ": " + why);
  };
  std::unique_ptr<Layer> projection;
  if (shape.flat != in.flat || (shape.flat && shape.size() != in.size()) ||
      (!shape.flat && (shape.c != in.c || shape.h != in.h || shape.w != in.w))) {
    LayerSpec p;
    if (in.flat && shape.flat) {
      p.kind = LayerKind::kDense;
      p.args = {static_cast<double>(shape.size())};
      p.text = "dense " + std::to_string(shape.size());
    } else if (!in.flat && !shape.flat) {
      int stride = 1;  // the least that maps H x W to OH x OW: (H - 1) / S + 1
      while (stride <= std::max(in.h, in.w) &&
             ((in.h - 1) / stride + 1 != shape.h || (in.w - 1) / stride + 1 != shape.w)) {
        ++stride;
      }
      if (stride > std::max(in.h, in.w)) {
        fail("no 1x1 convolution with a whole stride maps " + std::to_string(in.h) + "x" + std::to_string(in.w) +
             " to " + std::to_string(shape.h) + "x" + std::to_string(shape.w) + ", so the shortcut has no projection");
      }
      p.kind = LayerKind::kConv;
      p.args = {static_cast<double>(shape.c), 1};
      p.options = {{"stride", stride}};
      p.text = "conv " + std::to_string(shape.c) + " 1 stride=" + std::to_string(stride);
    } else {
      fail(std::string("the shortcut cannot project ") + (in.flat ? "a flat vector to an image" : "an image to a flat vector") +
           " (end the block before its flatten, globalavgpool or dense layer)");
    }
    projection = make_layer(p, in, (index + 1) * 65536 + 65535, name + "'s projection");
  }
  return std::make_unique<Residual>(LayerChain(std::move(inner)), std::move(projection));
}

// bottom K(<layers>) on a flat input of more than K values.
std::unique_ptr<Layer> make_bottom(const LayerSpec& spec, const Shape& in, int index, const std::string& name) {
  const auto taken = static_cast<size_t>(spec.args[0]);
  if (!in.flat) {
    fail_block(spec, name, "needs a flat input (the dense features, then the embedding rows), but gets an image of " +
                               in.text() + " (put a flatten before it)");
  }
  if (taken > in.size()) {
    fail_block(spec, name, "takes the first " + std::to_string(taken) + " values of its input, but its input is only " +
                               in.text() + " values (with --embedding-dim D, a CTR record is 13 + 26 x D)");
  }
  if (taken == in.size()) {
    fail_block(spec, name, "takes all " + in.text() +
                               " values of its input and passes none on (without the block, its layers take them all)");
  }
  return std::make_unique<Bottom>(LayerChain(make_block_layers(spec, Shape::vector(taken), index, name)), in.size());
}

// parallel(<branch> | <branch> ...) on any input; every branch must give the same shape.
std::unique_ptr<Layer> make_parallel(const LayerSpec& spec, const Shape& in, int index, const std::string& name) {
  std::vector<LayerChain> branches;
  int first = 0;
  for (size_t k = 0; k < spec.layers.size(); ++k) {
    const LayerSpec& b = spec.layers[k];
    branches.emplace_back(make_block_layers(b, in, index, name + "." + std::to_string(k + 1), first));
    first += static_cast<int>(b.layers.size());
    const Shape& a = branches.front().out();
    const Shape& o = branches.back().out();
    if (a.flat != o.flat || a.c != o.c || a.h != o.h || a.w != o.w) {
      fail_block(spec, name, "sums its branches, but branch 1 '" + spec.layers[0].text + "' gives " + a.text() +
                                 " and branch " + std::to_string(k + 1) + " '" + b.text + "' gives " + o.text() +
                                 " (end each branch with the same width, e.g. dense 1)");
    }
  }
  return std::make_unique<Parallel>(std::move(branches));
}

}  // namespace pstrain
