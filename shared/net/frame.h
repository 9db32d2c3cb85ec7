// One frame of a message, the transport's own type (shared/net/transport.h): bytes with whatever
// keeps them alive. A frame either owns a copy, shares bytes someone else keeps alive (a keeper:
// the PS's chunk values, a buffer on loan to the ring), or views memory its sender promises to
// leave untouched until the message is gone. Transports move frames without copying them where
// they can: ZeroMQ sends a large frame from its own bytes, and hands a received one over as it
// arrived. Move-only; share() gives a second reference to the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace pstrain {

class Frame {
 public:
  Frame() = default;
  // `size` zero bytes of its own.
  explicit Frame(size_t size);
  // A copy of [data, data + size).
  Frame(const void* data, size_t size);
  // Takes the string's bytes.
  explicit Frame(std::string bytes);
  // [data, data + size), kept alive by `keeper`: the frame and every transport queue holding it
  // keep a reference, and the keeper's deleter runs once the last one is gone (the ring counts
  // its loans that way).
  Frame(std::shared_ptr<const void> keeper, const void* data, size_t size);
  // [data, data + size) without a copy or a keeper: the caller keeps it unchanged until the
  // transport is done with it (for a send, until the next one to that peer; see its contract).
  static Frame view(const void* data, size_t size);

  Frame(Frame&&) noexcept = default;
  Frame& operator=(Frame&&) noexcept = default;
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;

  Frame share() const;  // the same bytes, one more reference

  // A received frame is its receiver's to write to (the PS adds pushes into one).
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  template <class T>
  T* data_as() {
    return reinterpret_cast<T*>(data_);
  }
  template <class T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(data_);
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string to_string() const { return std::string(reinterpret_cast<const char*>(data_), size_); }
  // Whether something keeps the bytes alive (false for a view and for an empty frame).
  const std::shared_ptr<const void>& keeper() const { return keeper_; }

 private:
  std::shared_ptr<const void> keeper_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pstrain
