#include "ps/server.h"

#include <algorithm>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "shared/error.h"
#include "shared/file_util.h"
#include "shared/log.h"
#include "shared/numeric.h"

namespace pstrain {

// One push's gradient kept until its step is applied (ordered sums, see ordered_sums_): in the
// worker's segment, or the push's own payload frame.
struct ParameterServer::Source {
  int worker = 0;
  const float* shm = nullptr;  // in the worker's segment (else `frame`)
  zmq::message_t frame;
  double loss_sum = 0, eval_loss = 0;  // the push's sums that rounding makes order-dependent
  const float* data() const { return shm != nullptr ? shm : frame.data<float>(); }
};

struct ParameterServer::Pending {  // one step of a chunk that pushes are adding up for
  // Gradient sum: the first push's own message, the others added into it (a received message is
  // ours to write), so no push is ever copied.
  zmq::message_t accum;
  // Instead of accum where every worker pushes every step (ordered_sums_): the pushes in worker
  // order, whatever order they arrived in, summed in that order by apply() block by block, fused
  // with the update. So the same job always gives the same bits (docs/operations.md).
  std::vector<Source> sources;
  int pushes = 0;
  std::vector<bool> pushed;  // by worker
  Clock::time_point waiting_since;
  Header metrics;            // summed over its pushes (sent with PARAMS once applied)
};

struct ParameterServer::Chunk {
  Slice range;       // in the flat vector
  size_t local = 0;  // offset within the slice (and the optimizer's state)
  // Shared with PARAMS messages ZeroMQ has not sent yet: apply() copies it first if it is in use.
  // Null once the values moved into the shard's parameter area (in_area).
  std::shared_ptr<std::vector<float>> values;
  float* in_area = nullptr;  // the chunk's values in ParameterServer::area_ (plain sync, same host)
  float* data() { return in_area != nullptr ? in_area : values->data(); }
  const float* data() const { return in_area != nullptr ? in_area : values->data(); }
  bool initialized = false;
  uint64_t version = 0;
  // The steps version, version + 1, ... that pushes arrived for (more than one only in ssp).
  std::vector<Pending> pending;  // a vector (a deque's move may throw, which vector<Chunk> refuses)
  Header last;           // metrics of the last applied step (sent with PARAMS in sync)
  uint64_t dropped = 0;  // late pushes dropped since the last step was applied (backup workers)
  // --allow-rejoin: the values and metrics of version - 1, for a replacement worker that redoes
  // the step its predecessor had pushed this chunk for (see next_step_of).
  std::shared_ptr<std::vector<float>> previous;
  Header previous_last;
};

struct ParameterServer::Parked {  // a PULL waiting for chunks to reach its version
  std::string route;
  uint64_t request_id;
  uint64_t want;
  std::vector<bool> sent;
  size_t left;
  uint64_t shm;  // 1: the parameters go into the worker's segment; 2: it reads the area (PULL's shm)
};

namespace {

constexpr double kCloseSeconds = 5;
constexpr size_t kApplyBlock = 4096;  // floats summed and updated at a time (16 KiB: in L1)

std::string printable(const std::string& route) {
  std::ostringstream os;
  os << "peer 0x";
  const char* hex = "0123456789abcdef";
  for (unsigned char c : route) os << hex[c >> 4] << hex[c & 15];
  return os.str();
}

// ZeroMQ may place a small frame anywhere in its receive buffer; the PS reads (and accumulates
// into) payloads as floats, so a misaligned one is moved to a fresh, aligned allocation. Large
// frames get their own allocation from ZeroMQ and are never copied here.
void align_payload(zmq::message_t* frame) {
  if (reinterpret_cast<uintptr_t>(frame->data()) % alignof(float) == 0) return;
  zmq::message_t aligned(frame->data(), frame->size());
  frame->swap(aligned);
}

std::string slice_text(uint64_t offset, uint64_t length) {
  return "[" + std::to_string(offset) + ", +" + std::to_string(length) + ")";
}

// The sums a PARAMS reports: the training step's samples, loss and correct predictions, the test
// set's evaluated shares, the step times.
void add_sums(Header* sum, const Header& h) {
  sum->samples += h.samples;
  sum->loss_sum += h.loss_sum;
  sum->correct += h.correct;
  sum->eval_samples += h.eval_samples;
  sum->eval_loss += h.eval_loss;
  sum->eval_correct += h.eval_correct;
  sum->times += h.times;
}

// Adds the metrics of applied updates to what a worker has not been sent yet (async, ssp).
void merge_metrics(Header* sum, const Header& m) {
  add_sums(sum, m);
  if (m.slowest_us > sum->slowest_us) {
    sum->slowest = m.slowest;
    sum->slowest_us = m.slowest_us;
  }
  sum->stale_sum += m.stale_sum;
  sum->stale_count += m.stale_count;
  sum->stale_max = std::max(sum->stale_max, m.stale_max);
  sum->lead_max = std::max(sum->lead_max, m.lead_max);
  sum->dropped += m.dropped;
}

// Adds a push's metrics and step times to the pending sums of its chunk.
void add_metrics(Header* sum, const Header& h, int pushes) {
  if (pushes == 0) {
    *sum = Header{};
    sum->slowest = h.sender;
    sum->slowest_us = h.times.busy_us();
  } else if (h.times.busy_us() > sum->slowest_us) {
    sum->slowest = h.sender;
    sum->slowest_us = h.times.busy_us();
  }
  add_sums(sum, h);
}

}  // namespace

ParameterServer::ParameterServer(const JobOptions& options, Endpoint& endpoint)
    : options_(options),
      endpoint_(endpoint),
      policy_(options),
      members_(options_, policy_),
      unreported_(static_cast<size_t>(options.num_workers)),
      clock_of_(static_cast<size_t>(options.num_workers), 0),
      checkpointer_(options_, "ps" + std::to_string(options.index)),
      ordered_sums_(policy_.quorum() == options.num_workers &&
                    (policy_.mode() == ModeCode::kSync || (policy_.mode() == ModeCode::kSsp && policy_.window() == 0))),
      shared_area_(ordered_sums_ && policy_.mode() == ModeCode::kSync && !options.allow_rejoin) {}

ParameterServer::~ParameterServer() = default;

uint64_t ParameterServer::version() const {
  uint64_t v = UINT64_MAX;
  for (const Chunk& c : chunks_) v = std::min(v, c.version);
  return chunks_.empty() ? 0 : v;
}

std::vector<float> ParameterServer::params() const {
  std::vector<float> out;
  for (const Chunk& c : chunks_) out.insert(out.end(), c.data(), c.data() + c.range.length);
  return out;
}

void ParameterServer::serve() {
  PSLOG(INFO) << "ps" << options_.index << ": serving at " << endpoint_.address()
              << (options_.ipc.empty() ? "" : " and ipc://" + options_.ipc) << ", mode "
              << mode_text() << ", " << options_.num_workers << " worker(s), optimizer "
              << options_.optimizer.kind << " lr " << options_.optimizer.lr;
  last_stall_report_ = Clock::now();
  Message msg;
  while (!members_.all_done()) {
    const auto tick = deadline_after(std::min(1.0, options_.stall_report_s));
    if (endpoint_.recv(&msg, tick)) handle(msg);
    report_stall();
  }
  PSLOG(INFO) << "ps" << options_.index << ": all " << options_.num_workers
              << " workers done at version " << version() << counters_text() << "; peak_rss_kib=" << peak_rss_kib() << " " << cpu_usage_text()
              << "; exiting";
  endpoint_.close(deadline_after(kCloseSeconds));  // lets the last DONE acknowledgement leave
}

void ParameterServer::handle(Message& msg) {
  Header h;
  std::string error;
  if (msg.frames.empty() ||
      !decode_header(msg.frames[0].data(), msg.frames[0].size(), &h, &error)) {
    return reject(msg.route, 0, error.empty() ? "empty message" : error);
  }
  const size_t payload = msg.frames.size() > 1 ? msg.frames[1].size() : 0;
  if (!check_frames(h, msg.frames.size(), payload, &error)) return reject(msg.route, h.request_id, error);
  if (payload > 0) align_payload(&msg.frames[1]);
  if (h.role != SenderRole::kWorker) return reject(msg.route, h.request_id, "only workers talk to a PS");
  if (h.op == Op::kHello) return on_hello(msg, h);

  const int worker = members_.worker_of(msg.route);
  if (worker < 0) {
    return reject(msg.route, h.request_id, std::string(op_name(h.op)) + " from a peer that never said HELLO");
  }
  if (worker != static_cast<int>(h.sender)) {
    return reject(msg.route, h.request_id, "sender " + std::to_string(h.sender) +
                                               " does not match registered worker " + std::to_string(worker));
  }
  if (members_.heard_from(worker)) release_area_name();
  bool ok = true;
  switch (h.op) {
    case Op::kInit: ok = on_init(msg, h, &error); break;
    case Op::kPush: ok = on_push(msg, h, &error); break;
    case Op::kPull: ok = on_pull(msg, h, &error); break;
    case Op::kDone: on_done(msg, h); break;
    default: ok = false; error = std::string(op_name(h.op)) + " is not a request"; break;
  }
  if (!ok) reject(msg.route, h.request_id, error);
}

void ParameterServer::on_hello(const Message& msg, const Header& h) {
  std::string why = members_.check_hello(msg.route, h);
  if (why.empty() && !members_.job_known()) start_job(h, &why);
  if (!why.empty()) return reject(msg.route, h.request_id, why);
  const int worker = static_cast<int>(h.sender);
  if (members_.admit(msg.route, worker)) {
    PSLOG(WARN) << "ps" << options_.index << ": worker " << worker << " registered again from a new peer: "
                << "a replacement; it redoes step " << next_step_of(worker);
  }
  if (members_.has_segment(worker)) release_segment(worker);
  if (members_.map_segment(worker, h, slice_.length) && shared_area_ && !area_.mapped()) create_area();
  Header welcome;
  // 2: and the values live in the area named in `message`, which this PS writes only in the
  // apply that the worker's push completes (plain sync): the worker may compute from it.
  welcome.shm = !members_.has_segment(worker) ? 0 : area_.mapped() ? 2 : 1;
  if (welcome.shm == 2) welcome.message = area_.name();
  members_.offered_area(worker, welcome.shm == 2);
  release_area_name();
  welcome.op = Op::kWelcome;
  welcome.request_id = h.request_id;
  welcome.step = next_step_of(worker);
  welcome.offset = slice_.offset;
  welcome.length = slice_.length;
  welcome.total = members_.job().total;
  welcome.chunk = chunk_len_;
  reply(msg.route, welcome, nullptr);
}

// The first HELLO that passed its checks: the model's size is known, the slice is set up (and
// with --resume loaded from the newest checkpoint). False, with the reason, when it cannot be.
bool ParameterServer::start_job(const Header& h, std::string* error) {
  members_.learn_job(h);
  slice_ = balance_slices(members_.job().total, options_.num_ps)[static_cast<size_t>(options_.index)];
  chunk_len_ = std::max<size_t>(1, static_cast<size_t>(options_.chunk_kib) * 1024 / sizeof(float));
  for (size_t local = 0; local < slice_.length; local += chunk_len_) {
    Chunk c;
    c.local = local;
    c.range = Slice{slice_.offset + local, std::min(chunk_len_, slice_.length - local)};
    c.values = std::make_shared<std::vector<float>>(c.range.length, 0.0f);
    chunks_.push_back(std::move(c));
  }
  optimizer_ = make_optimizer(options_.optimizer, slice_.length);
  if (options_.resume && !resume(error)) {
    members_.forget_job();  // not set up: every HELLO gets the same answer
    chunks_.clear();
    PSLOG(ERROR) << "ps" << options_.index << ": " << *error;
    return false;
  }
  PSLOG(INFO) << "ps" << options_.index << ": model has " << members_.job().total << " parameters; this shard holds "
              << slice_text(slice_.offset, slice_.length) << " = " << slice_.length * sizeof(float) / 1024.0
              << " KiB in " << chunks_.size() << " chunk(s)";
  return true;
}

// The step `worker` runs next against this shard: the version of the least advanced chunk, or
// one more when the worker's gradient for that step is already in every chunk (applied, or
// waiting in the barrier): a replacement then does not redo a step its predecessor finished.
uint64_t ParameterServer::next_step_of(int worker) const {
  // async's versions count updates, not steps: each worker runs its own steps from 0, however
  // late it registers (async refuses --resume and --allow-rejoin: a HELLO is a worker's first).
  if (policy_.mode() == ModeCode::kAsync) return 0;
  const uint64_t t = version();
  if (!members_.rejoined(worker) || chunks_.empty()) return t;
  for (const Chunk& c : chunks_) {
    if (c.version == t && !has_pushed(c, worker)) return t;
  }
  return t + 1;
}

bool ParameterServer::has_pushed(const Chunk& c, int worker) {
  return !c.pending.empty() && c.pending.front().pushed[static_cast<size_t>(worker)];
}

// A replacement redoes the step its predecessor may have pushed already: those pushes (and a
// replaced chief's INIT) are repeats of what the PS holds, dropped without touching any state.
bool ParameterServer::is_repeat(const Chunk& c, int worker, uint64_t step) const {
  if (!members_.rejoined(worker)) return false;
  return step + 1 == c.version || (step == c.version && has_pushed(c, worker));
}

ParameterServer::Chunk* ParameterServer::find_chunk(const Header& h, std::string* error) {
  if (h.offset >= slice_.offset && h.offset < slice_.end() && (h.offset - slice_.offset) % chunk_len_ == 0) {
    Chunk& c = chunks_[(h.offset - slice_.offset) / chunk_len_];
    if (c.range.length == h.length) return &c;
  }
  *error = "slice " + slice_text(h.offset, h.length) + " is not a chunk of this shard's " +
           slice_text(slice_.offset, slice_.length) + " (chunks of " + std::to_string(chunk_len_) + ")";
  return nullptr;
}

bool ParameterServer::on_init(const Message& msg, const Header& h, std::string* error) {
  if (h.sender != 0) return (*error = "only the chief (worker 0) initialises parameters", false);
  Chunk* c = find_chunk(h, error);
  if (c == nullptr) return false;
  if (c->initialized && members_.rejoined(0)) return true;  // a replaced chief's INIT: already applied
  if (c->initialized) return (*error = "parameters are already initialised", false);
  const float* values = msg.frames[1].data<float>();
  if (!all_finite(values, c->range.length)) return (*error = "initial values are not all finite", false);
  std::memcpy(c->data(), values, c->range.length * sizeof(float));
  c->initialized = true;
  chunk_advanced(static_cast<size_t>(c - chunks_.data()));
  return true;
}

bool ParameterServer::on_push(Message& msg, const Header& h, std::string* error) {
  Chunk* c = find_chunk(h, error);
  if (c == nullptr) return false;
  if (!c->initialized) return (*error = "push before the parameters were initialised", false);
  const int worker = static_cast<int>(h.sender);
  if (is_repeat(*c, worker, h.step)) return true;
  const uint64_t ahead = h.step >= c->version ? h.step - c->version : UINT64_MAX;
  const bool already = ahead < c->pending.size() && c->pending[ahead].pushed[static_cast<size_t>(worker)];
  const PushVerdict verdict = policy_.check_push(worker, h.step, h.based_on, c->version, already);
  if (verdict.kind == PushVerdict::kReject) return (*error = verdict.reason, false);
  if (verdict.kind == PushVerdict::kDrop) {  // backup workers: its step was applied without it
    ++c->dropped;
    if (c == &chunks_[0]) ++dropped_;
    return true;
  }
  if (worker == 0 && h.checkpoint != 0 && h.checkpoint != h.step + 1) {
    return (*error = "checkpoint of version " + std::to_string(h.checkpoint) + " asked in a push for step " +
                     std::to_string(h.step), false);
  }
  if (h.samples == 0) return (*error = "push with zero samples", false);
  const float* segment = members_.gradient_in_segment(worker);
  const float* grad = !payload_in_shared_memory(h) ? msg.frames[1].data<float>()
                      : segment != nullptr         ? segment + c->local
                                                   : nullptr;
  if (grad == nullptr) return (*error = "push from shared memory, but this worker's segment is not mapped here", false);
  const size_t n = c->range.length;
  if (!all_finite(grad, n)) return (*error = "gradient is not all finite", false);

  // Every check passed: only now is state touched.
  if (worker == 0 && h.checkpoint != 0) checkpoint_at_ = h.checkpoint;  // the chief decides (docs/checkpoints.md)
  if (worker == 0 && h.stop != 0) stop_at_ = h.step + 1;
  while (c->pending.size() <= verdict.slot) {
    c->pending.emplace_back();
    c->pending.back().pushed.assign(static_cast<size_t>(options_.num_workers), false);
  }
  Pending& p = c->pending[verdict.slot];
  if (p.pushes == 0) p.waiting_since = Clock::now();
  add_metrics(&p.metrics, h, p.pushes);
  if (policy_.mode() != ModeCode::kSync) {
    // The update lands on version + slot; the gradient was computed on based_on.
    const uint64_t stale = ConsistencyPolicy::staleness(c->version + verdict.slot, h.based_on);
    p.metrics.stale_sum += stale;
    ++p.metrics.stale_count;
    p.metrics.stale_max = std::max(p.metrics.stale_max, stale);
  }
  if (policy_.mode() == ModeCode::kSsp && c == &chunks_[0]) p.metrics.lead_max = std::max(p.metrics.lead_max, lead(worker, h.step));
  if (ordered_sums_) {
    const auto at = std::find_if(p.sources.begin(), p.sources.end(), [&](const Source& s) { return s.worker > worker; });
    Source& source = *p.sources.emplace(at);
    source.worker = worker;
    source.loss_sum = h.loss_sum;
    source.eval_loss = h.eval_loss;
    if (payload_in_shared_memory(h)) {
      source.shm = grad;  // the worker writes its next gradient there only after this step's PARAMS
    } else {
      source.frame.move(msg.frames[1]);
    }
    ++p.pushes;
  } else if (p.pushes++ == 0) {
    if (payload_in_shared_memory(h)) {
      p.accum.rebuild(grad, n * sizeof(float));  // the worker writes its next gradient there
    } else {
      p.accum.move(msg.frames[1]);
    }
  } else {
    add_into(p.accum.data<float>(), grad, n);
  }
  p.pushed[static_cast<size_t>(worker)] = true;
  // Steps are applied in order, each once its quorum pushed it.
  bool advanced = false;
  while (!c->pending.empty() && c->pending.front().pushes >= policy_.quorum()) {
    apply(*c, c->pending.front());
    c->pending.erase(c->pending.begin());
    advanced = true;
  }
  if (advanced) chunk_advanced(static_cast<size_t>(c - chunks_.data()));
  return true;
}

// ssp, at a push of `step` by `worker` to this shard's first chunk: how many steps the worker is
// ahead of the slowest one (whose clock is the number of steps it pushed), as the PS sees it.
uint64_t ParameterServer::lead(int worker, uint64_t step) {
  const uint64_t slowest = *std::min_element(clock_of_.begin(), clock_of_.end());
  clock_of_[static_cast<size_t>(worker)] = step + 1;
  const uint64_t ahead = step > slowest ? step - slowest : 0;
  lead_max_ = std::max(lead_max_, ahead);
  return ahead;
}

void ParameterServer::apply(Chunk& c, Pending& p) {
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
  // async applies N updates where sync applies one: its schedule runs over N times the steps.
  const uint64_t schedule_steps = policy_.mode() == ModeCode::kAsync
                                      ? members_.job().total_steps * static_cast<uint64_t>(options_.num_workers)
                                      : members_.job().total_steps;
  // The gradient sums are divided by the samples behind them (a mean gradient), except in async,
  // where each push is one update weighted by its samples: divided by the mean share G / N, so a
  // worker of half the mean share moves the parameters half as far (equal shares: its mean).
  const float scale = policy_.mode() == ModeCode::kAsync
                          ? static_cast<float>(options_.num_workers) / static_cast<float>(members_.job().global_batch)
                          : 1.0f / static_cast<float>(p.metrics.samples);
  const double lr = scheduled_lr(options_.optimizer, c.version, schedule_steps);
  const auto start = Clock::now();
  if (p.sources.empty()) {
    optimizer_->apply(c.local, c.range.length, c.data(), p.accum.data<float>(), scale, lr, c.version);
  } else {
    apply_sources(c, p, scale, lr);
    p.metrics.loss_sum = p.metrics.eval_loss = 0;  // summed again in worker order, as the gradients
    for (const Source& source : p.sources) {
      p.metrics.loss_sum += source.loss_sum;
      p.metrics.eval_loss += source.eval_loss;
    }
  }
  apply_s_ += std::chrono::duration<double>(Clock::now() - start).count();
  ++applies_;
  ++c.version;
  c.last = p.metrics;
  c.last.dropped = c.dropped;
  c.dropped = 0;
  if (policy_.mode() != ModeCode::kSync && &c == &chunks_[0]) {
    for (Header& u : unreported_) merge_metrics(&u, p.metrics);
  }
  if (policy_.mode() == ModeCode::kAsync && &c == &chunks_[0]) {
    stale_sum_ += p.metrics.stale_sum;
    stale_count_ += p.metrics.stale_count;
    stale_max_ = std::max(stale_max_, p.metrics.stale_max);
  }
}

// The update of a step every worker pushed: per block of kApplyBlock floats, the pushes summed in
// worker order and the optimizer's update (element by element, so blocks change
// nothing), while the block is in cache. The values may be in the shared area: every worker
// pushed this step, so none is reading them now.
void ParameterServer::apply_sources(Chunk& c, const Pending& p, float scale, double lr) {
  float* values = c.data();
  alignas(64) float sum[kApplyBlock];
  for (size_t b = 0; b < c.range.length; b += kApplyBlock) {
    const size_t len = std::min(kApplyBlock, c.range.length - b);
    std::memcpy(sum, p.sources[0].data() + b, len * sizeof(float));
    for (size_t k = 1; k < p.sources.size(); ++k) add_into(sum, p.sources[k].data() + b, len);
    optimizer_->apply(c.local + b, len, values + b, sum, scale, lr, c.version);
  }
}

// The area's name goes once every worker has registered and each that was offered the area has
// sent a message since (so it has mapped it, or given up on it): nothing is left in /dev/shm, and
// a PS stopped before then removes it too (remove_segments_on_termination, ps/main.cc).
void ParameterServer::release_area_name() {
  if (!area_.owns_name() || !members_.area_settled()) return;
  area_.unlink();
  PSLOG(INFO) << "ps" << options_.index << ": every worker has mapped the parameter area (or uses its own copy); "
              << "its name is removed";
}

// At the first same-host worker's HELLO in plain sync: the shard's values move into a segment
// that same-host workers map read-only (WELCOME shm 2). Not fatal when it cannot be made: the
// workers then get the values copied into their own segments (shm 1).
void ParameterServer::create_area() {
  std::string why;
  if (!SharedMemory::create("pstrain-ps" + std::to_string(options_.index) + "-params", slice_.length * sizeof(float),
                            &area_, &why)) {
    PSLOG(INFO) << "ps" << options_.index << ": no shared parameter area (" << why
                << "): each same-host worker gets its own copy of the values";
    return;
  }
  float* area = static_cast<float*>(area_.data());
  for (Chunk& c : chunks_) {
    std::memcpy(area + c.local, c.data(), c.range.length * sizeof(float));
    c.in_area = area + c.local;
    c.values.reset();  // PARAMS still in flight hold their own reference
  }
  PSLOG(INFO) << "ps" << options_.index << ": values in shared memory (" << area_.name()
              << "): same-host workers compute from them, no copy per step";
}

// Before `worker`'s segment is unmapped (it registered again): its pushes still waiting in a
// barrier are copied out of it.
void ParameterServer::release_segment(int worker) {
  for (Chunk& c : chunks_) {
    for (Pending& p : c.pending) {
      for (Source& source : p.sources) {
        if (source.worker != worker || source.shm == nullptr) continue;
        source.frame.rebuild(source.shm, c.range.length * sizeof(float));
        source.shm = nullptr;
      }
    }
  }
}

bool ParameterServer::on_pull(const Message& msg, const Header& h, std::string* error) {
  if (!members_.job_known()) return (*error = "pull before HELLO", false);
  for (const Chunk& c : chunks_) {
    if (policy_.check_pull(h.step, c.version) == PullVerdict::kReject) {
      *error = "pull for version " + std::to_string(h.step) + " while at version " + std::to_string(c.version);
      return false;
    }
  }
  if (h.shm != 0 && !members_.has_segment(static_cast<int>(h.sender))) {
    return (*error = "pull into shared memory, but this worker's segment is not mapped here", false);
  }
  if (h.shm == 2 && !area_.mapped()) return (*error = "pull from the parameter area, but this PS has none", false);
  Parked p{msg.route, h.request_id, h.step, std::vector<bool>(chunks_.size(), false), chunks_.size(), h.shm};
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const Chunk& c = chunks_[i];
    if (c.initialized && policy_.check_pull(h.step, c.version) == PullVerdict::kAnswerNow) {
      send_chunk(msg.route, h.request_id, c, h.step, p.shm);
      p.sent[i] = true;
      --p.left;
    }
  }
  if (p.left > 0) parked_.push_back(std::move(p));
  return true;
}

void ParameterServer::chunk_advanced(size_t index) {
  // The last chunk reached the version to checkpoint: every chunk is at it now (no worker can
  // push the next step before it has all of this one), and none of it has been sent yet, so the
  // file is on disk before any worker sees the version, and the chief's manifest after it.
  if (checkpoint_at_ != 0 && version() == checkpoint_at_) write_checkpoint();
  const Chunk& c = chunks_[index];
  for (Parked& p : parked_) {
    if (!p.sent[index] && policy_.check_pull(p.want, c.version) == PullVerdict::kAnswerNow) {
      send_chunk(p.route, p.request_id, c, p.want, p.shm);
      p.sent[index] = true;
      --p.left;
    }
  }
  parked_.erase(std::remove_if(parked_.begin(), parked_.end(), [](const Parked& p) { return p.left == 0; }),
                parked_.end());
}

void ParameterServer::on_done(const Message& msg, const Header& h) {
  members_.done(static_cast<int>(h.sender));
  Header ack;
  ack.op = Op::kDone;
  ack.request_id = h.request_id;
  reply(msg.route, ack, nullptr);
}

void ParameterServer::send_chunk(const std::string& route, uint64_t request_id, const Chunk& c, uint64_t want,
                                 uint64_t shm) {
  // A replacement redoing a step may want the version before the chunk's (kept with --allow-rejoin).
  const bool previous = want + 1 == c.version && c.previous != nullptr;
  Header h = previous ? c.previous_last : c.last;
  if (policy_.mode() != ModeCode::kSync && &c == &chunks_[0]) {
    // async and ssp: everything applied since this worker's last PARAMS (versions may be skipped).
    const int worker = members_.worker_of(route);
    if (worker >= 0) {
      Header& u = unreported_[static_cast<size_t>(worker)];
      h = u;
      u = Header{};
    }
  }
  h.op = Op::kParams;
  h.request_id = request_id;
  h.step = previous ? want : c.version;
  h.stop = stop_at_ != 0 && h.step == stop_at_ ? 1 : 0;
  h.write_us = written_ != 0 && h.step == written_ ? write_us_ : 0;  // the workers' wait includes it
  h.offset = c.range.offset;
  h.length = c.range.length;
  if (shm == 2) {  // the worker reads them in the area (plain sync: nothing older is ever asked)
    h.shm = 1;
    return reply(route, h, nullptr);
  }
  if (shm == 1) {
    // Into the worker's segment; it reads them before its next PULL, the only thing that makes
    // the PS write there again.
    const int worker = members_.worker_of(route);
    if (worker < 0) return;  // replaced meanwhile: that peer is gone
    const float* values = previous ? c.previous->data() : c.data();
    std::copy(values, values + c.range.length, members_.params_in_segment(worker) + c.local);
    h.shm = 1;
    return reply(route, h, nullptr);
  }
  if (c.in_area != nullptr) {  // the area changes at the next apply: a copy of it travels
    zmq::message_t payload(c.in_area, c.range.length * sizeof(float));
    return reply(route, h, &payload);
  }
  // Zero-copy: the message holds a reference to the chunk's values until ZeroMQ has sent it.
  auto* hold = new std::shared_ptr<std::vector<float>>(previous ? c.previous : c.values);
  zmq::message_t payload(
      (*hold)->data(), c.range.length * sizeof(float),
      [](void*, void* hint) { delete static_cast<std::shared_ptr<std::vector<float>>*>(hint); }, hold);
  reply(route, h, &payload);
}

void ParameterServer::reject(const std::string& route, uint64_t request_id, const std::string& why) {
  ++rejected_;
  PSLOG(WARN) << "ps" << options_.index << ": rejected a message from " << printable(route) << ": " << why;
  Header h;
  h.op = Op::kError;
  h.request_id = request_id;
  h.message = why;
  reply(route, h, nullptr);
}

void ParameterServer::reply(const std::string& route, Header h, zmq::message_t* payload) {
  h.role = SenderRole::kPs;
  h.sender = static_cast<uint32_t>(options_.index);
  Message out;
  out.route = route;
  const std::string header = encode_header(h);
  out.frames.emplace_back(header.data(), header.size());
  if (payload != nullptr) out.frames.push_back(std::move(*payload));
  // One try, no waiting: a peer whose queue is full is not reading, and the PS's one thread must
  // not block on it while the other workers wait.
  std::string error;
  if (!endpoint_.send(std::move(out), Clock::now(), &error)) {
    PSLOG(WARN) << "ps" << options_.index << ": dropped a reply to " << printable(route) << ": " << error;
  }
}

// This shard at version checkpoint_at_: its slice and optimizer state, in one durable file.
void ParameterServer::write_checkpoint() {
  ShardCheckpoint c;
  c.shard = static_cast<uint32_t>(options_.index);
  c.num_shards = static_cast<uint32_t>(options_.num_ps);
  c.version = checkpoint_at_;
  c.total = members_.job().total;
  c.total_steps = members_.job().total_steps;
  c.offset = slice_.offset;
  c.optimizer = options_.optimizer.kind;
  c.values = params();
  for (const std::vector<float>* slot : optimizer_->state()) c.slots.push_back(*slot);
  checkpoint_at_ = 0;
  const auto start = Clock::now();
  checkpointer_.write(c);
  written_ = c.version;
  write_us_ = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
}

// --resume, at the first HELLO (when the model's size is known): every chunk at the version of
// the newest usable checkpoint, with its values and optimizer state.
bool ParameterServer::resume(std::string* error) {
  const auto slots = optimizer_->state();
  ShardCheckpoint c;
  if (!checkpointer_.load(members_.job().total, members_.job().total_steps, slice_, slots.size(), &c, error)) return false;
  for (size_t k = 0; k < slots.size(); ++k) *slots[k] = c.slots[k];
  for (Chunk& chunk : chunks_) {
    std::copy(c.values.begin() + static_cast<long>(chunk.local),
              c.values.begin() + static_cast<long>(chunk.local + chunk.range.length), chunk.data());
    chunk.version = c.version;
    chunk.initialized = true;
  }
  return true;
}

void ParameterServer::report_stall() {
  const auto now = Clock::now();
  const auto threshold = std::chrono::duration<double>(options_.stall_report_s);
  if (now - last_stall_report_ < threshold) return;
  // The chunk that has waited longest for its barrier, if any.
  const Chunk* stalled = nullptr;
  for (const Chunk& c : chunks_) {
    if (!c.pending.empty() && c.pending.front().pushes > 0 &&
        (stalled == nullptr || c.pending.front().waiting_since < stalled->pending.front().waiting_since)) {
      stalled = &c;
    }
  }
  std::vector<int> missing;
  std::ostringstream os;
  os << "ps" << options_.index << ": stall: ";
  if (stalled != nullptr) {
    const Pending& p = stalled->pending.front();
    if (now - p.waiting_since < threshold) return;
    for (int i = 0; i < options_.num_workers; ++i) {
      if (!p.pushed[static_cast<size_t>(i)]) missing.push_back(i);
    }
    os << "barrier of step " << stalled->version << " has waited "
       << std::chrono::duration<double>(now - p.waiting_since).count() << " s for worker(s)";
  } else {
    missing = members_.unregistered();
    if (missing.empty()) return;
    os << "still waiting for worker(s) to register:";
  }
  for (int w : missing) os << " " << w;
  PSLOG(WARN) << os.str();
  last_stall_report_ = now;
}

std::string ParameterServer::mode_text() const {
  switch (policy_.mode()) {
    case ModeCode::kSync:
      return options_.backup_workers > 0 ? "sync with " + std::to_string(options_.backup_workers) +
                                               " backup worker(s) (a step is applied once " +
                                               std::to_string(policy_.quorum()) + " workers pushed it)"
                                         : "sync";
    case ModeCode::kSsp: return "ssp (staleness " + std::to_string(options_.staleness) + ")";
    case ModeCode::kAsync: return "async";
  }
  return "?";
}

// What the mode's own counters say, for the last log line: ssp's largest lead (never more than
// the staleness), async's staleness, backup workers' dropped pushes.
std::string ParameterServer::counters_text() const {
  std::ostringstream os;
  if (policy_.mode() == ModeCode::kSsp) {
    os << "; ssp: the largest lead of a worker over the slowest was " << lead_max_ << " step(s) (staleness "
       << options_.staleness << ")";
  }
  if (policy_.mode() == ModeCode::kAsync && stale_count_ > 0) {
    os << "; async: staleness mean " << static_cast<double>(stale_sum_) / static_cast<double>(stale_count_) << " max "
       << stale_max_ << " over " << stale_count_ << " updates";
  }
  if (options_.backup_workers > 0) os << "; late pushes dropped: " << dropped_;
  if (applies_ > 0) {
    os << "; " << applies_ << " chunk update(s), " << std::fixed << std::setprecision(1)
       << 1e6 * apply_s_ / static_cast<double>(applies_) << " us each";
  }
  return os.str();
}

}  // namespace pstrain
