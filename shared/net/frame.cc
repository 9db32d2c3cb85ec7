#include "shared/net/frame.h"

#include <cstring>
#include <vector>

namespace pstrain {

Frame::Frame(size_t size) : size_(size) {
  if (size == 0) return;
  auto bytes = std::make_shared<std::vector<uint8_t>>(size);
  data_ = bytes->data();
  keeper_ = std::move(bytes);
}

Frame::Frame(const void* data, size_t size) : size_(size) {
  if (size == 0) return;
  // operator new's alignment: the PS reads payloads as floats.
  auto bytes = std::make_shared<std::vector<uint8_t>>(size);
  std::memcpy(bytes->data(), data, size);
  data_ = bytes->data();
  keeper_ = std::move(bytes);
}

Frame::Frame(std::string bytes) : size_(bytes.size()) {
  if (size_ == 0) return;
  auto kept = std::make_shared<std::string>(std::move(bytes));
  data_ = reinterpret_cast<uint8_t*>(&(*kept)[0]);
  keeper_ = std::move(kept);
}

Frame::Frame(std::shared_ptr<const void> keeper, const void* data, size_t size)
    : keeper_(std::move(keeper)), data_(static_cast<uint8_t*>(const_cast<void*>(data))), size_(size) {}

Frame Frame::view(const void* data, size_t size) { return Frame(nullptr, data, size); }

Frame Frame::share() const { return Frame(keeper_, data_, size_); }

}  // namespace pstrain
