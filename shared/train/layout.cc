#include "shared/train/layout.h"

#include "shared/util/error.h"

namespace pstrain {

const TensorSpec& Layout::add(const std::string& name, std::vector<size_t> shape, float fill) {
  for (const auto& t : tensors_) {
    if (t.name == name) throw Error("layout: duplicate variable '" + name + "'");
  }
  size_t size = 1;
  for (size_t d : shape) size *= d;
  tensors_.push_back(TensorSpec{name, std::move(shape), total_, size, fill});
  total_ += size;
  return tensors_.back();
}

const TensorSpec& Layout::at(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return t;
  }
  throw Error("layout: no variable '" + name + "'");
}

std::vector<Slice> balance_slices(size_t total, int shards) {
  PSTRAIN_CHECK(shards >= 1);
  const size_t n = static_cast<size_t>(shards);
  std::vector<Slice> slices(n);
  size_t offset = 0;
  for (size_t s = 0; s < n; ++s) {
    const size_t length = total / n + (s < total % n ? 1 : 0);
    slices[s] = Slice{offset, length};
    offset += length;
  }
  return slices;
}

}  // namespace pstrain
