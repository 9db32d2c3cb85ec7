// The model of a training run, where it comes from and where it goes: its description (--model /
// --hidden, or --init-params' model.json, checked against the job's input), its first parameters
// and state (--init-params; the state of the checkpoint a --resume starts from), and
// --save-params' files at the end. A room beside worker/train/trainer.cc, which calls these in the
// order of the run.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "worker/model/model.h"
#include "worker/model/model_file.h"
#include "worker/report/progress.h"  // TrainSummary
#include "worker/train/train_input.h"
#include "worker/train/trainer.h"

namespace pstrain {

// The model `o` trains on records of `classes` classes (or targets) whose input the stage
// `input` makes, of shape `input_shape`: --model / --hidden, or with --init-params DIR and
// neither given, DIR/model.json's (a given one must agree with it: worker/model/model_file.h). Throws
// pstrain::UsageError where DIR's model or tables differ from the job's.
ModelDescription describe_run_model(const TrainOptions& o, int classes,
                                    const std::vector<size_t>& input_shape, const TrainInput& input);

// The first parameters, the same on every worker: from the seed alone, or --init-params DIR's
// (every worker loads them, so that any of them could initialise the job), with DIR's state.
// `chief`: the chief logs what it loaded.
void init_run_model(const TrainOptions& o, Model& model, float* host_params, bool chief,
                    const std::string& tag);

// The model's state (batch norm's running statistics) from DIR/<name>.npy, where it has any.
void load_model_state(Model& model, const std::string& dir, bool chief, const std::string& tag);

// --save-params DIR: every variable as DIR/<name>.npy, the state too, and DIR/model.json of
// `description` with how the run went (its training record is updated).
void save_run_model(const std::string& dir, const Model& model, const float* host_params,
                    const TrainSummary& summary, ModelDescription* description);

}  // namespace pstrain
