// Gradient clipping by global norm (--clip-norm, docs/models.md "Gradient clipping"). A step's
// gradient is held in pieces (the PS shards' slices and their chunks; the whole vector in
// allreduce mode): its norm must not depend on how it is cut, or the same job would give other
// bits on another shard count. ExactSquares sums squares exactly: a float's square fits a double's
// mantissa (48 of 53 bits), and the sum goes into a 640-bit fixed-point integer, so the total is
// the same however the pieces are grouped and in whatever order they are added; it is rounded
// once, at the end.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace pstrain {

class ExactSquares {
 public:
  static constexpr size_t kLimbs = 10;  // 640 bits: squares reach bit 554, and 2^80 of them fit

  void add(const float* values, size_t n);  // += values[i]^2 (finite values)
  void merge(const ExactSquares& other);    // += other's sum
  double value() const;                     // the sum, rounded to a double
  bool zero() const;

  // On the wire (NORM and CLIP, docs/wire_protocol.md): the limbs, least significant first.
  const std::array<uint64_t, kLimbs>& limbs() const { return limbs_; }
  static ExactSquares from_limbs(const uint64_t* limbs);  // kLimbs of them, aligned
  static ExactSquares from_bytes(const void* bytes);      // the same as a frame holds them (any alignment)
  bool operator==(const ExactSquares& o) const { return limbs_ == o.limbs_; }

 private:
  void add_at(size_t limb, uint64_t value);
  std::array<uint64_t, kLimbs> limbs_{};  // the sum times 2^298 (the smallest square's weight)
};

// The factor a step's update is scaled by under --clip-norm C: min(1, C / norm), the norm being
// that of the mean gradient, sqrt(squares of the summed gradient) / samples. 1 when C is 0.
double clip_factor(const ExactSquares& squares_of_sum, uint64_t samples, double clip_norm);
// The optimizer's gradient scale (1 / samples) times the factor; unchanged when the factor is 1,
// so a step that is not clipped gives the bits of a job without --clip-norm.
float clipped_scale(float scale, double factor);

}  // namespace pstrain
