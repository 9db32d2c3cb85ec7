// Training-set augmentation of images (--augment-flip, --augment-shift K): each training record
// is mirrored left-right with probability 1/2 and moved by (dx, dy) in [-K, K]^2, the pixels
// moved in from outside the image 0. What a record gets is a pure function of (seed, epoch,
// record index), never of the worker reading it or the record's place in a batch, so N workers
// still equal one process on the concatenated batch (the mirrored contract), and a resumed or
// replaced worker reads the same images. Test and evaluation data are never augmented.
// docs/models.md, "Augmentation".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shared/train/augment_options.h"

namespace pstrain {

// The reason augmentation cannot apply to records of `shape` (the dataset's sample_shape(): it
// needs {channels, height, width} images, wider and taller than the shift), or "".
std::string augment_refusal(const AugmentOptions& options, const std::vector<size_t>& shape);

// Record `record`'s transform in epoch `epoch`: mirrored or not, and its move.
struct AugmentDraw {
  bool flip = false;
  int dx = 0, dy = 0;  // the output's pixel (y, x) is the (mirrored) input's (y - dy, x - dx)
};
AugmentDraw augment_draw(const AugmentOptions& options, uint64_t epoch, uint64_t record);

// Augments n records in place: x holds them one after another, each of `shape` ({C, H, W}),
// records[i] the index of the i-th. `scratch` is reused between calls.
void augment_batch(const AugmentOptions& options, const std::vector<size_t>& shape, uint64_t epoch,
                   const uint64_t* records, size_t n, float* x, std::vector<float>* scratch);

}  // namespace pstrain
