// The worker's model replica on its device: parameters, gradients and the input batch in
// backend memory, and the host buffers the PS client reads and writes. On the CPU they are the
// same memory; on a GPU, host buffers are pinned and every transfer is explicit.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "worker/backend/backend.h"

namespace pstrain {

class Replica {
 public:
  // Allocates params and grads of `total` floats and an input buffer of `input_floats`.
  Replica(Backend& backend, size_t total, size_t input_floats);

  bool on_device() const { return !backend_.host_accessible(); }  // a GPU replica
  int cuda_device() const { return backend_.cuda_device(); }       // -1 on the CPU
  float* host_params() { return host_params_; }
  float* host_grad() { return host_grad_; }  // all-reduce sums in place
  // Where forward and backward read and write: the host buffers on the CPU (wherever
  // compute_from / place_host_grad put them), the device buffers on a GPU.
  const float* params() const { return backend_.host_accessible() ? host_params_ : params_.get(); }
  float* grad() { return backend_.host_accessible() ? host_grad_ : grad_.get(); }
  // From the next step on, the gradient lives at `at` (host memory of the replica's size, e.g. a
  // shared-memory all-reduce's slot or a same-host PS's segment): backward writes it there on the
  // CPU, and a GPU replica stages it there. The caller keeps `at` valid while the replica is used.
  void place_host_grad(float* at);
  // On the CPU: forward and backward read the parameters at `at` from now on (a same-host PS's
  // parameter area in plain sync), which must hold the current values already. It is mapped
  // read-only: nothing may write host_params() afterwards but DenseClient::receive_params, which
  // skips a copy onto itself. The caller keeps `at` valid while the replica is used.
  void compute_from(const float* at);

  void params_to_device();                    // after the parameters were pulled
  void synchronize() { backend_.synchronize(); }  // the device's queued work is done
  void grad_to_host(size_t from, size_t to);  // gradient elements [from, to), during backward
  const float* input(const float* host_x, size_t floats);  // the batch, where the backend reads it

 private:
  Backend& backend_;
  const size_t total_;
  BufferPtr params_, grad_, input_;
  BufferPtr host_params_buffer_, host_grad_buffer_;  // GPU only
  float* host_params_;
  float* host_grad_;
};

}  // namespace pstrain
