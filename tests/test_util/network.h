// Layer lists and their gradients, for the tests of the model spec and of each layer.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace pstrain::test {

// The UsageError's message when Network(spec, shape, classes) refuses the spec, "no error" when it
// builds (another exception propagates and fails the test).
std::string network_error(const std::string& spec, const std::vector<size_t>& shape, int classes);

// d f / d x[i] by central differences of step h: (f(x[i] + h) - f(x[i] - h)) / 2h, with x[i]
// restored after.
double central_difference(std::vector<float>& x, size_t i, float h, const std::function<double()>& f);

}  // namespace pstrain::test
