// Element-wise loops of the PS's hot path, written so the compiler vectorises them.
#pragma once

#include <cstddef>

// Hot element-wise loops are compiled for AVX-512, AVX2 and the baseline; the loader picks one.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PSTRAIN_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PSTRAIN_MULTIVERSION
#endif

namespace pstrain {

// Which of those the loader picks on this CPU ("avx512f", "avx2", "baseline"; "baseline" in
// builds without the clones, such as clang's sanitizer builds): what pstrain-ps --kernels prints.
const char* numeric_isa();

// True if no element is NaN or infinite (checks the exponent bits; vectorises, unlike isfinite).
bool all_finite(const float* data, size_t n);

// dst[i] += src[i]
void add_into(float* dst, const float* src, size_t n);

}  // namespace pstrain
