// Element-wise loops of the PS's hot path, written so the compiler vectorises them.
#pragma once

#include <cstddef>

namespace pstrain {

// True if no element is NaN or infinite (checks the exponent bits; vectorises, unlike isfinite).
bool all_finite(const float* data, size_t n);

// dst[i] += src[i]
void add_into(float* dst, const float* src, size_t n);

}  // namespace pstrain
