#include "worker/model/layers.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "shared/util/error.h"
#include "worker/model/layers_internal.h"

namespace pstrain {
namespace {

int option(const LayerSpec& spec, const std::string& key, int fallback) {
  for (const auto& [k, v] : spec.options) {
    if (k == key) return v;
  }
  return fallback;
}

class Dense final : public Layer {
 public:
  explicit Dense(int outputs) : outputs_(outputs) {}
  bool has_params() const override { return true; }
  bool output_free_after_forward() const override { return true; }
  void declare(Layout& layout, int p) override {
    weight_ = layout.add("layer" + std::to_string(p) + ".weight", {in_.size(), static_cast<size_t>(outputs_)}).offset;
    bias_ = layout.add("layer" + std::to_string(p) + ".bias", {static_cast<size_t>(outputs_)}).offset;
  }
  void forward(LayerContext& ctx, const float* params, const float* x, float* y, int batch) override {
    const int in = static_cast<int>(in_.size());
    ctx.backend.gemm(false, false, batch, outputs_, in, 1.0f, x, params + weight_, 0.0f, y);
    ctx.backend.add_bias(y, params + bias_, batch, outputs_, 1);
  }
  void backward(LayerContext& ctx, const float* params, const float* x, const float*, const float* dy, float* dx,
                float* grad, int batch, bool accumulate) override {
    const int in = static_cast<int>(in_.size());
    ctx.backend.gemm(true, false, in, outputs_, batch, 1.0f, x, dy, accumulate ? 1.0f : 0.0f, grad + weight_);
    ctx.backend.bias_grad(dy, batch, outputs_, 1, grad + bias_, accumulate);
    if (dx != nullptr) ctx.backend.gemm(false, true, batch, in, outputs_, 1.0f, dy, params + weight_, 0.0f, dx);
  }

 private:
  int outputs_;
};

class Conv final : public Layer {
 public:
  explicit Conv(const ConvGeometry& g, int outputs) : g_(g), outputs_(outputs) {}
  bool has_params() const override { return true; }
  bool output_free_after_forward() const override { return true; }
  size_t col_floats(int batch, const Backend& backend) const override {
    return backend.conv_scratch_floats(batch, g_, outputs_);
  }
  void declare(Layout& layout, int p) override {
    const auto k = static_cast<size_t>(g_.kernel);
    weight_ = layout.add("layer" + std::to_string(p) + ".weight",
                         {static_cast<size_t>(outputs_), static_cast<size_t>(g_.channels), k, k})
                  .offset;
    bias_ = layout.add("layer" + std::to_string(p) + ".bias", {static_cast<size_t>(outputs_)}).offset;
  }
  void forward(LayerContext& ctx, const float* params, const float* x, float* y, int batch) override {
    ctx.backend.conv_forward(x, batch, g_, outputs_, params + weight_, params + bias_, y, ctx.col);
  }
  void backward(LayerContext& ctx, const float* params, const float* x, const float*, const float* dy, float* dx,
                float* grad, int batch, bool accumulate) override {
    ctx.backend.conv_backward(x, dy, batch, g_, outputs_, params + weight_, dx, grad + weight_, grad + bias_,
                              accumulate, ctx.col);
  }

 private:
  ConvGeometry g_;
  int outputs_;
};

class Pool final : public Layer {
 public:
  Pool(PoolKind kind, const PoolGeometry& g) : kind_(kind), g_(g) {}
  size_t col_floats(int batch, const Backend& backend) const override {
    return backend.pool_scratch_floats(kind_, batch * in_.c, g_);
  }
  void forward(LayerContext& ctx, const float*, const float* x, float* y, int batch) override {
    ctx.backend.pool(kind_, x, batch * in_.c, g_, y, ctx.col);
  }
  void backward(LayerContext& ctx, const float*, const float* x, const float* y, const float* dy, float* dx, float*,
                int batch, bool) override {
    if (dx != nullptr) ctx.backend.pool_backward(kind_, x, y, dy, batch * in_.c, g_, dx, ctx.col);
  }

 private:
  PoolKind kind_;
  PoolGeometry g_;
};

class Flatten final : public Layer {
 public:
  bool identity() const override { return true; }
  void forward(LayerContext&, const float*, const float*, float*, int) override {}
  void backward(LayerContext&, const float*, const float*, const float*, const float*, float*, float*, int,
                bool) override {}
};

// Each channel's mean over its plane ([C, H, W] -> [C]), as a GEMM against a column of 1/(H*W)
// put in the layer's scratch: no kernel of its own on any backend. Backward spreads dy / (H*W).
class GlobalAvgPool final : public Layer {
 public:
  size_t col_floats(int, const Backend&) const override { return plane(); }
  void forward(LayerContext& ctx, const float*, const float* x, float* y, int batch) override {
    fill_scale(ctx);
    ctx.backend.gemm(false, false, batch * in_.c, 1, static_cast<int>(plane()), 1.0f, x, ctx.col, 0.0f, y);
  }
  void backward(LayerContext& ctx, const float*, const float*, const float*, const float* dy, float* dx, float*,
                int batch, bool) override {
    if (dx == nullptr) return;
    fill_scale(ctx);
    ctx.backend.gemm(false, false, batch * in_.c, static_cast<int>(plane()), 1, 1.0f, dy, ctx.col, 0.0f, dx);
  }

 private:
  size_t plane() const { return static_cast<size_t>(in_.h) * static_cast<size_t>(in_.w); }
  void fill_scale(LayerContext& ctx) const {
    const std::vector<float> scale(plane(), 1.0f / static_cast<float>(plane()));
    ctx.backend.upload(ctx.col, scale.data(), scale.size());
  }
};

// Layer normalisation over each sample's features (all of C x H x W for an image, as PyTorch's
// LayerNorm([C, H, W])), with a scale (weight, 1 at start) and shift (bias, 0) per feature.
class LayerNorm final : public Layer {
 public:
  explicit LayerNorm(float eps) : eps_(eps) {}
  bool has_params() const override { return true; }
  // dy * xhat, and for the first layer of a model (no dx wanted) a place for the dx computed anyway.
  size_t col_floats(int batch, const Backend&) const override {
    return 2 * static_cast<size_t>(batch) * in_.size();
  }
  void declare(Layout& layout, int p) override {
    weight_ = layout.add("layer" + std::to_string(p) + ".weight", {in_.size()}, 1.0f).offset;
    bias_ = layout.add("layer" + std::to_string(p) + ".bias", {in_.size()}).offset;
  }
  void forward(LayerContext& ctx, const float* params, const float* x, float* y, int batch) override {
    ctx.backend.layer_norm(x, batch, features(), params + weight_, params + bias_, eps_, y);
  }
  void backward(LayerContext& ctx, const float* params, const float* x, const float*, const float* dy, float* dx,
                float* grad, int batch, bool accumulate) override {
    float* dy_xhat = ctx.col;  // [batch, features]
    float* into = dx != nullptr ? dx : ctx.col + static_cast<size_t>(batch) * in_.size();
    ctx.backend.layer_norm_backward(x, dy, batch, features(), params + weight_, eps_, into, dy_xhat);
    ctx.backend.bias_grad(dy_xhat, batch, features(), 1, grad + weight_, accumulate);
    ctx.backend.bias_grad(dy, batch, features(), 1, grad + bias_, accumulate);
  }

 private:
  int features() const { return static_cast<int>(in_.size()); }
  float eps_;
};

// Batch normalisation (docs/models.md): each channel normalised over the batch (and H x W after a
// conv), as PyTorch's BatchNorm1d / BatchNorm2d, then scaled (weight, 1 at start) and shifted
// (bias, 0). Training normalises with the batch's mean and biased variance and moves the running
// statistics (the model's state) towards them by `momentum`, the variance unbiased; evaluation
// normalises with the running statistics. The sums are the backend's (double, fixed order); the
// statistics are formed from them on the host, the same code for every backend.
class BatchNorm final : public Layer {
 public:
  BatchNorm(double momentum, double eps) : momentum_(momentum), eps_(eps) {}
  bool has_params() const override { return true; }
  bool has_state() const override { return true; }
  bool output_free_after_forward() const override { return true; }  // backward reads x and dy
  // The statistics' floats on the device: mean, invstd, dy's mean, (dy xhat)'s mean; then the
  // parameters' gradients.
  size_t col_floats(int, const Backend&) const override { return 6 * channels(); }
  void declare(Layout& layout, int p) override {
    weight_ = layout.add("layer" + std::to_string(p) + ".weight", {channels()}, 1.0f).offset;
    bias_ = layout.add("layer" + std::to_string(p) + ".bias", {channels()}).offset;
  }
  void declare_state(Layout& state, int p) override {
    state_ = state.add("layer" + std::to_string(p) + ".running_mean", {channels()}).offset;
    state.add("layer" + std::to_string(p) + ".running_var", {channels()}, 1.0f);
  }
  void forward(LayerContext& ctx, const float* params, const float* x, float* y, int batch) override {
    const size_t c = channels();
    std::vector<float> stats(2 * c);
    float* running_mean = ctx.state + state_;
    float* running_var = running_mean + c;
    if (ctx.training) {
      double n = 0;
      const std::vector<double> moments = batch_moments(ctx, x, batch, &n);
      normalisation(moments.data(), moments.data() + c, stats);
      if (ctx.update_state) update_running(moments, n, running_mean, running_var);
      forward_stats_ = stats;  // for backward: the batch's statistics need no second pass (nor exchange)
    } else {
      const std::vector<double> mean(running_mean, running_mean + c), var(running_var, running_var + c);
      normalisation(mean.data(), var.data(), stats);
    }
    ctx.backend.upload(ctx.col, stats.data(), stats.size());
    ctx.backend.batch_norm_apply(x, batch, static_cast<int>(c), inner(), ctx.col, params + weight_, params + bias_, y);
  }
  // The training-mode backward: with m = N x H x W values per channel,
  // dx = gamma invstd (dy - mean(dy) - xhat mean(dy xhat)); gamma's gradient is the sum of dy xhat,
  // beta's that of dy. The batch's statistics are those its training forward formed (with
  // --recompute, the forward run again for this backward).
  void backward(LayerContext& ctx, const float* params, const float* x, const float*, const float* dy, float* dx,
                float* grad, int batch, bool accumulate) override {
    const size_t c = channels();
    if (forward_stats_.size() != 2 * c) throw std::logic_error("batchnorm backward without its training forward");
    std::vector<float> stats(6 * c);
    std::copy(forward_stats_.begin(), forward_stats_.end(), stats.begin());
    ctx.backend.upload(ctx.col, stats.data(), 2 * c);
    std::vector<double> sums(2 * c);
    ctx.backend.batch_norm_backward_sums(x, dy, batch, static_cast<int>(c), inner(), ctx.col, sums.data());
    for (size_t i = 0; i < c; ++i) {
      stats[4 * c + i] = static_cast<float>(sums[c + i]);  // gamma's gradient: this worker's part (the PS sums them)
      stats[5 * c + i] = static_cast<float>(sums[i]);      // beta's
    }
    const double m = combined(ctx, count(batch), sums);  // dx needs the means over every worker's batch
    for (size_t i = 0; i < c; ++i) {
      stats[2 * c + i] = static_cast<float>(sums[i] / m);
      stats[3 * c + i] = static_cast<float>(sums[c + i] / m);
    }
    ctx.backend.upload(ctx.col, stats.data(), stats.size());
    if (dx != nullptr) {
      ctx.backend.batch_norm_backward_apply(x, dy, batch, static_cast<int>(c), inner(), ctx.col, params + weight_, dx);
    }
    // One row of C: bias_grad copies it into (or adds it to) the gradient.
    ctx.backend.bias_grad(ctx.col + 4 * c, 1, static_cast<int>(c), 1, grad + weight_, accumulate);
    ctx.backend.bias_grad(ctx.col + 5 * c, 1, static_cast<int>(c), 1, grad + bias_, accumulate);
  }

 private:
  size_t channels() const { return in_.flat ? in_.size() : static_cast<size_t>(in_.c); }
  int inner() const { return in_.flat ? 1 : in_.h * in_.w; }
  std::vector<float> forward_stats_;  // the last training forward's mean and 1 / sqrt(var + eps), 2C floats
  double count(int batch) const { return static_cast<double>(batch) * inner(); }
  // Global statistics: `sums` and this worker's count `n` replaced by their sums over the
  // workers (in the order count, sums); returns the count. Without an exchange: n.
  static double combined(LayerContext& ctx, double n, std::vector<double>& sums) {
    if (ctx.stats == nullptr) return n;
    sums.insert(sums.begin(), n);
    ctx.stats->combine(sums);
    n = sums.front();
    sums.erase(sums.begin());
    return n;
  }
  // Each channel's mean, then its biased variance, from the backend's sums (over every worker's
  // batch with global statistics); *n receives the count.
  std::vector<double> batch_moments(LayerContext& ctx, const float* x, int batch, double* n_out = nullptr) const {
    const size_t c = channels();
    std::vector<double> sums(2 * c);
    ctx.backend.batch_norm_sums(x, batch, static_cast<int>(c), inner(), sums.data());
    const double n = combined(ctx, count(batch), sums);
    if (n_out != nullptr) *n_out = n;
    for (size_t i = 0; i < c; ++i) {
      const double mean = sums[i] / n;
      sums[c + i] = std::max(sums[c + i] / n - mean * mean, 0.0);
      sums[i] = mean;
    }
    return sums;
  }
  // stats[0, c) = mean, stats[c, 2c) = 1 / sqrt(var + eps), as floats.
  void normalisation(const double* mean, const double* var, std::vector<float>& stats) const {
    const size_t c = channels();
    for (size_t i = 0; i < c; ++i) {
      stats[i] = static_cast<float>(mean[i]);
      stats[c + i] = static_cast<float>(1.0 / std::sqrt(var[i] + eps_));
    }
  }
  // PyTorch's update: running = (1 - momentum) running + momentum * batch's, the variance
  // unbiased (times n / (n - 1); with one value per channel, the biased variance, 0).
  void update_running(const std::vector<double>& moments, double n, float* mean, float* var) const {
    const size_t c = channels();
    const double unbias = n > 1 ? n / (n - 1) : 1.0;
    for (size_t i = 0; i < c; ++i) {
      mean[i] = static_cast<float>((1 - momentum_) * mean[i] + momentum_ * moments[i]);
      var[i] = static_cast<float>((1 - momentum_) * var[i] + momentum_ * moments[c + i] * unbias);
    }
  }
  double momentum_, eps_;
};

class Act final : public Layer {
 public:
  explicit Act(Activation f) : f_(f) {}
  // In place over its input, but gelu: its backward needs the input (no closed form from y).
  bool elementwise() const override { return f_ != Activation::kGelu; }
  void forward(LayerContext& ctx, const float*, const float* x, float* y, int batch) override {
    ctx.backend.activation(f_, x, y, static_cast<size_t>(batch) * in_.size());
  }
  void backward(LayerContext& ctx, const float*, const float* x, const float* y, const float* dy, float* dx, float*,
                int batch, bool) override {
    if (dx != nullptr) ctx.backend.activation_backward(f_, x, y, dy, dx, static_cast<size_t>(batch) * in_.size());
  }

 private:
  Activation f_;
};

class Dropout final : public Layer {
 public:
  explicit Dropout(float rate) : rate_(rate) {}
  bool elementwise() const override { return true; }
  void forward(LayerContext& ctx, const float*, const float* x, float* y, int batch) override {
    // Not training: the identity (rate 0 keeps every element, times 1).
    ctx.backend.dropout(x, y, batch, static_cast<int>(in_.size()), ctx.training ? rate_ : 0.0f, ctx.keys, salt(ctx));
  }
  void backward(LayerContext& ctx, const float*, const float*, const float*, const float* dy, float* dx, float*,
                int batch, bool) override {
    if (dx != nullptr) ctx.backend.dropout(dy, dx, batch, static_cast<int>(in_.size()), rate_, ctx.keys, salt(ctx));
  }

 private:
  uint64_t salt(const LayerContext& ctx) const {
    return ctx.salt ^ (static_cast<uint64_t>(index_ + 1) * 0xa0761d6478bd642fULL);
  }
  float rate_;
};

// conv, maxpool, avgpool: a window over an image input, its output's shape in *out.
std::unique_ptr<Layer> make_windowed(const LayerSpec& spec, const Shape& in, const std::string& where, Shape* out) {
  if (in.flat) {
    throw UsageError(where + "needs an image input (channels x height x width), but gets a flat vector of " +
                     in.text() + " values (a dense or flatten layer, or flat data, comes before it)");
  }
  const bool conv = spec.kind == LayerKind::kConv;
  const int kernel = static_cast<int>(spec.args[conv ? 1 : 0]);
  const int stride = option(spec, "stride", conv ? 1 : kernel);
  const int pad = option(spec, "pad", 0);
  if (in.h + 2 * pad < kernel || in.w + 2 * pad < kernel) {
    throw UsageError(where + "has a window of " + std::to_string(kernel) + " but its input is only " + in.text() +
                     (pad > 0 ? " (padded by " + std::to_string(pad) + ")" : ""));
  }
  const int oh = (in.h + 2 * pad - kernel) / stride + 1, ow = (in.w + 2 * pad - kernel) / stride + 1;
  if (conv) {
    if (pad >= kernel) throw UsageError(where + "has a padding of at least its kernel size");
    const ConvGeometry g{in.c, in.h, in.w, kernel, stride, pad, oh, ow};
    const int outputs = static_cast<int>(spec.args[0]);
    *out = Shape::image(outputs, oh, ow);
    return std::make_unique<Conv>(g, outputs);
  }
  const PoolGeometry g{in.h, in.w, kernel, stride, oh, ow};
  *out = Shape::image(in.c, oh, ow);
  return std::make_unique<Pool>(spec.kind == LayerKind::kMaxPool ? PoolKind::kMax : PoolKind::kAverage, g);
}

}  // namespace

std::string Shape::text() const {
  return flat ? std::to_string(size()) : std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

namespace {

// The layer of spec's kind (not a block), its output's shape in *out (in unless it changes).
std::unique_ptr<Layer> make_plain(const LayerSpec& spec, const Shape& in, const std::string& where, Shape* out) {
  switch (spec.kind) {
    case LayerKind::kDense: {
      const int outputs = static_cast<int>(spec.args[0]);
      *out = Shape::vector(static_cast<size_t>(outputs));
      return std::make_unique<Dense>(outputs);
    }
    case LayerKind::kConv:
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool: return make_windowed(spec, in, where, out);
    case LayerKind::kLayerNorm: return std::make_unique<LayerNorm>(1e-5f);  // PyTorch's default eps
    case LayerKind::kBatchNorm:
      return std::make_unique<BatchNorm>(spec.args.empty() ? 0.1 : spec.args[0], 1e-5);  // PyTorch's defaults
    case LayerKind::kGlobalAvgPool:
      if (in.flat) throw UsageError(where + "needs an image input (channels x height x width), not " + in.text());
      *out = Shape::vector(static_cast<size_t>(in.c));
      return std::make_unique<GlobalAvgPool>();
    case LayerKind::kFlatten: *out = Shape::vector(in.size()); return std::make_unique<Flatten>();
    case LayerKind::kRelu: return std::make_unique<Act>(Activation::kRelu);
    case LayerKind::kTanh: return std::make_unique<Act>(Activation::kTanh);
    case LayerKind::kSigmoid: return std::make_unique<Act>(Activation::kSigmoid);
    case LayerKind::kGelu: return std::make_unique<Act>(Activation::kGelu);
    case LayerKind::kDropout: return std::make_unique<Dropout>(static_cast<float>(spec.args[0]));
    case LayerKind::kCross:
    case LayerKind::kDot: return make_ctr_layer(spec, in, where, out);
    default: break;
  }
  throw UsageError(where + "is not a layer");
}

}  // namespace

std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const Shape& in, int index, const std::string& name) {
  const std::string called = name.empty() ? "layer " + std::to_string(index + 1) : name;
  const std::string where = "--model: " + called + " '" + spec.text + "' ";
  std::unique_ptr<Layer> layer;
  Shape out = in;
  if (spec.kind == LayerKind::kResidual || spec.kind == LayerKind::kBottom || spec.kind == LayerKind::kParallel) {
    layer = spec.kind == LayerKind::kResidual ? make_residual(spec, in, index, called)
            : spec.kind == LayerKind::kBottom ? make_bottom(spec, in, index, called)
                                              : make_parallel(spec, in, index, called);
    out = layer->out();
  } else {
    layer = make_plain(spec, in, where, &out);
  }
  if (out.size() > (size_t{1} << 31) / 4) throw UsageError(where + "gives " + out.text() + " values per sample: too many");
  layer->in_ = in;
  layer->out_ = out;
  layer->text_ = spec.text;
  layer->kind_ = spec.kind;
  layer->index_ = index;
  return layer;
}

}  // namespace pstrain

