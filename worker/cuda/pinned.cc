#include "worker/cuda/pinned.h"

#include <cuda_runtime.h>

#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "shared/util/error.h"
#include "worker/cuda/cuda_check.h"

namespace pstrain {

PinnedBuffer::PinnedBuffer(size_t n) {
  if (n == 0) return;
  if (n > std::numeric_limits<size_t>::max() / sizeof(float)) {
    throw Error("pinned host buffer of " + std::to_string(n) + " floats: size overflows");
  }
  void* p = nullptr;
  PSTRAIN_CUDA_CHECK(cudaHostAlloc(&p, n * sizeof(float), cudaHostAllocPortable));
  std::memset(p, 0, n * sizeof(float));
  data_ = static_cast<float*>(p);
  size_ = n;
}

PinnedBuffer::~PinnedBuffer() { release(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void PinnedBuffer::release() noexcept {
  if (data_ != nullptr) PSTRAIN_CUDA_WARN(cudaFreeHost(data_));
  data_ = nullptr;
  size_ = 0;
}

}  // namespace pstrain
