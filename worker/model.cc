#include "worker/model.h"

#include <algorithm>
#include <cmath>

#include "shared/error.h"
#include "shared/random.h"

namespace pstrain {
namespace {

// The next value of a SplitMix64 stream.
uint64_t next_random(uint64_t& state) {
  const uint64_t value = splitmix64(state);
  state += kGolden;
  return value;
}

}  // namespace

Mlp::Mlp(int input_dim, const std::vector<int>& hidden, int classes, int max_batch, Backend& backend)
    : backend_(backend), max_batch_(max_batch) {
  if (input_dim < 1 || classes < 2 || max_batch < 1) throw Error("model: invalid dimensions");
  widths_.push_back(input_dim);
  widths_.insert(widths_.end(), hidden.begin(), hidden.end());
  widths_.push_back(classes);
  const size_t max_width = static_cast<size_t>(*std::max_element(widths_.begin(), widths_.end()));
  layout_ = layout_for(input_dim, hidden, classes);
  for (size_t l = 0; l + 1 < widths_.size(); ++l) {
    acts_.push_back(backend_.allocate(static_cast<size_t>(max_batch) * static_cast<size_t>(widths_[l + 1])));
  }
  delta_a_ = backend_.allocate(static_cast<size_t>(max_batch) * max_width);
  delta_b_ = backend_.allocate(static_cast<size_t>(max_batch) * max_width);
}

Layout Mlp::layout_for(int input_dim, const std::vector<int>& hidden, int classes) {
  Layout layout;
  int in = input_dim;
  for (size_t l = 0; l <= hidden.size(); ++l) {
    const int out = l < hidden.size() ? hidden[l] : classes;
    layout.add("layer" + std::to_string(l) + ".weight", {static_cast<size_t>(in), static_cast<size_t>(out)});
    layout.add("layer" + std::to_string(l) + ".bias", {static_cast<size_t>(out)});
    in = out;
  }
  return layout;
}

size_t Mlp::activation_floats() const {
  return activation_floats(widths_.front(), std::vector<int>(widths_.begin() + 1, widths_.end() - 1), widths_.back(),
                           max_batch_);
}

size_t Mlp::activation_floats(int input_dim, const std::vector<int>& hidden, int classes, int max_batch) {
  size_t n = 0;
  int max_width = std::max(input_dim, classes);
  for (int w : hidden) {
    n += static_cast<size_t>(max_batch) * static_cast<size_t>(w);
    max_width = std::max(max_width, w);
  }
  n += static_cast<size_t>(max_batch) * static_cast<size_t>(classes);
  return n + 2 * static_cast<size_t>(max_batch) * static_cast<size_t>(max_width);  // the two deltas
}

void Mlp::init(uint64_t seed, float* host_params) const {
  std::fill(host_params, host_params + layout_.total(), 0.0f);
  uint64_t state = seed ^ 0x5eed5eed5eed5eedULL;
  for (const TensorSpec& t : layout_.tensors()) {
    if (t.shape.size() != 2) continue;  // biases stay zero
    const double limit = std::sqrt(6.0 / static_cast<double>(t.shape[0]));
    for (size_t i = 0; i < t.size; ++i) {
      const double u = static_cast<double>(next_random(state) >> 40) / static_cast<double>(1ULL << 24);
      host_params[t.offset + i] = static_cast<float>((2.0 * u - 1.0) * limit);
    }
  }
}

const float* Mlp::forward(const float* params, const float* x, int batch) {
  PSTRAIN_CHECK(batch >= 1 && batch <= max_batch_);
  const float* input = x;
  const size_t layers = widths_.size() - 1;
  for (size_t l = 0; l < layers; ++l) {
    const TensorSpec& w = layout_.tensors()[2 * l];
    const TensorSpec& b = layout_.tensors()[2 * l + 1];
    float* out = acts_[l].get();
    backend_.gemm(false, false, batch, widths_[l + 1], widths_[l], 1.0f, input, params + w.offset, 0.0f, out);
    backend_.bias_activation(out, params + b.offset, batch, widths_[l + 1], l + 1 < layers);
    input = out;
  }
  return input;
}

BatchStats Mlp::train_step(const float* params, const float* x, const int32_t* y, int batch, float* grad,
                           const GradReady& on_ready, bool accumulate) {
  const float* logits = forward(params, x, batch);
  const size_t layers = widths_.size() - 1;
  float* delta = delta_a_.get();  // d(loss)/d(pre-activation) of layer l
  float* spare = delta_b_.get();
  const BatchStats stats = backend_.softmax_xent(logits, y, batch, widths_.back(), delta);
  for (size_t l = layers; l-- > 0;) {
    const TensorSpec& w = layout_.tensors()[2 * l];
    const TensorSpec& b = layout_.tensors()[2 * l + 1];
    const float* input = l == 0 ? x : acts_[l - 1].get();
    const int in = widths_[l], out = widths_[l + 1];
    backend_.gemm(true, false, in, out, batch, 1.0f, input, delta, accumulate ? 1.0f : 0.0f, grad + w.offset);
    backend_.column_sums(delta, batch, out, grad + b.offset, accumulate);
    if (on_ready) on_ready(w.offset, stats);
    if (l == 0) break;
    backend_.gemm(false, true, batch, in, out, 1.0f, delta, params + w.offset, 0.0f, spare);
    backend_.relu_backward(spare, acts_[l - 1].get(), static_cast<size_t>(batch) * in);
    std::swap(delta, spare);
  }
  return stats;
}

BatchStats Mlp::evaluate(const float* params, const float* x, const int32_t* y, int batch) {
  const float* logits = forward(params, x, batch);
  return backend_.softmax_xent(logits, y, batch, widths_.back(), nullptr);
}

}  // namespace pstrain
