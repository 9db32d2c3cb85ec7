// Parameter files: every variable of the model as DIR/<name>.npy (float32, C order), written by
// the chief's --save-params and read back by --init-params and --evaluate.
#pragma once

#include <string>
#include <vector>

#include "shared/train/layout.h"

namespace pstrain {

// Writes every variable of `layout` as DIR/<name>.npy, creating DIR. Throws pstrain::Error.
void save_params(const std::string& dir, const Layout& layout, const float* params);

// Overwrites every variable of `layout` with DIR/<name>.npy (as save_params writes them). Throws
// pstrain::Error naming the file for a missing file or a shape that is not the model's.
void load_params(const std::string& dir, const Layout& layout, float* params);

// The number of classes a model saved in `dir` (--init-params) was trained for: what a `model`
// (--model) ending in dense K says, else the length of the saved last layer's bias (`hidden`:
// --hidden, the MLP's widths when `model` is empty).
int saved_classes(const std::string& model, const std::vector<int>& hidden, const std::string& dir);

}  // namespace pstrain
