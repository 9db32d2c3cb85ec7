#include "worker/model/saved_model.h"

#include <filesystem>
#include <sstream>

#include "shared/util/error.h"
#include "worker/model/layers.h"
#include "worker/model/model.h"
#include "worker/model/param_files.h"

namespace pstrain {

namespace {

// The layer list without dropout (which changes no variable and nothing an evaluation computes)
// and without a trailing softmax, each layer as parsed.
// (A block: "residual(" or "bottom K(" its inner layers so written ")".)
std::vector<std::string> comparable_layers(const std::vector<LayerSpec>& specs) {
  std::vector<std::string> layers;
  for (const LayerSpec& l : specs) {
    if (l.kind == LayerKind::kDropout) continue;
    std::string text = layer_kind_name(l.kind);
    for (double a : l.args) {
      std::ostringstream number;
      number << a;
      text += " " + number.str();
    }
    for (const auto& [key, value] : l.options) text += " " + key + "=" + std::to_string(value);
    if (l.kind == LayerKind::kParallel) {  // parallel(a, b | c): each branch's layers
      for (size_t k = 0; k < l.layers.size(); ++k) {
        const std::vector<std::string> inner = comparable_layers(l.layers[k].layers);
        text += k ? " | " : "(";
        for (size_t i = 0; i < inner.size(); ++i) text += (i ? ", " : "") + inner[i];
      }
      text += ")";
    } else if (l.kind == LayerKind::kResidual || l.kind == LayerKind::kBottom) {
      const std::vector<std::string> inner = comparable_layers(l.layers);
      for (size_t i = 0; i < inner.size(); ++i) text += (i ? ", " : "(") + inner[i];
      text += ")";
    }
    layers.push_back(text);
  }
  return layers;
}
std::vector<std::string> comparable_layers(const std::string& spec) { return comparable_layers(parse_model(spec)); }

std::string given_text(const SavedModelQuery& q) {
  if (!q.model.empty()) return "--model";
  std::string widths;
  for (size_t i = 0; i < q.hidden.size(); ++i) widths += (i ? "," : "") + std::to_string(q.hidden[i]);
  return "--hidden " + widths;
}

// The model given with the saved one (--model or --hidden), checked against model.json: the same
// layout and layers, dropout aside.
std::string given_model(const SavedModelQuery& q, const ModelDescription& saved, const Layout& saved_layout,
                        const std::string& targets) {
  const std::string where = q.flag + " " + q.dir, file = q.dir + "/model.json";
  const std::string given = Network::spec_of(q.model, q.hidden, saved.classes);
  Layout ours;
  try {
    ours = Network(given, saved.input_shape, saved.classes, targets).layout();
  } catch (const Error& e) {
    throw UsageError(where + ": " + given_text(q) + " does not fit the saved model's input " +
                     bracket_shape(saved.input_shape) + " and " + std::to_string(saved.classes) + " classes (" +
                     file + "): " + e.what());
  }
  const std::string difference = layout_difference(saved_layout, ours, file);
  if (!difference.empty()) throw UsageError(where + ": " + difference + " (" + given_text(q) + ")");
  const std::vector<std::string> a = comparable_layers(saved.spec), b = comparable_layers(given);
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) {
      throw UsageError(where + ": layer " + std::to_string(i) + " is '" + a[i] + "' in " + file + ", but '" + b[i] +
                       "' in " + given_text(q) + " (dropout layers aside)");
    }
  }
  if (a.size() != b.size()) {
    throw UsageError(where + ": " + file + " has " + std::to_string(a.size()) + " layers (dropout aside), " +
                     given_text(q) + " " + std::to_string(b.size()));
  }
  return given;
}

}  // namespace

SavedModel resolve_saved_model(const SavedModelQuery& q) {
  const std::string where = q.flag + " " + q.dir;
  std::error_code error;
  if (!std::filesystem::is_directory(q.dir, error)) {
    throw UsageError(where + ": " + (std::filesystem::exists(q.dir, error) ? "not a directory" : "no such directory") +
                     " (a --save-params directory, or a pstrain-export of a checkpoint)");
  }
  const std::optional<ModelDescription> saved = read_model_json(q.dir);
  SavedModel out;
  if (!saved) {
    if (!q.model_given) {
      throw UsageError(where + ": there is no " + q.dir + "/model.json (parameters saved by an older pstrain?), so " +
                       "give the model they were trained with: --model \"...\" or --hidden W,...");
    }
    out.classes = q.classes > 0 ? q.classes : saved_classes(q.model, q.hidden, q.dir);
    out.spec = Network::spec_of(q.model, q.hidden, out.classes);
    return out;
  }
  out.described = true;
  const std::string file = q.dir + "/model.json";
  if (saved->script) {
    throw UsageError(where + ": " + file + " describes a Python script's model (" + saved->given_as +
                     "), which has no layer list for pstrain-worker to build: load its variables in the script");
  }
  if (q.classes > 0 && q.classes != saved->classes) {
    throw Error(where + ": the model has " + std::to_string(saved->classes) + " classes (" + file +
                "), but the data has " + std::to_string(q.classes) + " (--classes)");
  }
  if (saved->loss != q.loss && !q.any_loss) {
    throw UsageError(where + ": its model was trained with --loss " + loss_name(saved->loss) + " (" + file +
                     "), but this job's is --loss " + loss_name(q.loss));
  }
  out.classes = saved->classes;
  out.spec = saved->spec;
  out.loss = saved->loss;
  out.huber_delta = saved->huber_delta;
  out.embeddings = saved->embeddings;
  const std::string targets = targets_of(saved->loss, file);
  const Layout saved_layout = layout_of(*saved);
  // The given model: the same variables and computation; its dropout rates for fine-tuning.
  if (q.model_given) out.spec = given_model(q, *saved, saved_layout, targets);
  if (!q.sample_shape.empty() && q.sample_shape != saved->input_shape) {
    // A flat vector of as many values fits a model whose first layer flattens (an MLP saved from
    // images), which the layout then shows; anything else is another input.
    std::string difference;
    try {
      difference = layout_difference(saved_layout, Network(out.spec, q.sample_shape, out.classes, targets).layout(), file);
    } catch (const Error& e) {
      difference = e.what();
    }
    if (!difference.empty()) {
      throw Error(where + ": the model takes inputs of shape " + bracket_shape(saved->input_shape) + " (" + file +
                  "), but the data's records are " + bracket_shape(q.sample_shape));
    }
  }
  return out;
}

}  // namespace pstrain
