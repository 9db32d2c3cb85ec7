// Parameters a job saved with --save-params, and how far two sets are apart.
#pragma once

#include <string>
#include <vector>

namespace pstrain::test {

struct SavedParams {
  std::vector<std::string> names;  // the MLP's variables, in layout order
  std::vector<std::vector<float>> values;
};

// Reads DIR/layer<l>.{weight,bias}.npy for l = 0, 1, ... (as many layers as exist, at least one).
SavedParams load_saved_params(const std::string& dir);

// max |a - b| / max |a| over all variables; a failed expectation if their shapes differ.
double relative_difference(const SavedParams& a, const SavedParams& b);
// The same variables with the same bits (NaNs and signed zeros included).
bool bit_identical(const SavedParams& a, const SavedParams& b);

}  // namespace pstrain::test
