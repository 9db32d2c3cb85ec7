// The model spec's grammar: a layer list parsed into LayerSpecs (parse_model), with errors that
// point at the offending token.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/text.h"
#include "worker/model/layers.h"
#include "worker/model/layers_internal.h"

namespace pstrain {

[[noreturn]] void fail_at_spec(const std::string& spec, size_t position, size_t length, const std::string& message) {
  std::string marker(position, ' ');
  marker += std::string(std::max<size_t>(length, 1), '^');
  throw UsageError("--model: " + message + "\n  " + spec + "\n  " + marker);
}

namespace {

struct Token {
  std::string text;
  size_t position;
};

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
    fail_at_spec(spec, t.position, t.text.size(),
            "'" + t.text + "' is not " + what + " (a whole number in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "])");
  }
  return static_cast<int>(v);
}

constexpr int kMaxWidth = 1 << 24;

struct KindRule {
  const char* name;
  LayerKind kind;
  int positional;             // numbers after the name
  const char* arg_names[2];   // what they are, for errors
  std::vector<std::string> options;
};

const std::vector<KindRule>& kinds() {
  static const std::vector<KindRule> rules = {
      {"dense", LayerKind::kDense, 1, {"the number of outputs", nullptr}, {}},
      {"conv", LayerKind::kConv, 2, {"the number of output channels", "the kernel size"}, {"stride", "pad"}},
      {"maxpool", LayerKind::kMaxPool, 1, {"the window size", nullptr}, {"stride"}},
      {"avgpool", LayerKind::kAvgPool, 1, {"the window size", nullptr}, {"stride"}},
      {"flatten", LayerKind::kFlatten, 0, {nullptr, nullptr}, {}},
      {"globalavgpool", LayerKind::kGlobalAvgPool, 0, {nullptr, nullptr}, {}},
      {"layernorm", LayerKind::kLayerNorm, 0, {nullptr, nullptr}, {}},
      {"batchnorm", LayerKind::kBatchNorm, 0, {nullptr, nullptr}, {"momentum"}},
      {"relu", LayerKind::kRelu, 0, {nullptr, nullptr}, {}},
      {"tanh", LayerKind::kTanh, 0, {nullptr, nullptr}, {}},
      {"sigmoid", LayerKind::kSigmoid, 0, {nullptr, nullptr}, {}},
      {"gelu", LayerKind::kGelu, 0, {nullptr, nullptr}, {}},
      {"dropout", LayerKind::kDropout, 1, {"the rate", nullptr}, {}},
      {"dot", LayerKind::kDot, 2, {"the number of fields", "the floats per field"}, {}},
      {"cross", LayerKind::kCross, 1, {"the number of cross layers", nullptr}, {}},
      {"softmax", LayerKind::kSoftmax, 0, {nullptr, nullptr}, {}},
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

[[noreturn]] void fail_unknown_kind(const std::string& spec, const Token& word) {
  std::string known = "embedding D (first only)";
  std::vector<std::string> names = {"embedding", "bottom", "residual", "parallel"};
  for (const KindRule& r : kinds()) {
    known += ", " + std::string(r.name == std::string("softmax") ? "bottom K(...), " : "") + r.name;
    names.push_back(r.name);
  }
  fail_at_spec(spec, word.position, word.text.size(),
               "'" + word.text + "' is not a layer" + did_you_mean(word.text, names) + " (" + known +
                   ", residual(...), parallel(... | ...))");
}

// key=value (`t`, '=' at eq) of a layer of `rule`'s kind, into layer's options (or its args: momentum).
void parse_option(const std::string& spec, const Token& t, size_t eq, const KindRule& rule, LayerSpec* layer) {
  const std::string key = t.text.substr(0, eq);
  bool known = false;
  for (const std::string& o : rule.options) known = known || o == key;
  if (!known) {
    fail_at_spec(spec, t.position, eq, "'" + key + "' is not an option of " + rule.name +
                                           (rule.options.empty() ? " (it takes none)" : ""));
  }
  const Token value{t.text.substr(eq + 1), t.position + eq + 1};
  if (key == "momentum") {  // a fraction, kept as the layer's one number
    char* end = nullptr;
    const double momentum = std::strtod(value.text.c_str(), &end);
    if (value.text.empty() || *end != '\0' || !(momentum >= 0 && momentum <= 1)) {
      fail_at_spec(spec, value.position, value.text.size(),
                   "'" + value.text + "' is not a momentum in [0, 1] (PyTorch's default: 0.1)");
    }
    if (!layer->args.empty()) fail_at_spec(spec, t.position, t.text.size(), "momentum is given twice");
    layer->args.push_back(momentum);
    return;
  }
  layer->options.emplace_back(key, integer(spec, value, key == "pad" ? 0 : 1, 4096,
                                          key == "pad" ? "a padding" : "a stride"));
}

// A layer of `kind` with its numbers, for an error's "e.g.".
std::string example_of(const std::string& kind) {
  return kind == "dense"     ? "dense 10"
         : kind == "conv"    ? "conv 32 3 pad=1"
         : kind == "dropout" ? "dropout 0.25"
         : kind == "dot"     ? "dot 26 16"
         : kind == "cross"   ? "cross 3"
                             : kind + " 2";
}

LayerSpec parse_layer(const std::string& spec, size_t from, size_t to, int number) {
  const std::vector<Token> tokens = split_tokens(spec, from, to, '\0');
  LayerSpec layer;
  if (tokens.empty()) fail_at_spec(spec, from, 1, "layer " + std::to_string(number) + " is empty");
  layer.position = tokens.front().position;
  layer.text = spec.substr(layer.position, tokens.back().position + tokens.back().text.size() - layer.position);
  const std::string word = kind_of(tokens[0].text);
  const KindRule* rule = nullptr;
  for (const KindRule& r : kinds()) {
    if (word == r.name) rule = &r;
  }
  if (rule == nullptr) fail_unknown_kind(spec, tokens[0]);
  layer.kind = rule->kind;
  int positional = 0;
  for (size_t i = 1; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    const size_t eq = t.text.find('=');
    if (eq != std::string::npos) {
      parse_option(spec, t, eq, *rule, &layer);
      continue;
    }
    if (positional == rule->positional) {
      fail_at_spec(spec, t.position, t.text.size(),
              "'" + t.text + "': " + word + " takes " + std::to_string(rule->positional) + " number(s)");
    }
    if (layer.kind == LayerKind::kDropout) {
      char* end = nullptr;
      const double rate = std::strtod(t.text.c_str(), &end);
      if (*end != '\0' || !(rate >= 0 && rate < 1)) {
        fail_at_spec(spec, t.position, t.text.size(), "'" + t.text + "' is not a dropout rate in [0, 1)");
      }
      layer.args.push_back(rate);
    } else {
      const int lo = layer.kind == LayerKind::kDot && positional == 0 ? 2 : 1;  // pairs need two fields
      const int hi = layer.kind == LayerKind::kCross ? 64 : kMaxWidth;
      layer.args.push_back(integer(spec, t, lo, hi, rule->arg_names[positional]));
    }
    ++positional;
  }
  if (positional < rule->positional) {
    fail_at_spec(spec, layer.position, layer.text.size(),
                 word + " needs " + rule->arg_names[positional] + " (e.g. " + example_of(word) + ")");
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
      if (depth-- == 0) fail_at_spec(spec, i, 1, "')' closes no '('");
    } else if (spec[i] == ',' && depth == 0) {
      return i;
    }
  }
  if (depth > 0) fail_at_spec(spec, open, 1, "'(' is not closed");
  return to;
}

std::vector<LayerSpec> parse_list(const std::string& spec, size_t from, size_t to, const std::string& block);

// A parallel block's branches between its parentheses [open, close], separated by '|' (no
// parentheses inside: blocks do not nest), each a layer list; two or more.
void parse_branches(const std::string& spec, size_t word, size_t open, size_t close, const std::string& name,
                    const std::string& example, LayerSpec* layer) {
  for (size_t from = open + 1; from <= close;) {
    size_t bar = spec.find('|', from);
    if (bar > close) bar = close;
    const size_t first = spec.find_first_not_of(" \t", from);
    const std::string branch = name + "." + std::to_string(layer->layers.size() + 1);
    if (first >= bar) {
      fail_at_spec(spec, std::min(from, bar), 1, "branch " + std::to_string(layer->layers.size() + 1) + " of the parallel block of " + name + " has no layers (e.g. " + example + ")");
    }
    LayerSpec b;
    b.kind = LayerKind::kBranch;
    b.position = first;
    b.text = spec.substr(first, spec.find_last_not_of(" \t", bar - 1) + 1 - first);
    b.list = spec;
    b.layers = parse_list(spec, from, bar, branch);
    layer->layers.push_back(std::move(b));
    from = bar + 1;
  }
  if (layer->layers.size() < 2) {
    fail_at_spec(spec, word, close + 1 - word, "a parallel block sums two branches or more, separated by '|' (e.g. " + example + ")");
  }
}

// "residual(<list>)" or "bottom K(<list>)" (`kind`) from the word [word, word_end) (in any case)
// to `to`.
LayerSpec parse_block(const std::string& spec, size_t word, size_t word_end, size_t to, const std::string& name,
                      bool nested, const std::string& kind) {
  const size_t length = word_end - word;
  if (nested) fail_at_spec(spec, word, length, kind + " blocks do not nest (a block's layers are plain layers)");
  const std::string example = kind == "residual" ? "residual(conv 32 3 pad=1, relu, conv 32 3 pad=1)"
                              : kind == "bottom"  ? "bottom 13(dense 64, relu, dense 8)"
                                                  : "parallel(dense 1 | dense 64, relu, dense 1)";
  LayerSpec layer;
  size_t open = std::min(spec.find_first_not_of(" \t", word_end), to);
  if (kind == "bottom") {
    Token count{"", open};
    while (open < to && spec[open] != '(' && !std::isspace(static_cast<unsigned char>(spec[open]))) ++open;
    count.text = spec.substr(count.position, open - count.position);
    if (count.text.empty()) {
      fail_at_spec(spec, word, length, "bottom needs the number of values its layers take (e.g. " + example + ")");
    }
    layer.args.push_back(integer(spec, count, 1, kMaxWidth, "the number of values its layers take"));
    open = spec.find_first_not_of(" \t", open);
  }
  if (open >= to || spec[open] != '(') fail_at_spec(spec, word, length, kind + " takes its layers in parentheses: " + example);
  size_t close = open;
  for (int depth = 0; close < to; ++close) {  // item_end checked that the parentheses balance
    depth += spec[close] == '(' ? 1 : spec[close] == ')' ? -1 : 0;
    if (depth == 0) break;
  }
  const size_t after = spec.find_first_not_of(" \t", close + 1);
  if (after < to) {
    const size_t extent = spec.find_last_not_of(" \t", to - 1) + 1 - after;
    fail_at_spec(spec, after, extent,
            "'" + spec.substr(after, extent) + "' follows a " + kind + " block's ')' (a comma is missing?)");
  }
  if (spec.find_first_not_of(" \t", open + 1) >= close) {
    fail_at_spec(spec, open, close + 1 - open, "the " + kind + " block of " + name + " has no layers");
  }
  if (!layer_kind_of(kind, &layer.kind)) fail_at_spec(spec, word, length, "'" + kind + "' is not a block");
  layer.position = word;
  layer.text = spec.substr(word, close + 1 - word);
  layer.list = spec;
  std::vector<const LayerSpec*> inner;
  if (kind == "parallel") {
    parse_branches(spec, word, open, close, name, example, &layer);
    for (const LayerSpec& b : layer.layers) {
      for (const LayerSpec& l : b.layers) inner.push_back(&l);
    }
  } else {
    layer.layers = parse_list(spec, open + 1, close, name);
    for (const LayerSpec& l : layer.layers) inner.push_back(&l);
  }
  for (const LayerSpec* l : inner) {
    if (l->kind == LayerKind::kSoftmax) {
      fail_at_spec(spec, l->position, l->text.size(), "softmax (the loss) cannot be in a " + kind + " block");
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
    if (word >= end) fail_at_spec(spec, std::min(from, spec.size() - 1), 1, name + " is empty");
    const std::string kind = kind_of(spec.substr(word, word_end - word));
    if (kind == "residual" || kind == "bottom" || kind == "parallel") {
      layers.push_back(parse_block(spec, word, word_end, end, name, !block.empty(), kind));
    } else {
      layers.push_back(parse_layer(spec, from, end, number));
    }
    ++number;
    from = end + 1;
  }
  return layers;
}

}  // namespace

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kResidual: return "residual";
    case LayerKind::kBottom: return "bottom";
    case LayerKind::kParallel: return "parallel";
    case LayerKind::kBranch: return "branch";
    default: break;
  }
  for (const KindRule& r : kinds()) {
    if (r.kind == kind) return r.name;
  }
  return "?";
}

bool layer_kind_of(const std::string& name, LayerKind* kind) {
  for (const LayerKind k : {LayerKind::kResidual, LayerKind::kBottom, LayerKind::kParallel, LayerKind::kBranch}) {
    if (name == layer_kind_name(k)) return (*kind = k, true);
  }
  for (const KindRule& r : kinds()) {
    if (name == r.name) return (*kind = r.kind, true);
  }
  return false;
}

std::vector<LayerSpec> parse_model(const std::string& spec) {
  if (spec.find_first_not_of(" \t,") == std::string::npos) throw UsageError("--model: the layer list is empty");
  std::vector<LayerSpec> layers = parse_list(spec, 0, spec.size(), "");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].kind == LayerKind::kSoftmax && i + 1 != layers.size()) {
      fail_at_spec(spec, layers[i].position, layers[i].text.size(), "softmax (the loss) can only be the last layer");
    }
  }
  if (layers.back().kind == LayerKind::kSoftmax) layers.pop_back();
  if (layers.empty()) throw UsageError("--model: no layer before the softmax");
  return layers;
}

std::string mlp_model(const std::vector<int>& hidden, int classes) {
  std::string spec;
  for (int h : hidden) spec += "dense " + std::to_string(h) + ", relu, ";
  return spec + "dense " + std::to_string(classes);
}

}  // namespace pstrain
