// The CTR models' layers (docs/models.md, docs/sparse.md): DLRM's dot interaction (`dot F D`)
// and DCN-v2's cross network (`cross N`), both on a flat input of dense features then embedding
// rows, with their checks of that input. Apart from layers.cc's vision and plain layers because
// they read the CTR record's layout (fields x embedding dim) that no other layer knows.
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shared/util/error.h"
#include "worker/model/layers_internal.h"

namespace pstrain {
namespace {

// FM / DLRM's second-order interaction: the input, then the pairwise dot products of the F
// vectors of D floats that end it (the embedding rows of a CTR record).
class Dot final : public Layer {
 public:
  Dot(int fields, int dim) : fields_(fields), dim_(dim) {}
  void forward(LayerContext& ctx, const float*, const float* x, float* y, int batch) override {
    ctx.backend.dot_interaction(x, batch, static_cast<int>(in_.size()), fields_, dim_, y);
  }
  void backward(LayerContext& ctx, const float*, const float* x, const float*, const float* dy, float* dx,
                float*, int batch, bool) override {
    if (dx != nullptr)
      ctx.backend.dot_interaction_backward(x, dy, batch, static_cast<int>(in_.size()), fields_, dim_, dx);
  }

 private:
  int fields_, dim_;
};

// DCN-v2's cross network (Wang et al. 2021), `cross N`: N cross layers stacked on a flat input
// x0 of d values, x_{l+1} = x0 * (x_l W_l + b_l) + x_l (element-wise *), each W_l [d, d] and b_l
// [d] the variables of one p (layer<p + l>). One layer rather than N `cross` items so that x0,
// which every step reads, is plainly the block's input. Its scratch, per sample, keeps x_1 ...
// x_{N-1} and each u_l = x_l W_l + b_l for backward, which then needs no GEMM of forward again.
class Cross final : public Layer {
 public:
  explicit Cross(int layers) : layers_(layers) {}
  bool has_params() const override { return true; }
  int param_layers() const override { return layers_; }
  bool output_free_after_forward() const override { return true; }  // backward reads x and the scratch
  void declare(Layout& layout, int p) override {
    const size_t d = in_.size();
    offsets_.clear();
    for (int l = 0; l < layers_; ++l) {
      const size_t w = layout.add("layer" + std::to_string(p + l) + ".weight", {d, d}).offset;
      offsets_.push_back({w, layout.add("layer" + std::to_string(p + l) + ".bias", {d}).offset});
    }
    weight_ = offsets_.front().first;
    bias_ = offsets_.front().second;
  }
  size_t scratch_floats() const override { return (2 * static_cast<size_t>(layers_) - 1) * in_.size(); }
  // Backward's running gradient g, the product buffer t and the sum of g * u_l (x0's own part).
  size_t col_floats(int batch, const Backend&) const override { return 3 * static_cast<size_t>(batch) * in_.size(); }

  void forward(LayerContext& ctx, const float* params, const float* x, float* y, int batch) override {
    const int d = static_cast<int>(in_.size());
    const size_t n = static_cast<size_t>(batch) * in_.size();
    for (int l = 0; l < layers_; ++l) {
      const float* xl = state(ctx, x, y, l, batch);
      float* u = ctx.scratch + (static_cast<size_t>(layers_) - 1 + l) * n;
      float* out = const_cast<float*>(state(ctx, x, y, l + 1, batch));
      ctx.backend.gemm(false, false, batch, d, d, 1.0f, xl, params + offsets_[l].first, 0.0f, u);
      ctx.backend.add_bias(u, params + offsets_[l].second, batch, d, 1);
      ctx.backend.multiply(x, u, out, n);
      ctx.backend.add(out, xl, out, n);
    }
  }
  // With g the gradient of x_{l+1}: t = g * x0 is u_l's, so W_l's is x_l^T t and b_l's the sum of
  // t; x_l's is g + t W_l^T, and x0 receives g * u_l besides, at every l.
  void backward(LayerContext& ctx, const float* params, const float* x, const float* y, const float* dy, float* dx,
                float* grad, int batch, bool accumulate) override {
    const int d = static_cast<int>(in_.size());
    const size_t n = static_cast<size_t>(batch) * in_.size();
    float* g = ctx.col;
    float* t = ctx.col + n;
    float* direct = ctx.col + 2 * n;
    ctx.backend.copy_columns(dy, batch, d, 0, d, g, d, 0);
    for (int l = layers_ - 1; l >= 0; --l) {
      const float* xl = state(ctx, x, y, l, batch);
      const float* u = ctx.scratch + (static_cast<size_t>(layers_) - 1 + l) * n;
      if (dx != nullptr) {
        if (l == layers_ - 1) {
          ctx.backend.multiply(g, u, direct, n);
        } else {
          ctx.backend.multiply(g, u, t, n);
          ctx.backend.add(direct, t, direct, n);
        }
      }
      ctx.backend.multiply(g, x, t, n);
      ctx.backend.gemm(true, false, d, d, batch, 1.0f, xl, t, accumulate ? 1.0f : 0.0f, grad + offsets_[l].first);
      ctx.backend.bias_grad(t, batch, d, 1, grad + offsets_[l].second, accumulate);
      if (l > 0 || dx != nullptr) ctx.backend.gemm(false, true, batch, d, d, 1.0f, t, params + offsets_[l].first, 1.0f, g);
    }
    if (dx != nullptr) ctx.backend.add(g, direct, dx, n);
  }

 private:
  // x_l: the input for l = 0, the output for l = N, else kept in the scratch.
  const float* state(const LayerContext& ctx, const float* x, const float* y, int l, int batch) const {
    if (l == 0) return x;
    if (l == layers_) return y;
    return ctx.scratch + static_cast<size_t>(l - 1) * static_cast<size_t>(batch) * in_.size();
  }
  int layers_;
  std::vector<std::pair<size_t, size_t>> offsets_;  // each cross layer's weight and bias
};

void require_flat(const Shape& in, const std::string& where) {
  if (!in.flat) {
    throw UsageError(where + "needs a flat input (the dense features, then the embedding rows), but " +
                     "gets an image of " + in.text() + " (put a flatten before it)");
  }
}

}  // namespace

std::unique_ptr<Layer> make_ctr_layer(const LayerSpec& spec, const Shape& in, const std::string& where, Shape* out) {
  if (spec.kind == LayerKind::kCross) {
    require_flat(in, where);
    if (in.size() > 16384) {
      throw UsageError(where + "would hold " + std::to_string(static_cast<int>(spec.args[0])) + " weights of " +
                       in.text() + " x " + in.text() + ": its input is too wide (at most 16384 values)");
    }
    *out = in;
    return std::make_unique<Cross>(static_cast<int>(spec.args[0]));
  }
  const auto fields = static_cast<size_t>(spec.args[0]), dim = static_cast<size_t>(spec.args[1]);
  require_flat(in, where);
  if (fields * dim > in.size()) {
    throw UsageError(where + "takes " + std::to_string(fields) + " vectors of " + std::to_string(dim) +
                     " (" + std::to_string(fields * dim) +
                     " values) from the end of its input, but its input is only " + in.text() +
                     " values (with --embedding-dim D, a CTR record is 13 + 26 x D)");
  }
  const size_t pairs = fields * (fields - 1) / 2;
  if (in.size() + pairs > (size_t{1} << 31) / 4) {
    throw UsageError(where + "gives " + std::to_string(in.size() + pairs) + " values per sample: too many");
  }
  *out = Shape::vector(in.size() + pairs);
  return std::make_unique<Dot>(static_cast<int>(fields), static_cast<int>(dim));
}

}  // namespace pstrain
