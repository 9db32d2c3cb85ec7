// Bytes read in order from a range of a file, or from a string, through a bounded buffer: a
// checkpoint's shard file of gigabytes is checked and decoded (--resume, --init-params,
// pstrain-export) without being held in memory, as it is written (FileWriter).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace pstrain {

class ByteReader {
 public:
  static constexpr size_t kBufferBytes = size_t{1} << 20;

  // The bytes of `bytes`, which must outlive the reader (no buffer, no copy).
  explicit ByteReader(const std::string& bytes);
  // [offset, offset + length) of the file at `path`; a file that cannot be opened gives a reader
  // whose error() says so and whose reads fail.
  ByteReader(const std::string& path, uint64_t offset, uint64_t length);
  // A second reader of the same range from `position` (the file is not opened again).
  ByteReader(const ByteReader& other, uint64_t position);
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  uint64_t size() const { return length_; }
  uint64_t position() const { return position_; }
  uint64_t left() const { return length_ - position_; }
  // Copies the next `n` bytes to `out`; false, consuming nothing, when fewer are left or a read
  // fails (error() then names the file and the errno text).
  bool read(void* out, size_t n);
  bool skip(uint64_t n);
  const std::string& error() const { return error_; }

 private:
  bool fill();  // the buffer from position_ on

  const char* bytes_ = nullptr;  // a string's, or null for a file
  std::shared_ptr<const int> fd_;
  std::string path_;
  uint64_t offset_ = 0, length_ = 0, position_ = 0;
  std::unique_ptr<char[]> buffer_;
  uint64_t buffer_at_ = 0;  // the position of buffer_[0]
  size_t buffered_ = 0;
  std::string error_;
};

}  // namespace pstrain
