// Loading a saved model (--init-params, --evaluate, --predict): which layer list and classes to
// build, from DIR/model.json (model_file.h) and what the job was given, and the refusals that
// name the layer or variable where they differ. Beside model_file.h, which reads and writes the
// file itself.
#pragma once

#include <string>
#include <vector>

#include "worker/model/model_file.h"

namespace pstrain {

// What a job that loads DIR (--init-params, --evaluate, --predict) knows of its model.
struct SavedModelQuery {
  std::string flag = "--init-params";
  std::string dir;
  bool model_given = false;         // --model or --hidden was given (command line or config file)
  std::string model;                // --model; empty: the MLP of `hidden`
  std::vector<int> hidden;
  std::vector<size_t> sample_shape; // the data's; empty: not known yet (the classes then come from DIR)
  int classes = 0;                  // the data's (0: not known: DIR's)
  Loss loss = Loss::kSoftmax;       // the job's --loss, which a model.json's must be
  bool any_loss = false;            // --evaluate, --predict: the loss is model.json's, whatever q.loss
};
struct SavedModel {
  std::string spec;
  int classes = 0;
  Loss loss = Loss::kSoftmax;  // DIR/model.json's (softmax without one)
  double huber_delta = 1.0;
  EmbeddingSetup embeddings;  // DIR/model.json's (dim 0: no tables)
  bool described = false;  // DIR has a model.json
};

// The layer list and classes to load DIR into: DIR/model.json's when no model is given; the
// given one, which must agree with DIR/model.json where it has one. Throws pstrain::UsageError
// (exit 2) when there is neither a model.json nor a given model, or the given model is not the
// saved one, and pstrain::Error when the data does not fit the saved model; each names the layer
// or variable and both shapes.
SavedModel resolve_saved_model(const SavedModelQuery& q);

}  // namespace pstrain
