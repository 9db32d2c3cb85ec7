#include "worker/data/augment.h"

#include <algorithm>

#include "shared/train/sparse_ids.h"
#include "shared/util/error.h"

namespace pstrain {

std::string augment_refusal(const AugmentOptions& options, const std::vector<size_t>& shape) {
  if (!options.any()) return "";
  const std::string what = "--augment-flip and --augment-shift apply to images";
  if (shape.size() != 3) {
    size_t features = 1;
    for (size_t d : shape) features *= d;
    return what + " (records of shape channels x height x width: IDX, or .npy of shape (N, H, W) or (N, C, H, W)); "
                  "these records are vectors of " +
           std::to_string(features) + " features";
  }
  const size_t limit = std::min(shape[1], shape[2]);
  if (static_cast<size_t>(options.shift) >= limit) {
    return "--augment-shift " + std::to_string(options.shift) + " moves an image of " + std::to_string(shape[1]) + "x" +
           std::to_string(shape[2]) + " pixels out of itself: it must be less than " + std::to_string(limit);
  }
  return "";
}

AugmentDraw augment_draw(const AugmentOptions& options, uint64_t epoch, uint64_t record) {
  // mix_id (SplitMix64's finaliser) of a key of the three: the same bits wherever it is read.
  const uint64_t u = mix_id(mix_id(options.seed ^ 0x6175676d656e74ULL) ^ mix_id(epoch) ^ record);
  AugmentDraw d;
  d.flip = options.flip && (u & 1) != 0;
  if (options.shift > 0) {
    const uint64_t span = 2 * static_cast<uint64_t>(options.shift) + 1;
    d.dx = static_cast<int>((u >> 8) % span) - options.shift;
    d.dy = static_cast<int>((u >> 32) % span) - options.shift;
  }
  return d;
}

void augment_batch(const AugmentOptions& options, const std::vector<size_t>& shape, uint64_t epoch,
                   const uint64_t* records, size_t n, float* x, std::vector<float>* scratch) {
  if (!options.any()) return;
  PSTRAIN_CHECK_EQ(shape.size(), size_t{3});
  const size_t channels = shape[0], h = shape[1], w = shape[2], plane = h * w, size = channels * plane;
  scratch->resize(size);
  for (size_t i = 0; i < n; ++i) {
    const AugmentDraw d = augment_draw(options, epoch, records[i]);
    if (!d.flip && d.dx == 0 && d.dy == 0) continue;
    float* image = x + i * size;
    std::copy(image, image + size, scratch->begin());
    const float* in = scratch->data();
    for (size_t c = 0; c < channels; ++c) {
      for (size_t y = 0; y < h; ++y) {
        const long sy = static_cast<long>(y) - d.dy;
        for (size_t col = 0; col < w; ++col) {
          const long sx0 = static_cast<long>(col) - d.dx;  // the column of the mirrored image
          const bool inside = sy >= 0 && sy < static_cast<long>(h) && sx0 >= 0 && sx0 < static_cast<long>(w);
          float v = 0.0f;
          if (inside) {
            const size_t sx = d.flip ? w - 1 - static_cast<size_t>(sx0) : static_cast<size_t>(sx0);
            v = in[c * plane + static_cast<size_t>(sy) * w + sx];
          }
          image[c * plane + y * w + col] = v;
        }
      }
    }
  }
}

}  // namespace pstrain
