// DIR/model.json: what a directory of parameter files holds (docs/models.md, "Using a trained
// model"): the layer list, the input shape, the classes and where each variable lives in the flat
// vector, plus how it was trained. --save-params and pstrain-export write it (the chief also puts
// one in every checkpoint), and --init-params, --evaluate and --predict take the model from it
// when no --model / --hidden is given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/train/layout.h"
#include "shared/util/modes.h"
#include "worker/sparse/embedding_setup.h"

namespace pstrain {

// The newest model.json version: 2, written for a model with embedding tables (its
// "embeddings"), so that a pstrain that cannot use them refuses it; 1 otherwise. Both are read.
constexpr int kModelFileFormat = 2;
// A script's model (a Python worker's, docs/python.md): "kind": "script", no layer list, the
// variables named by the script (a torch module's state_dict names). Version 3, so that a pstrain
// that knows only layer lists refuses it rather than misreading it.
constexpr int kScriptModelFileFormat = 3;

// How the parameters were obtained (informative: nothing reads these back but people).
struct TrainingRecord {
  std::string optimizer;          // sgd | momentum | adam ("": unknown)
  double lr = 0;
  uint64_t steps = 0;             // steps applied to these parameters
  bool evaluated = false;         // whether test_loss and test_accuracy are known
  double test_loss = 0, test_accuracy = 0;
  std::string source;             // "--save-params", "checkpoint DIR/v0000000500", ...
};

struct ModelDescription {
  std::string spec;                  // the layer list (--model, or --hidden's MLP written out)
  std::string given_as;              // how the job gave it: "--model" or "--hidden 256,128"
  std::vector<size_t> input_shape;   // one sample: {C, H, W} or {D}
  int classes = 0;                   // the last layer's outputs: classes, or float targets per record
  // --loss: what the outputs were trained against ("loss" in model.json; a file without it:
  // softmax, as every model was before there were others), and --huber-delta for huber
  Loss loss = Loss::kSoftmax;
  double huber_delta = 1.0;
  // A CTR model (--embedding-dim): its tables, whose rows are in DIR/embeddings/ (dim 0: none).
  // input_shape is then {dense + fields * dim}: the input the tables' rows make.
  EmbeddingSetup embeddings;
  TrainingRecord training;
  // A script's model (worker/python/): no spec, input shape or classes; `variables` is its
  // layout as the script named it. pstrain-export writes it as arrays; --init-params,
  // --evaluate and --predict refuse it (they need a layer list).
  bool script = false;
  Layout variables;
};

// The model.json text of `d` (its layout computed from spec, input shape and classes). Throws
// pstrain::UsageError for a spec that does not fit the shape or the classes.
std::string model_json_text(const ModelDescription& d);
// Writes DIR/model.json atomically (DIR exists). Throws pstrain::Error.
void write_model_json(const std::string& dir, const ModelDescription& d);
// DIR/model.json, or nullopt when there is none. Throws pstrain::Error naming the file for one
// that does not parse, is of another format, or whose variables are not its layer list's.
std::optional<ModelDescription> read_model_json(const std::string& dir);

// The layout of a model description (what its .npy files and a checkpoint's flat vector hold).
Layout layout_of(const ModelDescription& d);
// Its state layout (batchnorm's running statistics: DIR/<name>.npy beside the variables, in a
// checkpoint's directory too); empty for a model without state.
Layout state_layout_of(const ModelDescription& d);
// "" when `ours` has exactly `saved`'s variables (names, shapes, offsets); else the first
// difference, "layer2.weight has shape [128, 10] in WHERE, but the model needs [64, 10]".
std::string layout_difference(const Layout& saved, const Layout& ours, const std::string& where);
// "[128, 10]"
std::string bracket_shape(const std::vector<size_t>& shape);
// What a model's last layer's outputs are, for Network: "" (classes) or the targets of `loss`
// ("the --loss mse model of WHERE").
std::string targets_of(Loss loss, const std::string& where);

}  // namespace pstrain
