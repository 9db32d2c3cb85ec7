#include "worker/backend/replica.h"

#include <algorithm>
#include <cstring>

#include "shared/util/error.h"
#include "shared/util/log.h"

namespace pstrain {

Replica::Replica(Backend& backend, size_t total, size_t input_floats)
    : backend_(backend),
      total_(total),
      params_(backend.allocate(total)),
      grad_(backend.allocate(total)),
      input_(backend.host_accessible() ? nullptr : backend.allocate(input_floats)) {
  if (backend.host_accessible()) {
    host_params_ = params_.get();
    host_grad_ = grad_.get();
  } else {
    host_params_buffer_ = backend.allocate_host(total);
    host_grad_buffer_ = backend.allocate_host(total);
    host_params_ = host_params_buffer_.get();
    host_grad_ = host_grad_buffer_.get();
  }
}

void Replica::place_host_grad(float* at) {
  PSTRAIN_CHECK(at != nullptr);
  host_grad_ = at;
}

void Replica::compute_from(const float* at) {
  PSTRAIN_CHECK(at != nullptr && backend_.host_accessible());
  PSTRAIN_CHECK(std::memcmp(host_params_, at, total_ * sizeof(float)) == 0);  // bitwise: NaN too
  host_params_ = const_cast<float*>(at);  // see the header: never written through from here on
}

void Replica::params_to_device() {
  if (!backend_.host_accessible()) backend_.upload(params_.get(), host_params_, total_);
}

void Replica::grad_to_host(size_t from, size_t to) {
  PSTRAIN_CHECK(from <= to && to <= total_);
  if (!backend_.host_accessible()) backend_.download(host_grad_ + from, grad_.get() + from, to - from);
}

const float* Replica::input(const float* host_x, size_t floats) {
  if (backend_.host_accessible()) return host_x;
  backend_.upload(input_.get(), host_x, floats);
  return input_.get();
}

}  // namespace pstrain
