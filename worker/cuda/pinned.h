// Page-locked ("pinned") host memory for staging parameters and gradients: copies between it and
// the GPU run at full PCIe/NVLink speed and can be truly asynchronous, which copies from pageable
// memory cannot. Move-only; plain C++, so host-only .cc files can use it. CUDA builds only.
#pragma once

#include <cstddef>

namespace pstrain {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // n floats, zeroed, usable by every device's context (cudaHostAllocPortable). Throws
  // pstrain::Error if CUDA cannot pin that much.
  explicit PinnedBuffer(size_t n);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  float& operator[](size_t i) { return data_[i]; }
  const float& operator[](size_t i) const { return data_[i]; }

 private:
  void release() noexcept;

  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pstrain
