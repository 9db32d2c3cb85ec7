#include "worker/model/model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>

#include "shared/util/error.h"
#include "shared/util/splitmix.h"

namespace pstrain {
namespace {

// The next value of a SplitMix64 stream.
uint64_t next_random(uint64_t& state) {
  const uint64_t value = splitmix64(state);
  state += kGolden;
  return value;
}

Shape input_shape(const std::vector<size_t>& sample) {
  for (size_t d : sample) {
    if (d == 0 || d > (size_t{1} << 30)) throw UsageError("the data's sample shape has a dimension of " + std::to_string(d));
  }
  if (sample.size() == 3) return Shape::image(static_cast<int>(sample[0]), static_cast<int>(sample[1]), static_cast<int>(sample[2]));
  if (sample.size() == 2) return Shape::image(1, static_cast<int>(sample[0]), static_cast<int>(sample[1]));
  return Shape::vector(std::accumulate(sample.begin(), sample.end(), size_t{1}, std::multiplies<size_t>()));
}

// Whether the last layer of a list is "softmax" (which parse_model drops: it names the loss).
bool ends_in_softmax(const std::string& spec) {
  const size_t comma = spec.find_last_of(',');
  std::string last = spec.substr(comma == std::string::npos ? 0 : comma + 1);
  last.erase(0, last.find_first_not_of(" \t"));
  last.erase(last.find_last_not_of(" \t") + 1);
  std::transform(last.begin(), last.end(), last.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return last == "softmax";
}

}  // namespace

Network::Network(const std::string& spec, const std::vector<size_t>& sample_shape, int classes,
                 const std::string& targets)
    : input_(input_shape(sample_shape)), classes_(classes) {
  if (!targets.empty() && classes < 1) throw UsageError(targets + ": the targets have no values per record");
  if (targets.empty() && classes < 2) throw UsageError("the model needs at least 2 classes, the data has " + std::to_string(classes));
  if (!targets.empty() && ends_in_softmax(spec)) {
    throw UsageError("--model: the list ends in softmax, the loss of class labels, but the model is trained against "
                     "the float targets of " + targets + " (--loss bce, mse or huber): drop the softmax");
  }
  std::vector<LayerSpec> specs = parse_model(spec);
  // relu then maxpool computes as maxpool then relu: max commutes with max(., 0) exactly, and the
  // gradients agree (a window whose maximum is <= 0 passes none either way), so the parameters are
  // the same, for a quarter of relu's work and memory traffic (a 2x2 pooling).
  for (size_t i = 0; i + 1 < specs.size(); ++i) {
    if (specs[i].kind == LayerKind::kRelu && specs[i + 1].kind == LayerKind::kMaxPool) std::swap(specs[i], specs[i + 1]);
  }
  Shape shape = input_;
  int p = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    layers_.push_back(make_layer(specs[i], shape, static_cast<int>(i)));
    if (layers_.back()->has_params()) {
      if (layers_.back()->has_state()) layers_.back()->declare_state(state_layout_, p);
      layers_.back()->declare(layout_, p);
      p += layers_.back()->param_layers();
    }
    shape = layers_.back()->out();
  }
  if (!targets.empty() && shape.size() != static_cast<size_t>(classes)) {
    throw UsageError("--model: the last layer '" + layers_.back()->text() + "' gives " + shape.text() +
                     " outputs per sample, but the targets of " + targets + " are " + std::to_string(classes) +
                     " wide (end the list with dense " + std::to_string(classes) + ")");
  }
  if (shape.size() != static_cast<size_t>(classes)) {
    throw UsageError("--model: the last layer gives " + shape.text() + " outputs per sample, but the data has " +
                     std::to_string(classes) + " classes (end the list with dense " + std::to_string(classes) + ")");
  }
  if (p == 0) throw UsageError("--model: the layer list has no layer with parameters (dense or conv)");
}

std::string Network::summary() const {
  std::string s = input_.text();
  for (const auto& l : layers_) {
    s += " -> " + l->describe();
    if (!l->elementwise() && !(l->in().flat == l->out().flat && l->in().size() == l->out().size() &&
                               !l->has_params())) {
      s += " -> " + l->out().text();
    }
  }
  return s;
}

namespace {

// --recompute: the blocks' outputs persist, the other buffers share the arena.
void place_in_arena(Network::Plan& p) {
  const size_t n = p.buffer_of.size();
  for (size_t l = 0; l < n; ++l) {
    const bool block_end = l + 1 == n || p.block_of[l + 1] != p.block_of[l];
    if (block_end && p.buffer_of[l] >= 0) p.persistent[static_cast<size_t>(p.buffer_of[l])] = true;
  }
  // Each block's other buffers side by side from the arena's start: one block's at a time.
  std::vector<size_t> used(static_cast<size_t>(p.blocks), 0);
  std::vector<bool> placed(p.buffer_size.size(), false);
  for (size_t l = 0; l < n; ++l) {
    const int b = p.buffer_of[l];
    if (b < 0 || p.persistent[static_cast<size_t>(b)] || placed[static_cast<size_t>(b)]) continue;
    size_t& u = used[static_cast<size_t>(p.block_of[l])];
    p.arena_offset[static_cast<size_t>(b)] = u;
    u += p.buffer_size[static_cast<size_t>(b)];
    placed[static_cast<size_t>(b)] = true;
  }
  p.arena_size = used.empty() ? 0 : *std::max_element(used.begin(), used.end());
}

}  // namespace

Network::Plan Network::plan(bool recompute) const {
  Plan p;
  const size_t n = layers_.size();
  p.buffer_of.assign(n, -1);
  p.block_of.assign(n, 0);
  int block = -1;
  for (size_t l = 0; l < n; ++l) {
    const Layer& layer = *layers_[l];
    // Blocks (what --recompute keeps the inputs of): a new one at every dense layer, and after
    // every pooling or flatten layer (the resolution changes), so a block is a stage of
    // convolutions and their activations up to its pooling.
    const LayerKind before = l == 0 ? layer.kind() : layers_[l - 1]->kind();
    if (l == 0 || layer.kind() == LayerKind::kDense || before == LayerKind::kMaxPool || before == LayerKind::kAvgPool ||
        before == LayerKind::kFlatten || before == LayerKind::kGlobalAvgPool) {
      ++block;
    }
    p.block_of[l] = block;
    if (layer.identity()) {
      p.buffer_of[l] = l == 0 ? -1 : p.buffer_of[l - 1];
    } else if (l > 0 && layer.elementwise() &&
               (layers_[l - 1]->output_free_after_forward() ||
                (layer.kind() == LayerKind::kRelu && layers_[l - 1]->kind() == LayerKind::kMaxPool))) {
      // In place: the layer before needs only its input; or it is a max pooling, whose backward
      // still finds every window's maximum where relu kept it, and where relu zeroed it (a
      // maximum <= 0) relu's backward passes no gradient to find a place for.
      p.buffer_of[l] = p.buffer_of[l - 1];
    } else {
      p.buffer_of[l] = static_cast<int>(p.buffer_size.size());
      p.buffer_size.push_back(layer.out().size());
    }
  }
  p.blocks = block + 1;
  // Backward's gradients: the loss's in buffer 0, then each layer reads dy from one buffer and
  // writes dx to the other (element-wise layers in place; the first layer writes none).
  int current = 0;
  p.delta_size[0] = layers_.back()->out().size();
  for (size_t l = n; l-- > 1;) {
    const Layer& layer = *layers_[l];
    if (layer.identity() || layer.elementwise()) continue;
    current = 1 - current;
    p.delta_size[current] = std::max(p.delta_size[current], layer.in().size());
  }
  p.persistent.assign(p.buffer_size.size(), !recompute);
  p.arena_offset.assign(p.buffer_size.size(), 0);
  if (recompute) place_in_arena(p);
  return p;
}

size_t Network::activation_floats(int batch, bool recompute, const Backend& backend) const {
  const Plan p = plan(recompute);
  size_t per_sample = p.arena_size + p.delta_size[0] + p.delta_size[1];
  for (size_t b = 0; b < p.buffer_size.size(); ++b) {
    if (p.persistent[b]) per_sample += p.buffer_size[b];
  }
  size_t col = 0;
  for (const auto& l : layers_) {
    col = std::max(col, l->col_floats(batch, backend));
    per_sample += l->scratch_floats();  // a residual block's insides
  }
  return per_sample * static_cast<size_t>(batch) + col;
}

void Network::init(uint64_t seed, float* host_params) const {
  std::fill(host_params, host_params + layout_.total(), 0.0f);
  uint64_t state = seed ^ 0x5eed5eed5eed5eedULL;
  for (const TensorSpec& t : layout_.tensors()) {
    if (t.shape.size() < 2) {  // biases 0, a normalisation's scale 1
      std::fill(host_params + t.offset, host_params + t.offset + t.size, t.fill);
      continue;
    }
    const size_t fan_in = t.shape.size() == 2 ? t.shape[0] : t.size / t.shape[0];  // dense [in, out]; conv [out, ...]
    const double limit = std::sqrt(6.0 / static_cast<double>(fan_in));
    for (size_t i = 0; i < t.size; ++i) {
      const double u = static_cast<double>(next_random(state) >> 40) / static_cast<double>(1ULL << 24);
      host_params[t.offset + i] = static_cast<float>((2.0 * u - 1.0) * limit);
    }
  }
}

std::vector<float> Network::initial_state() const {
  std::vector<float> state(state_layout_.total());
  for (const TensorSpec& t : state_layout_.tensors()) std::fill(state.begin() + t.offset, state.begin() + t.offset + t.size, t.fill);
  return state;
}

Model::Model(Network network, int max_batch, bool recompute, Backend& backend)
    : net_(std::move(network)), backend_(backend), max_batch_(max_batch), recompute_(recompute) {
  if (max_batch < 1) throw Error("model: invalid batch size");
  plan_ = net_.plan(recompute);
  const auto rows = static_cast<size_t>(max_batch);
  arena_ = backend_.allocate(plan_.arena_size * rows);
  for (size_t b = 0; b < plan_.buffer_size.size(); ++b) {
    if (plan_.persistent[b]) {
      buffers_.push_back(backend_.allocate(plan_.buffer_size[b] * rows));
      buffer_ptr_.push_back(buffers_.back().get());
    } else {
      buffers_.emplace_back(nullptr, [](float*) {});
      buffer_ptr_.push_back(arena_.get() + plan_.arena_offset[b] * rows);
    }
  }
  delta_a_ = backend_.allocate(plan_.delta_size[0] * rows);
  delta_b_ = backend_.allocate(plan_.delta_size[1] * rows);
  size_t col = 0;
  for (const auto& l : net_.layers()) col = std::max(col, l->col_floats(max_batch, backend_));
  if (col > 0) col_ = backend_.allocate(col);
  for (const auto& l : net_.layers()) {
    scratch_.push_back(l->scratch_floats() > 0 ? backend_.allocate(l->scratch_floats() * rows)
                                               : BufferPtr(nullptr, [](float*) {}));
  }
  state_ = net_.initial_state();
  row_keys_.resize(rows);
  std::iota(row_keys_.begin(), row_keys_.end(), uint64_t{0});
}

Model::Model(int input_dim, const std::vector<int>& hidden, int classes, int max_batch, Backend& backend)
    : Model(mlp_model(hidden, classes), {static_cast<size_t>(input_dim)}, classes, max_batch, false, backend) {}

const float* Model::input_of(size_t l, const float* x) const { return l == 0 ? x : output_of(l - 1, x); }

float* Model::output_of(size_t l, const float* x) const {
  const int b = plan_.buffer_of[l];
  return b < 0 ? const_cast<float*>(x) : buffer_ptr_[static_cast<size_t>(b)];  // a leading flatten: x itself
}

void Model::set_state(const std::vector<float>& state) {
  if (state.size() != state_.size()) {
    throw Error("model: the state has " + std::to_string(state.size()) + " values, the model's " +
                std::to_string(state_.size()));
  }
  state_ = state;
}

LayerContext Model::context(bool training, const Keys& keys, int batch) {
  PSTRAIN_CHECK(batch >= 1 && batch <= max_batch_);
  LayerContext ctx{backend_};
  ctx.col = col_.get();
  ctx.training = training;
  ctx.salt = splitmix64(splitmix64(keys.seed ^ 0xd0d0d0d0d0d0d0d0ULL) + keys.step);
  ctx.keys = keys.records != nullptr ? keys.records : row_keys_.data();
  ctx.state = state_.data();
  ctx.stats = training ? stats_ : nullptr;
  return ctx;
}

void Model::forward_layers(LayerContext& ctx, const float* params, const float* x, int batch, size_t from, size_t to) {
  for (size_t l = from; l < to; ++l) {
    Layer& layer = *net_.layers()[l];
    ctx.scratch = scratch_[l].get();
    if (!layer.identity()) layer.forward(ctx, params, input_of(l, x), output_of(l, x), batch);
  }
}

BatchStats Model::train_step(const float* params, const float* x, const int32_t* y, int batch, float* grad,
                             const GradReady& on_ready, bool accumulate, const Keys& keys, float* input_grad) {
  LayerContext ctx = context(true, keys, batch);
  const size_t n = net_.layers().size();
  size_t first = 0;  // the first layer that computes: its dx is the gradient w.r.t. x
  while (first + 1 < n && net_.layers()[first]->identity()) ++first;
  forward_layers(ctx, params, x, batch, 0, n);
  float* delta = delta_a_.get();  // d(loss)/d(output of layer l)
  float* spare = delta_b_.get();
  const BatchStats stats =
      loss_ == Loss::kSoftmax
          ? backend_.softmax_xent(output_of(n - 1, x), y, batch, net_.classes(), delta, label_smoothing_)
          : backend_.target_loss(loss_, output_of(n - 1, x), targets_, batch, net_.classes(), huber_delta_, delta);
  for (size_t l = n; l-- > 0;) {
    const int block = plan_.block_of[l];
    const bool block_end = l + 1 == n || plan_.block_of[l + 1] != block;
    if (recompute_ && block_end && block + 1 != plan_.blocks) {
      // The arena holds a later block's insides now: recompute this block's from its input.
      size_t first = l;
      while (first > 0 && plan_.block_of[first - 1] == block) --first;
      ctx.update_state = false;  // the running statistics moved once, in the forward pass
      forward_layers(ctx, params, x, batch, first, l + 1);
      ctx.update_state = true;
    }
    Layer& layer = *net_.layers()[l];
    if (layer.identity()) continue;
    // Element-wise layers work in place (the plan's delta sizes assume it); layer 0 writes no dx
    // unless the caller asks for it.
    float* dx = l == 0 ? nullptr : layer.elementwise() ? delta : spare;
    if (input_grad != nullptr && l == first) dx = input_grad;
    ctx.scratch = scratch_[l].get();
    layer.backward(ctx, params, input_of(l, x), output_of(l, x), delta, dx, grad, batch, accumulate);
    if (layer.elementwise()) continue;
    if (layer.has_params() && on_ready) on_ready(layer.weight_offset(), stats);
    if (dx == spare) std::swap(delta, spare);
  }
  return stats;
}

BatchStats Model::train_step_targets(const float* params, const float* x, const float* t, int batch, float* grad,
                                     const GradReady& on_ready, bool accumulate, const Keys& keys, float* input_grad) {
  PSTRAIN_CHECK(loss_ != Loss::kSoftmax && t != nullptr);
  targets_ = t;
  const BatchStats stats = train_step(params, x, nullptr, batch, grad, on_ready, accumulate, keys, input_grad);
  targets_ = nullptr;
  return stats;
}

BatchStats Model::evaluate(const float* params, const float* x, const int32_t* y, int batch) {
  LayerContext ctx = context(false, Keys{}, batch);
  const size_t n = net_.layers().size();
  forward_layers(ctx, params, x, batch, 0, n);
  return backend_.softmax_xent(output_of(n - 1, x), y, batch, net_.classes(), nullptr, 0.0f);  // the plain loss
}

const float* Model::logits(const float* params, const float* x, int batch) {
  LayerContext ctx = context(false, Keys{}, batch);
  const size_t n = net_.layers().size();
  forward_layers(ctx, params, x, batch, 0, n);
  return output_of(n - 1, x);
}

}  // namespace pstrain
