// The flat-buffer layout: every variable of a model lives at a fixed offset of one flat float
// buffer; a table maps names to (offset, shape). PS slices are (offset, length) views of it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace pstrain {

struct TensorSpec {
  std::string name;
  std::vector<size_t> shape;
  size_t offset = 0;  // in elements, into the flat buffer
  size_t size = 0;    // product of shape
  float fill = 0.0f;  // a vector's initial value (biases 0; a normalisation's scale 1)
};

class Layout {
 public:
  // Appends a variable after the last one and returns its spec. Names must be unique.
  const TensorSpec& add(const std::string& name, std::vector<size_t> shape, float fill = 0.0f);
  const TensorSpec& at(const std::string& name) const;  // throws pstrain::Error if absent
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  size_t total() const { return total_; }

 private:
  std::vector<TensorSpec> tensors_;
  size_t total_ = 0;
};

// A contiguous [offset, offset+length) range of the flat vector.
struct Slice {
  size_t offset = 0;
  size_t length = 0;
  size_t end() const { return offset + length; }
  bool operator==(const Slice& o) const { return offset == o.offset && length == o.length; }
};

// Splits [0, total) into `shards` contiguous slices whose lengths differ by at most one
// element (byte-balanced: tensors are cut wherever the boundary falls).
std::vector<Slice> balance_slices(size_t total, int shards);

}  // namespace pstrain
