#include "worker/layers.h"

#include <algorithm>
#include <stdexcept>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "shared/util/error.h"

namespace pstrain {
namespace {

// --- Parsing -------------------------------------------------------------------------------

struct Token {
  std::string text;
  size_t position;
};

[[noreturn]] void fail_at(const std::string& spec, size_t position, size_t length, const std::string& message) {
  std::string marker(position, ' ');
  marker += std::string(std::max<size_t>(length, 1), '^');
  throw UsageError("--model: " + message + "\n  " + spec + "\n  " + marker);
}

std::vector<Token> split_tokens(const std::string& spec, size_t from, size_t to, char separator) {
  std::vector<Token> tokens;
  size_t i = from;
  while (i < to) {
    while (i < to && (std::isspace(static_cast<unsigned char>(spec[i])) || spec[i] == separator)) ++i;
    const size_t start = i;
    while (i < to && !std::isspace(static_cast<unsigned char>(spec[i])) && spec[i] != separator) ++i;
    if (i > start) tokens.push_back({spec.substr(start, i - start), start});
  }
  return tokens;
}

// A whole number in [lo, hi], else an error pointing at the token.
int integer(const std::string& spec, const Token& t, int lo, int hi, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(t.text.c_str(), &end, 10);
  if (t.text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) {
    fail_at(spec, t.position, t.text.size(),
            "'" + t.text + "' is not " + what + " (a whole number in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "])");
  }
  return static_cast<int>(v);
}

constexpr int kMaxWidth = 1 << 24;

struct KindRule {
  const char* name;
  int positional;             // numbers after the name
  const char* arg_names[2];   // what they are, for errors
  std::vector<std::string> options;
};

const std::vector<KindRule>& kinds() {
  static const std::vector<KindRule> rules = {
      {"dense", 1, {"the number of outputs", nullptr}, {}},
      {"conv", 2, {"the number of output channels", "the kernel size"}, {"stride", "pad"}},
      {"maxpool", 1, {"the window size", nullptr}, {"stride"}},
      {"avgpool", 1, {"the window size", nullptr}, {"stride"}},
      {"flatten", 0, {nullptr, nullptr}, {}},
      {"globalavgpool", 0, {nullptr, nullptr}, {}},
      {"layernorm", 0, {nullptr, nullptr}, {}},
      {"batchnorm", 0, {nullptr, nullptr}, {"momentum"}},
      {"relu", 0, {nullptr, nullptr}, {}},
      {"tanh", 0, {nullptr, nullptr}, {}},
      {"sigmoid", 0, {nullptr, nullptr}, {}},
      {"gelu", 0, {nullptr, nullptr}, {}},
      {"dropout", 1, {"the rate", nullptr}, {}},
      {"dot", 2, {"the number of fields", "the floats per field"}, {}},
      {"softmax", 0, {nullptr, nullptr}, {}},
  };
  return rules;
}

std::string kind_of(const std::string& word) {
  std::string k;
  for (char c : word) k += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (k == "conv2d") return "conv";
  if (k == "linear") return "dense";
  if (k == "maxpool2d") return "maxpool";
  if (k == "avgpool2d") return "avgpool";
  if (k == "gap" || k == "adaptiveavgpool2d") return "globalavgpool";
  if (k == "layer_norm") return "layernorm";
  if (k == "bn" || k == "batch_norm" || k == "batchnorm1d" || k == "batchnorm2d") return "batchnorm";
  return k;
}

LayerSpec parse_layer(const std::string& spec, size_t from, size_t to, int number) {
  const std::vector<Token> tokens = split_tokens(spec, from, to, '\0');
  LayerSpec layer;
  if (tokens.empty()) fail_at(spec, from, 1, "layer " + std::to_string(number) + " is empty");
  layer.position = tokens.front().position;
  layer.text = spec.substr(layer.position, tokens.back().position + tokens.back().text.size() - layer.position);
  layer.kind = kind_of(tokens[0].text);
  const KindRule* rule = nullptr;
  for (const KindRule& r : kinds()) {
    if (layer.kind == r.name) rule = &r;
  }
  if (rule == nullptr) {
    std::string known;
    for (const KindRule& r : kinds()) {
      known += (known.empty() ? "" : ", ") + std::string(r.name == std::string("softmax") ? "bottom K(...), " : "") +
               r.name;
    }
    fail_at(spec, tokens[0].position, tokens[0].text.size(),
            "'" + tokens[0].text + "' is not a layer (" + known + ", residual(...))");
  }
  int positional = 0;
  for (size_t i = 1; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    const size_t eq = t.text.find('=');
    if (eq != std::string::npos) {
      const std::string key = t.text.substr(0, eq);
      bool known = false;
      for (const std::string& o : rule->options) known = known || o == key;
      if (!known) {
        fail_at(spec, t.position, eq, "'" + key + "' is not an option of " + layer.kind +
                                          (rule->options.empty() ? " (it takes none)" : ""));
      }
      const Token value{t.text.substr(eq + 1), t.position + eq + 1};
      if (key == "momentum") {  // a fraction, kept as the layer's one number
        char* end = nullptr;
        const double momentum = std::strtod(value.text.c_str(), &end);
        if (value.text.empty() || *end != '\0' || !(momentum >= 0 && momentum <= 1)) {
          fail_at(spec, value.position, value.text.size(),
                  "'" + value.text + "' is not a momentum in [0, 1] (PyTorch's default: 0.1)");
        }
        if (!layer.args.empty()) fail_at(spec, t.position, t.text.size(), "momentum is given twice");
        layer.args.push_back(momentum);
        continue;
      }
      layer.options.emplace_back(key, integer(spec, value, key == "pad" ? 0 : 1, 4096,
                                              key == "pad" ? "a padding" : "a stride"));
      continue;
    }
    if (positional == rule->positional) {
      fail_at(spec, t.position, t.text.size(),
              "'" + t.text + "': " + layer.kind + " takes " + std::to_string(rule->positional) + " number(s)");
    }
    if (layer.kind == "dropout") {
      char* end = nullptr;
      const double rate = std::strtod(t.text.c_str(), &end);
      if (*end != '\0' || !(rate >= 0 && rate < 1)) {
        fail_at(spec, t.position, t.text.size(), "'" + t.text + "' is not a dropout rate in [0, 1)");
      }
      layer.args.push_back(rate);
    } else {
      const int lo = layer.kind == "dot" && positional == 0 ? 2 : 1;  // pairs need two fields
      layer.args.push_back(integer(spec, t, lo, kMaxWidth, rule->arg_names[positional]));
    }
    ++positional;
  }
  if (positional < rule->positional) {
    fail_at(spec, layer.position, layer.text.size(),
            layer.kind + " needs " + rule->arg_names[positional] + " (e.g. " +
                (layer.kind == "dense"     ? "dense 10"
                 : layer.kind == "conv"    ? "conv 32 3 pad=1"
                 : layer.kind == "dropout" ? "dropout 0.25"
                 : layer.kind == "dot"     ? "dot 26 16"
                                           : layer.kind + " 2") +
                ")");
  }
  return layer;
}

// The end of the item that starts at `from`: the next comma outside parentheses, else `to`.
size_t item_end(const std::string& spec, size_t from, size_t to) {
  int depth = 0;
  size_t open = 0;
  for (size_t i = from; i < to; ++i) {
    if (spec[i] == '(') {
      if (depth++ == 0) open = i;
    } else if (spec[i] == ')') {
      if (depth-- == 0) fail_at(spec, i, 1, "')' closes no '('");
    } else if (spec[i] == ',' && depth == 0) {
      return i;
    }
  }
  if (depth > 0) fail_at(spec, open, 1, "'(' is not closed");
  return to;
}

std::vector<LayerSpec> parse_list(const std::string& spec, size_t from, size_t to, const std::string& block);

// "residual(<list>)" or "bottom K(<list>)" (`kind`) from the word [word, word_end) (in any case)
// to `to`.
LayerSpec parse_block(const std::string& spec, size_t word, size_t word_end, size_t to, const std::string& name,
                      bool nested, const std::string& kind) {
  const size_t length = word_end - word;
  if (nested) fail_at(spec, word, length, kind + " blocks do not nest (a block's layers are plain layers)");
  const std::string example =
      kind == "residual" ? "residual(conv 32 3 pad=1, relu, conv 32 3 pad=1)" : "bottom 13(dense 64, relu, dense 8)";
  LayerSpec layer;
  size_t open = std::min(spec.find_first_not_of(" \t", word_end), to);
  if (kind == "bottom") {
    Token count{"", open};
    while (open < to && spec[open] != '(' && !std::isspace(static_cast<unsigned char>(spec[open]))) ++open;
    count.text = spec.substr(count.position, open - count.position);
    if (count.text.empty()) {
      fail_at(spec, word, length, "bottom needs the number of values its layers take (e.g. " + example + ")");
    }
    layer.args.push_back(integer(spec, count, 1, kMaxWidth, "the number of values its layers take"));
    open = spec.find_first_not_of(" \t", open);
  }
  if (open >= to || spec[open] != '(') fail_at(spec, word, length, kind + " takes its layers in parentheses: " + example);
  size_t close = open;
  for (int depth = 0; close < to; ++close) {  // item_end checked that the parentheses balance
    depth += spec[close] == '(' ? 1 : spec[close] == ')' ? -1 : 0;
    if (depth == 0) break;
  }
  const size_t after = spec.find_first_not_of(" \t", close + 1);
  if (after < to) {
    const size_t extent = spec.find_last_not_of(" \t", to - 1) + 1 - after;
    fail_at(spec, after, extent,
            "'" + spec.substr(after, extent) + "' follows a " + kind + " block's ')' (a comma is missing?)");
  }
  if (spec.find_first_not_of(" \t", open + 1) >= close) {
    fail_at(spec, open, close + 1 - open, "the " + kind + " block of " + name + " has no layers");
  }
  layer.kind = kind;
  layer.position = word;
  layer.text = spec.substr(word, close + 1 - word);
  layer.list = spec;
  layer.layers = parse_list(spec, open + 1, close, name);
  for (const LayerSpec& l : layer.layers) {
    if (l.kind == "softmax") {
      fail_at(spec, l.position, l.text.size(), "softmax (the loss) cannot be in a " + kind + " block");
    }
  }
  return layer;
}

// The layers of [from, to), separated by commas outside parentheses (a trailing comma allowed).
// `block`: the name of the block they are in ("layer 3"), empty at the top.
std::vector<LayerSpec> parse_list(const std::string& spec, size_t from, size_t to, const std::string& block) {
  std::vector<LayerSpec> layers;
  int number = 1;
  while (from <= to) {
    const size_t end = item_end(spec, from, to);
    if (spec.find_first_not_of(" \t", from) >= end && end == to && !layers.empty()) break;  // trailing comma
    const std::string name = block.empty() ? "layer " + std::to_string(number) : block + "." + std::to_string(number);
    size_t word = spec.find_first_not_of(" \t", from), word_end = word;
    while (word_end < end && (std::isalnum(static_cast<unsigned char>(spec[word_end])) || spec[word_end] == '_')) {
      ++word_end;
    }
    if (word >= end) fail_at(spec, std::min(from, spec.size() - 1), 1, name + " is empty");
    const std::string kind = kind_of(spec.substr(word, word_end - word));
    if (kind == "residual" || kind == "bottom") {
      layers.push_back(parse_block(spec, word, word_end, end, name, !block.empty(), kind));
    } else {
      layers.push_back(parse_layer(spec, from, end, number));
    }
    ++number;
    from = end + 1;
  }
  return layers;
}

// --- Layers ------------------------------------------------------------------------------

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
  size_t col_floats(int batch) const override { return static_cast<size_t>(chunk(batch)) * col_stride(); }
  void declare(Layout& layout, int p) override {
    const auto k = static_cast<size_t>(g_.kernel);
    weight_ = layout.add("layer" + std::to_string(p) + ".weight",
                         {static_cast<size_t>(outputs_), static_cast<size_t>(g_.channels), k, k})
                  .offset;
    bias_ = layout.add("layer" + std::to_string(p) + ".bias", {static_cast<size_t>(outputs_)}).offset;
  }
  // Per chunk of samples: unfold, then one GEMM per sample (batched): y_b = W col_b.
  void forward(LayerContext& ctx, const float* params, const float* x, float* y, int batch) override {
    const int patch = static_cast<int>(g_.patch()), positions = static_cast<int>(g_.positions());
    for (int first = 0; first < batch; first += chunk(batch)) {
      const int n = std::min(chunk(batch), batch - first);
      ctx.backend.im2col(x + static_cast<size_t>(first) * in_.size(), n, g_, ctx.col);
      ctx.backend.gemm_batched(false, false, outputs_, positions, patch, 1.0f, params + weight_, 0, ctx.col,
                               col_stride(), 0.0f, y + static_cast<size_t>(first) * out_.size(), out_.size(), n);
    }
    ctx.backend.add_bias(y, params + bias_, batch, outputs_, positions);
  }
  // dW = sum over samples (in order) of dy_b col_b^T; dcol_b = W^T dy_b, folded back into dx.
  void backward(LayerContext& ctx, const float* params, const float* x, const float*, const float* dy, float* dx,
                float* grad, int batch, bool accumulate) override {
    const int patch = static_cast<int>(g_.patch()), positions = static_cast<int>(g_.positions());
    for (int first = 0; first < batch; first += chunk(batch)) {
      const int n = std::min(chunk(batch), batch - first);
      const float* dy_chunk = dy + static_cast<size_t>(first) * out_.size();
      ctx.backend.im2col(x + static_cast<size_t>(first) * in_.size(), n, g_, ctx.col);
      ctx.backend.gemm_sum(false, true, outputs_, patch, positions, 1.0f, dy_chunk, out_.size(), ctx.col, col_stride(),
                           (first == 0 && !accumulate) ? 0.0f : 1.0f, grad + weight_, n);
      if (dx == nullptr) continue;
      ctx.backend.gemm_batched(true, false, patch, positions, outputs_, 1.0f, params + weight_, 0, dy_chunk,
                               out_.size(), 0.0f, ctx.col, col_stride(), n);
      ctx.backend.col2im(ctx.col, n, g_, dx + static_cast<size_t>(first) * in_.size());
    }
    ctx.backend.bias_grad(dy, batch, outputs_, positions, grad + bias_, accumulate);
  }

 private:
  size_t col_stride() const { return g_.patch() * g_.positions(); }
  int chunk(int batch) const {
    return static_cast<int>(std::clamp<size_t>(kColumnChunkFloats / col_stride(), 1, static_cast<size_t>(batch)));
  }
  ConvGeometry g_;
  int outputs_;
};

class Pool final : public Layer {
 public:
  Pool(PoolKind kind, const PoolGeometry& g) : kind_(kind), g_(g) {}
  void forward(LayerContext& ctx, const float*, const float* x, float* y, int batch) override {
    ctx.backend.pool(kind_, x, batch * in_.c, g_, y);
  }
  void backward(LayerContext& ctx, const float*, const float* x, const float* y, const float* dy, float* dx, float*,
                int batch, bool) override {
    if (dx != nullptr) ctx.backend.pool_backward(kind_, x, y, dy, batch * in_.c, g_, dx);
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
  size_t col_floats(int) const override { return plane(); }
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
  size_t col_floats(int batch) const override { return 2 * static_cast<size_t>(batch) * in_.size(); }
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
  size_t col_floats(int) const override { return 6 * channels(); }
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
  size_t col_floats(int batch) const {
    size_t col = 0;
    for (const auto& l : layers_) col = std::max(col, l->col_floats(batch));
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
  size_t col_floats(int batch) const override {
    return std::max(projection_ ? projection_->col_floats(batch) : 0, chain_.col_floats(batch));
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
  size_t col_floats(int batch) const override { return chain_.col_floats(batch); }
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

// A block's layers on input `in` (named "<name>.<j>" in errors). Dropout inside draws masks of its
// own: its index is apart from every top-level layer's.
std::vector<std::unique_ptr<Layer>> make_block_layers(const LayerSpec& spec, const Shape& in, int index,
                                                      const std::string& name) {
  std::vector<std::unique_ptr<Layer>> layers;
  Shape shape = in;
  for (size_t j = 0; j < spec.layers.size(); ++j) {
    const int inner_index = (index + 1) * 65536 + static_cast<int>(j);
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
  fail_at(spec.list, spec.position, spec.text.size(), text);
}

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
      p.kind = "dense";
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
      p.kind = "conv";
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

}  // namespace

std::string Shape::text() const {
  return flat ? std::to_string(size()) : std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

std::vector<LayerSpec> parse_model(const std::string& spec) {
  if (spec.find_first_not_of(" \t,") == std::string::npos) throw UsageError("--model: the layer list is empty");
  std::vector<LayerSpec> layers = parse_list(spec, 0, spec.size(), "");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].kind == "softmax" && i + 1 != layers.size()) {
      fail_at(spec, layers[i].position, layers[i].text.size(), "softmax (the loss) can only be the last layer");
    }
  }
  if (layers.back().kind == "softmax") layers.pop_back();
  if (layers.empty()) throw UsageError("--model: no layer before the softmax");
  return layers;
}

std::string mlp_model(const std::vector<int>& hidden, int classes) {
  std::string spec;
  for (int h : hidden) spec += "dense " + std::to_string(h) + ", relu, ";
  return spec + "dense " + std::to_string(classes);
}

std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const Shape& in, int index, const std::string& name) {
  const std::string called = name.empty() ? "layer " + std::to_string(index + 1) : name;
  const std::string where = "--model: " + called + " '" + spec.text + "' ";
  std::unique_ptr<Layer> layer;
  Shape out = in;
  if (spec.kind == "residual" || spec.kind == "bottom") {
    layer = spec.kind == "residual" ? make_residual(spec, in, index, called) : make_bottom(spec, in, index, called);
    out = layer->out();
  } else if (spec.kind == "dense") {
    const int outputs = static_cast<int>(spec.args[0]);
    layer = std::make_unique<Dense>(outputs);
    out = Shape::vector(static_cast<size_t>(outputs));
  } else if (spec.kind == "conv" || spec.kind == "maxpool" || spec.kind == "avgpool") {
    if (in.flat) {
      throw UsageError(where + "needs an image input (channels x height x width), but gets a flat vector of " +
                       in.text() + " values (a dense or flatten layer, or flat data, comes before it)");
    }
    const int kernel = static_cast<int>(spec.args[spec.kind == "conv" ? 1 : 0]);
    const int stride = option(spec, "stride", spec.kind == "conv" ? 1 : kernel);
    const int pad = option(spec, "pad", 0);
    if (in.h + 2 * pad < kernel || in.w + 2 * pad < kernel) {
      throw UsageError(where + "has a window of " + std::to_string(kernel) + " but its input is only " + in.text() +
                       (pad > 0 ? " (padded by " + std::to_string(pad) + ")" : ""));
    }
    const int oh = (in.h + 2 * pad - kernel) / stride + 1, ow = (in.w + 2 * pad - kernel) / stride + 1;
    if (spec.kind == "conv") {
      if (pad >= kernel) throw UsageError(where + "has a padding of at least its kernel size");
      const ConvGeometry g{in.c, in.h, in.w, kernel, stride, pad, oh, ow};
      const int outputs = static_cast<int>(spec.args[0]);
      layer = std::make_unique<Conv>(g, outputs);
      out = Shape::image(outputs, oh, ow);
    } else {
      const PoolGeometry g{in.h, in.w, kernel, stride, oh, ow};
      layer = std::make_unique<Pool>(spec.kind == "maxpool" ? PoolKind::kMax : PoolKind::kAverage, g);
      out = Shape::image(in.c, oh, ow);
    }
  } else if (spec.kind == "layernorm") {
    layer = std::make_unique<LayerNorm>(1e-5f);  // PyTorch's default eps
  } else if (spec.kind == "batchnorm") {
    layer = std::make_unique<BatchNorm>(spec.args.empty() ? 0.1 : spec.args[0], 1e-5);  // PyTorch's defaults
  } else if (spec.kind == "globalavgpool") {
    if (in.flat) throw UsageError(where + "needs an image input (channels x height x width), not " + in.text());
    layer = std::make_unique<GlobalAvgPool>();
    out = Shape::vector(static_cast<size_t>(in.c));
  } else if (spec.kind == "flatten") {
    layer = std::make_unique<Flatten>();
    out = Shape::vector(in.size());
  } else if (spec.kind == "relu" || spec.kind == "tanh" || spec.kind == "sigmoid" || spec.kind == "gelu") {
    layer = std::make_unique<Act>(spec.kind == "relu"      ? Activation::kRelu
                                  : spec.kind == "tanh"    ? Activation::kTanh
                                  : spec.kind == "sigmoid" ? Activation::kSigmoid
                                                           : Activation::kGelu);
  } else if (spec.kind == "dropout") {
    layer = std::make_unique<Dropout>(static_cast<float>(spec.args[0]));
  } else if (spec.kind == "dot") {
    const auto fields = static_cast<size_t>(spec.args[0]), dim = static_cast<size_t>(spec.args[1]);
    if (!in.flat) {
      throw UsageError(where + "needs a flat input (the dense features, then the embedding rows), but " +
                       "gets an image of " + in.text() + " (put a flatten before it)");
    }
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
    layer = std::make_unique<Dot>(static_cast<int>(fields), static_cast<int>(dim));
    out = Shape::vector(in.size() + pairs);
  } else {
    throw UsageError(where + "is not a layer");
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
