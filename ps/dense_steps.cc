// DenseStore's steps applied whole rather than chunk by chunk: held steps (--backup-workers with
// tables: the loop names the step's workers, ps/step_gate.h) and --clip-norm in sync (the
// shard's part of the squares, then the clipped apply once the whole norm is known).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ps/dense_chunk.h"
#include "ps/metrics.h"
#include "shared/util/error.h"
#include "shared/util/numeric.h"

namespace pstrain {

bool DenseStore::pushed_every_chunk(int worker) const {
  return held_pushes_[static_cast<size_t>(worker)] == chunks_.size();
}

uint64_t DenseStore::apply_step(const std::vector<bool>& workers, Outcome* out) {
  PSTRAIN_CHECK(held_steps_);
  uint64_t samples = 0;
  for (Chunk& c : chunks_) {
    PSTRAIN_CHECK(!c.pending.empty());
    Pending& p = c.pending.front();
    const auto late = std::remove_if(p.sources.begin(), p.sources.end(),
                                     [&](const Source& s) { return !workers[static_cast<size_t>(s.worker)]; });
    const auto dropped = static_cast<uint64_t>(p.sources.end() - late);
    p.sources.erase(late, p.sources.end());
    c.dropped += dropped;
    if (&c == &chunks_[0]) dropped_ += dropped;
    p.pushes = 0;  // the step's metrics: its workers' pushes only, in worker order
    for (const Source& source : p.sources) add_metrics(&p.metrics, source.header, p.pushes++);
    PSTRAIN_CHECK(!p.sources.empty());
    samples = p.metrics.samples;
    apply(c, p);
    c.pending.erase(c.pending.begin());
  }
  held_pushes_.assign(held_pushes_.size(), 0);
  *out = Outcome{true, true, 0, true, false};
  return samples;
}

// --clip-norm: a chunk's step has all its pushes. Once every chunk's has, the shard's part of the
// squares is known: with one shard the step is applied at once, else it waits for a CLIP.
void DenseStore::sum_step(Outcome* out) {
  for (const Chunk& c : chunks_) {
    if (c.pending.empty() || c.pending.front().pushes < policy_.quorum()) return;
  }
  ExactSquares part;
  for (Chunk& c : chunks_) {
    Pending& p = c.pending.front();
    if (!p.sources.empty()) {  // in worker order, as apply_sources sums them
      p.sum.assign(p.sources[0].data(), p.sources[0].data() + c.range.length);
      for (size_t k = 1; k < p.sources.size(); ++k) add_into(p.sum.data(), p.sources[k].data(), c.range.length);
      part.add(p.sum.data(), c.range.length);
    } else {
      part.add(p.accum.data_as<float>(), c.range.length);
    }
    p.summed = true;
  }
  const uint64_t samples = chunks_.empty() ? 0 : chunks_[0].pending.front().metrics.samples;
  if (samples > 0) largest_part_ = std::max(largest_part_, std::sqrt(part.value()) / static_cast<double>(samples));
  if (options_.num_ps == 1) {
    apply_clipped(part);
    out->advanced = out->every_part = true;
    return;
  }
  clip_wait_ = true;
  clip_step_ = chunks_.empty() ? 0 : chunks_[0].version;
  clip_part_ = part;
  out->norm_ready = true;
}

void DenseStore::apply_clipped(const ExactSquares& total) {
  const uint64_t samples = chunks_.empty() ? 0 : chunks_[0].pending.front().metrics.samples;
  const double factor = clip_factor(total, samples, options_.optimizer.clip_norm);
  const double norm = samples > 0 ? std::sqrt(total.value()) / static_cast<double>(samples) : 0.0;
  smallest_norm_ = clip_steps_ == 0 ? norm : std::min(smallest_norm_, norm);
  largest_norm_ = std::max(largest_norm_, norm);
  ++clip_steps_;
  if (factor < 1.0) ++clipped_steps_;
  for (Chunk& c : chunks_) {
    apply(c, c.pending.front(), factor);
    c.pending.erase(c.pending.begin());
  }
  clip_wait_ = false;
}

bool DenseStore::awaiting_clip(uint64_t* step, ExactSquares* part) const {
  if (!clip_wait_) return false;
  *step = clip_step_;
  *part = clip_part_;
  return true;
}

bool DenseStore::clip(uint64_t step, const ExactSquares& total, Outcome* out, std::string* error) {
  *out = Outcome{};
  if (!clipping_ || options_.num_ps == 1) {
    return (*error = "CLIP, but this shard does not wait for other shards' norms (--clip-norm with several shards, sync)", false);
  }
  // Every worker sends the CLIP of a step; the first applies it, and the others may come later
  // still (a worker that got its PARAMS before its own NORMs sends one for an applied step).
  if (step < version()) return true;
  if (!clip_wait_) {
    return (*error = "CLIP for step " + std::to_string(step) + ", which this shard has not summed (at version " +
                     std::to_string(version()) + ")", false);
  }
  if (step != clip_step_) {
    return (*error = "CLIP for step " + std::to_string(step) + " while step " + std::to_string(clip_step_) +
                     " waits for its norm", false);
  }
  if (!std::isfinite(total.value()) || total.value() < clip_part_.value()) {
    return (*error = "CLIP's sum of squares is smaller than this shard's own part of it", false);
  }
  apply_clipped(total);
  out->changed = out->advanced = out->every_part = true;
  return true;
}

}  // namespace pstrain
