// What the CPU backend's oneDNN rooms (cpu_conv, cpu_pool) share: OpenMP limited to the calling
// thread, scratch measured in whole cache lines, user-mode scratchpads.
#pragma once

#include <cstddef>
#include <oneapi/dnnl/dnnl.hpp>

// The OpenMP runtime oneDNN is built on (as in cpu_gemm.cc, without <omp.h>).
extern "C" void omp_set_num_threads(int);

namespace pstrain {

// Limits OpenMP to the calling thread, once per thread: oneDNN plans a primitive for the threads
// OpenMP offers when it is created (a weight gradient split over threads sums across them) and
// runs it on as many, so both must happen on threads limited to one.
inline void one_openmp_thread() {
  static thread_local const bool once = (omp_set_num_threads(1), true);
  (void)once;
}

// Whole 64-byte lines of floats, so every region of a scratch starts on one.
inline size_t floats_of(size_t bytes) { return (bytes + 63) / 64 * 16; }

// Primitives take their scratchpads from the caller (the layer's planned scratch).
inline dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

}  // namespace pstrain
