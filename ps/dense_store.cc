#include "ps/dense_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "ps/dense_chunk.h"
#include "ps/metrics.h"
#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"
#include "shared/util/numeric.h"

namespace pstrain {

namespace {

constexpr size_t kApplyBlock = 4096;  // floats summed and updated at a time (16 KiB: in L1)

std::string slice_text(uint64_t offset, uint64_t length) {
  return "[" + std::to_string(offset) + ", +" + std::to_string(length) + ")";
}

bool every_worker_every_step(const ConsistencyPolicy& policy, int num_workers) {
  return policy.quorum() == num_workers &&
         (policy.mode() == Mode::kSync || (policy.mode() == Mode::kSsp && policy.window() == 0));
}

}  // namespace

DenseStore::DenseStore(const ServerOptions& options, const ConsistencyPolicy& policy, const JobShape& job,
                       bool hold_steps)
    : options_(options),
      policy_(policy),
      job_(job),
      slice_(balance_slices(job.total, options.num_ps)[static_cast<size_t>(options.index)]),
      chunk_len_(std::max<size_t>(1, static_cast<size_t>(options.chunk_kib) * 1024 / sizeof(float))),
      unreported_(static_cast<size_t>(options.num_workers)),
      clock_of_(static_cast<size_t>(options.num_workers), 0),
      ordered_sums_(every_worker_every_step(policy, options.num_workers)),
      held_steps_(hold_steps),
      held_pushes_(static_cast<size_t>(options.num_workers), 0),
      shared_area_(ordered_sums_ && policy.mode() == Mode::kSync && !options.allow_rejoin),
      clipping_(options.optimizer.clip_norm > 0 && policy.mode() == Mode::kSync) {
  for (size_t local = 0; local < slice_.length; local += chunk_len_) {
    Chunk c;
    c.local = local;
    c.range = Slice{slice_.offset + local, std::min(chunk_len_, slice_.length - local)};
    c.values = std::make_shared<std::vector<float>>(c.range.length, 0.0f);
    chunks_.push_back(std::move(c));
  }
  optimizer_ = make_optimizer(options_.optimizer, slice_.length);
}

DenseStore::~DenseStore() = default;

size_t DenseStore::parts() const { return chunks_.size(); }

uint64_t DenseStore::version() const {
  uint64_t v = UINT64_MAX;
  for (const Chunk& c : chunks_) v = std::min(v, c.version);
  return chunks_.empty() ? 0 : v;
}

std::vector<float> DenseStore::values() const {
  std::vector<float> out;
  for (const Chunk& c : chunks_) out.insert(out.end(), c.data(), c.data() + c.range.length);
  return out;
}

std::string DenseStore::shape_text() const {
  std::ostringstream os;
  os << "model has " << job_.total << " parameters; this shard holds " << slice_text(slice_.offset, slice_.length)
     << " = " << slice_.length * sizeof(float) / 1024.0 << " KiB in " << chunks_.size() << " chunk(s)";
  return os.str();
}

// The step `worker` runs next against this shard: the version of the least advanced chunk, or
// one more when the worker's gradient for that step is already in every chunk (applied, or
// waiting in the barrier): a replacement then does not redo a step its predecessor finished.
uint64_t DenseStore::next_step_of(int worker, bool rejoined) const {
  // async's versions count updates, not steps: each worker runs its own steps from 0, however
  // late it registers (async refuses --resume and --allow-rejoin: a HELLO is a worker's first).
  if (policy_.mode() == Mode::kAsync) return 0;
  const uint64_t t = version();
  if (!rejoined || chunks_.empty()) return t;
  for (const Chunk& c : chunks_) {
    if (c.version == t && !has_pushed(c, worker)) return t;
  }
  return t + 1;
}

bool DenseStore::has_pushed(const Chunk& c, int worker) {
  return !c.pending.empty() && c.pending.front().pushed[static_cast<size_t>(worker)];
}

// A replacement redoes the step its predecessor may have pushed already: those pushes (and a
// replaced chief's INIT) are repeats of what the PS holds, dropped without touching any state.
bool DenseStore::is_repeat(const Chunk& c, int worker, uint64_t step, bool rejoined) const {
  if (!rejoined) return false;
  return step + 1 == c.version || (step == c.version && has_pushed(c, worker));
}

DenseStore::Chunk* DenseStore::find_chunk(const Header& h, std::string* error) {
  if (h.offset >= slice_.offset && h.offset < slice_.end() && (h.offset - slice_.offset) % chunk_len_ == 0) {
    Chunk& c = chunks_[(h.offset - slice_.offset) / chunk_len_];
    if (c.range.length == h.length) return &c;
  }
  *error = "slice " + slice_text(h.offset, h.length) + " is not a chunk of this shard's " +
           slice_text(slice_.offset, slice_.length) + " (chunks of " + std::to_string(chunk_len_) + ")";
  return nullptr;
}

bool DenseStore::init(const Update& u, Outcome* out, std::string* error) {
  const Header& h = u.header;
  if (h.sender != 0) return (*error = "only the chief (worker 0) initialises parameters", false);
  Chunk* c = find_chunk(h, error);
  if (c == nullptr) return false;
  if (c->initialized && u.rejoined) return true;  // a replaced chief's INIT: already applied
  if (c->initialized) return (*error = "parameters are already initialised", false);
  const float* values = u.payload->data_as<float>();
  if (!all_finite(values, c->range.length)) return (*error = "initial values are not all finite", false);
  std::memcpy(c->data(), values, c->range.length * sizeof(float));
  c->initialized = true;
  *out = Outcome{true, true, static_cast<size_t>(c - chunks_.data())};
  return true;
}

bool DenseStore::push(const Update& u, Outcome* out, std::string* error) {
  const Header& h = u.header;
  Chunk* c = find_chunk(h, error);
  if (c == nullptr) return false;
  if (!c->initialized) return (*error = "push before the parameters were initialised", false);
  const int worker = u.worker;
  if (is_repeat(*c, worker, h.step, u.rejoined)) return true;
  const uint64_t ahead = h.step >= c->version ? h.step - c->version : UINT64_MAX;
  const bool already = ahead < c->pending.size() && c->pending[ahead].pushed[static_cast<size_t>(worker)];
  const PushVerdict verdict = policy_.check_push(worker, h.step, h.based_on, c->version, already);
  if (verdict.kind == PushVerdict::kReject) return (*error = verdict.reason, false);
  if (verdict.kind == PushVerdict::kDrop) {  // backup workers: its step was applied without it
    ++c->dropped;
    if (c == &chunks_[0]) ++dropped_;
    return true;
  }
  // Backup workers: a late push for a step that has its quorum and waits only for its norm.
  if (clipping_ && ahead == 0 && !c->pending.empty() && c->pending.front().summed) {
    ++c->dropped;
    if (c == &chunks_[0]) ++dropped_;
    return true;
  }
  if (worker == 0 && h.checkpoint != 0 && h.checkpoint != h.step + 1) {
    return (*error = "checkpoint of version " + std::to_string(h.checkpoint) + " asked in a push for step " +
                     std::to_string(h.step), false);
  }
  if (h.samples == 0) return (*error = "push with zero samples", false);
  const float* grad = !payload_in_shared_memory(h) ? u.payload->data_as<float>()
                      : u.segment != nullptr       ? u.segment + c->local
                                                   : nullptr;
  if (grad == nullptr) return (*error = "push from shared memory, but this worker's segment is not mapped here", false);
  if (!all_finite(grad, c->range.length)) return (*error = "gradient is not all finite", false);

  // Every check passed: only now is state touched.
  add(*c, verdict.slot, u, grad);
  // Steps are applied in order, each once its quorum pushed it.
  *out = Outcome{true, false, static_cast<size_t>(c - chunks_.data())};
  if (held_steps_) {  // applied once the loop names the step's workers (apply_step)
    ++held_pushes_[static_cast<size_t>(worker)];
    return true;
  }
  if (clipping_) {
    if (c->pending.front().pushes >= policy_.quorum()) sum_step(out);
    return true;
  }
  while (!c->pending.empty() && c->pending.front().pushes >= policy_.quorum()) {
    apply(*c, c->pending.front());
    c->pending.erase(c->pending.begin());
    out->advanced = true;
  }
  return true;
}

// Adds a checked push to pending step version + `slot` of its chunk.
void DenseStore::add(Chunk& c, uint64_t slot, const Update& u, const float* grad) {
  const Header& h = u.header;
  while (c.pending.size() <= slot) {
    c.pending.emplace_back();
    c.pending.back().pushed.assign(static_cast<size_t>(options_.num_workers), false);
  }
  Pending& p = c.pending[slot];
  if (p.pushes == 0) p.waiting_since = Clock::now();
  add_metrics(&p.metrics, h, p.pushes);
  if (policy_.mode() != Mode::kSync) {
    // The update lands on version + slot; the gradient was computed on based_on.
    const uint64_t stale = ConsistencyPolicy::staleness(c.version + slot, h.based_on);
    p.metrics.stale_sum += stale;
    ++p.metrics.stale_count;
    p.metrics.stale_max = std::max(p.metrics.stale_max, stale);
  }
  if (policy_.mode() == Mode::kSsp && &c == &chunks_[0]) p.metrics.lead_max = std::max(p.metrics.lead_max, lead(u.worker, h.step));
  keep(p, u, grad, c.range.length);
  p.pushed[static_cast<size_t>(u.worker)] = true;
}

// The push's gradient: kept in worker order (ordered_sums_), or summed into the step's first.
void DenseStore::keep(Pending& p, const Update& u, const float* grad, size_t n) {
  const Header& h = u.header;
  if (ordered_sums_ || held_steps_) {
    const auto at = std::find_if(p.sources.begin(), p.sources.end(), [&](const Source& s) { return s.worker > u.worker; });
    Source& source = *p.sources.emplace(at);
    source.worker = u.worker;
    source.loss_sum = h.loss_sum;
    source.eval_loss = h.eval_loss;
    if (held_steps_) source.header = h;
    if (payload_in_shared_memory(h)) {
      source.shm = grad;  // the worker writes its next gradient there only after this step's PARAMS
    } else {
      source.frame = std::move(*u.payload);
    }
    ++p.pushes;
  } else if (p.pushes++ == 0) {
    if (payload_in_shared_memory(h)) {
      p.accum = Frame(grad, n * sizeof(float));  // the worker writes its next gradient there
    } else {
      p.accum = std::move(*u.payload);
    }
  } else {
    add_into(p.accum.data_as<float>(), grad, n);
  }
}

// ssp, at a push of `step` by `worker` to this shard's first chunk: how many steps the worker is
// ahead of the slowest one (whose clock is the number of steps it pushed), as the PS sees it.
uint64_t DenseStore::lead(int worker, uint64_t step) {
  const uint64_t slowest = *std::min_element(clock_of_.begin(), clock_of_.end());
  clock_of_[static_cast<size_t>(worker)] = step + 1;
  const uint64_t ahead = step > slowest ? step - slowest : 0;
  lead_max_ = std::max(lead_max_, ahead);
  return ahead;
}

void DenseStore::apply(Chunk& c, Pending& p, double clip_factor) {
  make_writable(c);
  // async applies N updates where sync applies one: its schedule runs over N times the steps.
  const uint64_t schedule_steps = policy_.mode() == Mode::kAsync
                                      ? job_.total_steps * static_cast<uint64_t>(options_.num_workers)
                                      : job_.total_steps;
  // The gradient sums are divided by the samples behind them (a mean gradient), except in async,
  // where each push is one update weighted by its samples: divided by the mean share G / N, so a
  // worker of half the mean share moves the parameters half as far (equal shares: its mean).
  const float scale = policy_.mode() == Mode::kAsync
                          ? static_cast<float>(options_.num_workers) / static_cast<float>(job_.global_batch)
                          : clipped_scale(1.0f / static_cast<float>(p.metrics.samples), clip_factor);
  const double lr = scheduled_lr(options_.optimizer, c.version, schedule_steps);
  const auto start = Clock::now();
  if (p.summed && !p.sum.empty()) {  // --clip-norm: summed in worker order already (sum_step)
    optimizer_->apply(c.local, c.range.length, c.data(), p.sum.data(), scale, lr, c.version);
  } else if (p.sources.empty()) {
    optimizer_->apply(c.local, c.range.length, c.data(), p.accum.data_as<float>(), scale, lr, c.version);
  } else {
    apply_sources(c, p, scale, lr);
  }
  if (!p.sources.empty()) {
    p.metrics.loss_sum = p.metrics.eval_loss = 0;  // summed again in worker order, as the gradients
    for (const Source& source : p.sources) {
      p.metrics.loss_sum += source.loss_sum;
      p.metrics.eval_loss += source.eval_loss;
    }
  }
  apply_s_ += std::chrono::duration<double>(Clock::now() - start).count();
  ++applies_;
  ++c.version;
  applied(c, p);
}

// Before an update: the values PARAMS in flight hold are left as they are.
void DenseStore::make_writable(Chunk& c) {
  if (options_.allow_rejoin) {
    // Keep version v for a replacement worker; recycle the buffer of v - 1 when nothing holds it.
    auto next = c.previous && c.previous.use_count() == 1 ? std::move(c.previous)
                                                          : std::make_shared<std::vector<float>>(c.range.length);
    std::copy(c.values->begin(), c.values->end(), next->begin());
    c.previous = std::move(c.values);
    c.values = std::move(next);
    c.previous_last = c.last;
  } else if (c.in_area == nullptr && c.values.use_count() > 1) {
    c.values = std::make_shared<std::vector<float>>(*c.values);  // in flight
  }
}

// The update of a step every worker pushed: per block of kApplyBlock floats, the pushes summed in
// worker order and the optimizer's update (element by element, so blocks change
// nothing), while the block is in cache. The values may be in the shared area: every worker
// pushed this step, so none is reading them now.
void DenseStore::apply_sources(Chunk& c, const Pending& p, float scale, double lr) {
  float* values = c.data();
  alignas(64) float sum[kApplyBlock];
  for (size_t b = 0; b < c.range.length; b += kApplyBlock) {
    const size_t len = std::min(kApplyBlock, c.range.length - b);
    std::memcpy(sum, p.sources[0].data() + b, len * sizeof(float));
    for (size_t k = 1; k < p.sources.size(); ++k) add_into(sum, p.sources[k].data() + b, len);
    optimizer_->apply(c.local + b, len, values + b, sum, scale, lr, c.version);
  }
}

// After an update: the metrics PARAMS report, and the mode's counters.
void DenseStore::applied(Chunk& c, const Pending& p) {
  c.last = p.metrics;
  c.last.dropped = c.dropped;
  c.dropped = 0;
  if (policy_.mode() != Mode::kSync && &c == &chunks_[0]) {
    for (Header& u : unreported_) merge_metrics(&u, p.metrics);
  }
  if (policy_.mode() == Mode::kAsync && &c == &chunks_[0]) {
    stale_sum_ += p.metrics.stale_sum;
    stale_count_ += p.metrics.stale_count;
    stale_max_ = std::max(stale_max_, p.metrics.stale_max);
  }
}

std::string DenseStore::check_pull(uint64_t want) const {
  for (const Chunk& c : chunks_) {
    if (policy_.check_pull(want, c.version) == PullVerdict::kReject) {
      return "pull for version " + std::to_string(want) + " while at version " + std::to_string(c.version);
    }
  }
  return "";
}

bool DenseStore::ready(size_t part, uint64_t want) const {
  const Chunk& c = chunks_[part];
  return c.initialized && policy_.check_pull(want, c.version) == PullVerdict::kAnswerNow;
}

// A replacement redoing a step may want the version before the chunk's (kept with --allow-rejoin).
bool DenseStore::previous(const Chunk& c, uint64_t want) const {
  return want + 1 == c.version && c.previous != nullptr;
}

Header DenseStore::params_header(size_t part, uint64_t want, int worker) {
  const Chunk& c = chunks_[part];
  Header h = previous(c, want) ? c.previous_last : c.last;
  if (policy_.mode() != Mode::kSync && part == 0 && worker >= 0) {
    // async and ssp: everything applied since this worker's last PARAMS (versions may be skipped).
    Header& u = unreported_[static_cast<size_t>(worker)];
    h = u;
    u = Header{};
  }
  h.op = Op::kParams;
  h.step = previous(c, want) ? want : c.version;
  h.offset = c.range.offset;
  h.length = c.range.length;
  return h;
}

// The chunk that has waited longest for its barrier, if any.
bool DenseStore::oldest_barrier(Barrier* out) const {
  const Chunk* stalled = nullptr;
  for (const Chunk& c : chunks_) {
    // (a step with all its pushes waits only for its norm: --clip-norm)
    if (!c.pending.empty() && c.pending.front().pushes > 0 && !c.pending.front().summed &&
        (stalled == nullptr || c.pending.front().waiting_since < stalled->pending.front().waiting_since)) {
      stalled = &c;
    }
  }
  if (stalled == nullptr) return false;
  *out = Barrier{stalled->version, stalled->pending.front().waiting_since, stalled->pending.front().pushed};
  return true;
}

// What the mode's own counters say, for the last log line: ssp's largest lead (never more than
// the staleness), async's staleness, backup workers' dropped pushes.
std::string DenseStore::counters_text() const {
  std::ostringstream os;
  if (policy_.mode() == Mode::kSsp) {
    os << "; ssp: the largest lead of a worker over the slowest was " << lead_max_ << " step(s) (staleness "
       << options_.staleness << ")";
  }
  if (policy_.mode() == Mode::kAsync && stale_count_ > 0) {
    os << "; async: staleness mean " << static_cast<double>(stale_sum_) / static_cast<double>(stale_count_) << " max "
       << stale_max_ << " over " << stale_count_ << " updates";
  }
  if (options_.backup_workers > 0) os << "; late pushes dropped: " << dropped_;
  if (clipping_) {
    os << "; --clip-norm " << options_.optimizer.clip_norm << ": " << clipped_steps_ << " of " << clip_steps_
       << " step(s) scaled down; gradient norm " << smallest_norm_ << " to " << largest_norm_
       << " (this shard's part at most " << largest_part_ << ")";
  }
  if (applies_ > 0) {
    os << "; " << applies_ << " chunk update(s), " << std::fixed << std::setprecision(1)
       << 1e6 * apply_s_ / static_cast<double>(applies_) << " us each";
  }
  return os.str();
}

// This shard's slice and optimizer state, for a checkpoint of version().
void DenseStore::save(ShardCheckpoint* c) const {
  c->total = job_.total;
  c->total_steps = job_.total_steps;
  c->offset = slice_.offset;
  c->values = values();
  for (const std::vector<float>* slot : optimizer_->state()) c->slots.push_back(*slot);
}

// --resume, at the first HELLO (when the model's size is known): every chunk at the version of
// the newest usable checkpoint, with its values and optimizer state. The file's tables stay in
// *loaded for the shard's tables (ps/sparse_service.h); its values and slots are let go.
bool DenseStore::resume(const CheckpointStore& files, ShardCheckpoint* loaded, std::string* error) {
  const auto slots = optimizer_->state();
  ShardCheckpoint& c = *loaded;
  if (!files.load(job_.total, job_.total_steps, slice_, slots.size(), &c, error)) return false;
  for (size_t k = 0; k < slots.size(); ++k) *slots[k] = c.slots[k];
  for (Chunk& chunk : chunks_) {
    std::copy(c.values.begin() + static_cast<long>(chunk.local),
              c.values.begin() + static_cast<long>(chunk.local + chunk.range.length), chunk.data());
    chunk.version = c.version;
    chunk.initialized = true;
  }
  std::vector<float>().swap(c.values);  // the slice's copy is in the chunks now
  std::vector<std::vector<float>>().swap(c.slots);
  return true;
}

}  // namespace pstrain
