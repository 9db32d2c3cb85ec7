// What worker/model/layers.cc, ctr_layers.cc, layer_spec.cc and layer_blocks.cc share; not for other users (they use
// worker/model/layers.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "worker/model/layers.h"

namespace pstrain {

// Throws UsageError "--model: <message>", then `spec` and a caret line under its characters
// [position, position + length).
[[noreturn]] void fail_at_spec(const std::string& spec, size_t position, size_t length, const std::string& message);

// The layers of a residual block on input `in`, and the shortcut's projection where the block
// changes the shape; throws UsageError pointing at the block where no projection fits.
std::unique_ptr<Layer> make_residual(const LayerSpec& spec, const Shape& in, int index, const std::string& name);

// bottom K(<layers>) on a flat input of more than K values.
std::unique_ptr<Layer> make_bottom(const LayerSpec& spec, const Shape& in, int index, const std::string& name);

// cross N or dot F D (ctr_layers.cc) on input `in`, its output's shape in *out; throws UsageError
// `where` + what is wrong with `in` for it.
std::unique_ptr<Layer> make_ctr_layer(const LayerSpec& spec, const Shape& in, const std::string& where, Shape* out);

// parallel(<layers> | <layers> ...): the sum of its branches, each run on the same input.
std::unique_ptr<Layer> make_parallel(const LayerSpec& spec, const Shape& in, int index, const std::string& name);

}  // namespace pstrain
