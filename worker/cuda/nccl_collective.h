// `--collective nccl`: the all-reduce of `--mode allreduce` on the workers' GPUs.
//
// A ZeroMQ ring collective (worker/collective/collective.h) is the bootstrap: rank 0's ncclUniqueId travels
// over its broadcast(), which also lets the rendezvous report a missing rank by name. The NCCL
// communicator is non-blocking, so every wait is bounded by `timeout_s`: a rank that died makes
// the others fail with an Error naming the timeout instead of hanging inside NCCL.
//
// Plain C++ header: the implementation is in nccl_collective.cc (NCCL builds) or in
// worker/cuda/stubs/nccl_stub.cc (builds without CUDA or NCCL, where it throws).
#pragma once

#include <memory>

#include "worker/collective/collective.h"

namespace pstrain {

// Creates the communicator among bootstrap->world() ranks on CUDA device `device` (the worker's
// backend device: each rank may use a different GPU of the host). The returned collective's
// allreduce_sum() takes `data` in that device's memory (the worker's flat gradient buffer) and
// `scalars` in host memory; on_device() is true. It first waits for all work the process queued
// on the device (the backward pass), then sums in place. Throws pstrain::Error when NCCL or CUDA
// fails, or a peer does not answer within timeout_s.
std::unique_ptr<Collective> make_nccl_collective(std::unique_ptr<Collective> bootstrap, int device,
                                                 double timeout_s);

// Whether this build has NCCL (false in worker/cuda/stubs/nccl_stub.cc, whose make_nccl_collective throws).
bool nccl_available();

}  // namespace pstrain
