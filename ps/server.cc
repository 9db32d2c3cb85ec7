#include "ps/server.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "shared/error.h"
#include "shared/log.h"
#include "shared/numeric.h"

namespace pstrain {

struct ParameterServer::Chunk {
  Slice range;       // in the flat vector
  size_t local = 0;  // offset within the slice (and the optimizer's state)
  // Shared with PARAMS messages ZeroMQ has not sent yet: apply() copies it first if it is in use.
  std::shared_ptr<std::vector<float>> values;
  // Gradient sum of the pending step: the first push's own message, the others added into it
  // (a received message is ours to write), so no push is ever copied.
  zmq::message_t accum;
  std::unique_ptr<ConsistencyPolicy> policy;
  bool initialized = false;
  uint64_t version = 0;
  int pushes = 0;  // pushes received for the pending step
  Clock::time_point waiting_since;
  // Metrics of the pending step, and of the last applied one (sent with PARAMS).
  Header pending, last;
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
};

namespace {

constexpr double kCloseSeconds = 5;

uint64_t physical_memory_mib() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(pages) / (1024 * 1024 / static_cast<uint64_t>(page));
}

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
  sum->samples += h.samples;
  sum->loss_sum += h.loss_sum;
  sum->correct += h.correct;
  sum->times += h.times;
}

}  // namespace

ParameterServer::ParameterServer(const JobOptions& options, Endpoint& endpoint)
    : options_(options),
      endpoint_(endpoint),
      route_of_worker_(static_cast<size_t>(options.num_workers)),
      done_(static_cast<size_t>(options.num_workers), false),
      rejoined_(static_cast<size_t>(options.num_workers), false),
      checkpointer_(options_, "ps" + std::to_string(options.index)) {
  make_policy(options.mode, options.num_workers);  // rejects an unknown mode before serving
}

ParameterServer::~ParameterServer() = default;

uint64_t ParameterServer::version() const {
  uint64_t v = UINT64_MAX;
  for (const Chunk& c : chunks_) v = std::min(v, c.version);
  return chunks_.empty() ? 0 : v;
}

std::vector<float> ParameterServer::params() const {
  std::vector<float> out;
  for (const Chunk& c : chunks_) out.insert(out.end(), c.values->begin(), c.values->end());
  return out;
}

void ParameterServer::serve() {
  PSLOG(INFO) << "ps" << options_.index << ": serving at " << endpoint_.address()
              << (options_.ipc.empty() ? "" : " and ipc://" + options_.ipc) << ", mode "
              << options_.mode << ", " << options_.num_workers << " worker(s), optimizer "
              << options_.optimizer.kind << " lr " << options_.optimizer.lr;
  last_stall_report_ = Clock::now();
  Message msg;
  while (num_done_ < options_.num_workers) {
    const auto tick = deadline_after(std::min(1.0, options_.stall_report_s));
    if (endpoint_.recv(&msg, tick)) handle(msg);
    report_stall();
  }
  PSLOG(INFO) << "ps" << options_.index << ": all " << options_.num_workers
              << " workers done at version " << version() << "; exiting";
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

  const auto it = worker_of_route_.find(msg.route);
  if (it == worker_of_route_.end()) {
    return reject(msg.route, h.request_id, std::string(op_name(h.op)) + " from a peer that never said HELLO");
  }
  if (it->second != static_cast<int>(h.sender)) {
    return reject(msg.route, h.request_id, "sender " + std::to_string(h.sender) +
                                               " does not match registered worker " + std::to_string(it->second));
  }
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
  const auto fail = [&](const std::string& why) { reject(msg.route, h.request_id, why); };
  if (h.num_workers != static_cast<uint32_t>(options_.num_workers)) {
    return fail("worker thinks there are " + std::to_string(h.num_workers) + " workers; this PS has " +
                std::to_string(options_.num_workers));
  }
  if (h.sender >= static_cast<uint32_t>(options_.num_workers)) return fail("worker index out of range");
  if (h.total == 0 || (total_ != 0 && h.total != total_)) {
    return fail("model of " + std::to_string(h.total) + " parameters does not match " + std::to_string(total_));
  }
  if (total_ == 0) {
    const std::string why = shard_too_big(h.total);
    if (!why.empty()) return fail(why);
  }
  if (total_ != 0 && h.step != total_steps_) {
    return fail("job of " + std::to_string(h.step) + " steps does not match the other workers' " +
                std::to_string(total_steps_));
  }
  const auto known = worker_of_route_.find(msg.route);
  std::string& owner = route_of_worker_[h.sender];
  if (known != worker_of_route_.end() && known->second != static_cast<int>(h.sender)) {
    return fail("worker " + std::to_string(h.sender) + " is already registered from another peer");
  }
  const bool replacement = !owner.empty() && owner != msg.route;
  if (replacement && !options_.allow_rejoin) {
    return fail("worker " + std::to_string(h.sender) + " is already registered from another peer");
  }
  if (replacement && done_[h.sender]) return fail("worker " + std::to_string(h.sender) + " has finished the job");
  if (total_ == 0) {
    total_ = h.total;
    total_steps_ = h.step;
    slice_ = balance_slices(total_, options_.num_ps)[static_cast<size_t>(options_.index)];
    chunk_len_ = std::max<size_t>(1, static_cast<size_t>(options_.chunk_kib) * 1024 / sizeof(float));
    for (size_t local = 0; local < slice_.length; local += chunk_len_) {
      Chunk c;
      c.local = local;
      c.range = Slice{slice_.offset + local, std::min(chunk_len_, slice_.length - local)};
      c.values = std::make_shared<std::vector<float>>(c.range.length, 0.0f);
      c.policy = make_policy(options_.mode, options_.num_workers);
      chunks_.push_back(std::move(c));
    }
    optimizer_ = make_optimizer(options_.optimizer, slice_.length);
    std::string error;
    if (options_.resume && !resume(&error)) {
      total_ = 0;  // not set up: every HELLO gets the same answer
      chunks_.clear();
      PSLOG(ERROR) << "ps" << options_.index << ": " << error;
      return fail(error);
    }
    PSLOG(INFO) << "ps" << options_.index << ": model has " << total_ << " parameters; this shard holds "
                << slice_text(slice_.offset, slice_.length) << " = " << slice_.length * sizeof(float) / 1024.0
                << " KiB in " << chunks_.size() << " chunk(s)";
  }
  if (owner.empty()) PSLOG(INFO) << "ps" << options_.index << ": worker " << h.sender << " registered";
  if (replacement) {
    worker_of_route_.erase(owner);
    rejoined_[h.sender] = true;
    PSLOG(WARN) << "ps" << options_.index << ": worker " << h.sender << " registered again from a new peer: "
                << "a replacement; it redoes step " << next_step_of(static_cast<int>(h.sender));
  }
  owner = msg.route;
  worker_of_route_[msg.route] = static_cast<int>(h.sender);
  Header welcome;
  welcome.op = Op::kWelcome;
  welcome.request_id = h.request_id;
  welcome.step = next_step_of(static_cast<int>(h.sender));
  welcome.offset = slice_.offset;
  welcome.length = slice_.length;
  welcome.total = total_;
  welcome.chunk = chunk_len_;
  reply(msg.route, welcome, nullptr);
}

// A HELLO's model size decides what this shard allocates: one peer must not be able to make it
// allocate without bound. Needed: values, gradient sum and up to two optimizer slots per float.
std::string ParameterServer::shard_too_big(uint64_t total) const {
  const uint64_t length = balance_slices(total, options_.num_ps)[static_cast<size_t>(options_.index)].length;
  const uint64_t limit_mib = options_.max_shard_mib > 0 ? static_cast<uint64_t>(options_.max_shard_mib)
                                                        : physical_memory_mib();
  const uint64_t need_mib = length / (1024 * 1024 / (4 * sizeof(float))) + 1;
  if (need_mib <= limit_mib) return "";
  return "model of " + std::to_string(total) + " parameters needs about " + std::to_string(need_mib) +
         " MiB on this shard, more than its limit of " + std::to_string(limit_mib) + " MiB (--max-shard-mib)";
}

// The step `worker` runs next against this shard: the version of the least advanced chunk, or
// one more when the worker's gradient for that step is already in every chunk (applied, or
// waiting in the barrier): a replacement then does not redo a step its predecessor finished.
uint64_t ParameterServer::next_step_of(int worker) const {
  const uint64_t t = version();
  if (!rejoined_[static_cast<size_t>(worker)] || chunks_.empty()) return t;
  for (const Chunk& c : chunks_) {
    if (c.version == t && !c.policy->has_pushed(worker)) return t;
  }
  return t + 1;
}

// A replacement redoes the step its predecessor may have pushed already: those pushes (and a
// replaced chief's INIT) are repeats of what the PS holds, dropped without touching any state.
bool ParameterServer::is_repeat(const Chunk& c, int worker, uint64_t step) const {
  if (!rejoined_[static_cast<size_t>(worker)]) return false;
  return step + 1 == c.version || (step == c.version && c.policy->has_pushed(worker));
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
  if (c->initialized && rejoined_[0]) return true;  // a replaced chief's INIT: already applied
  if (c->initialized) return (*error = "parameters are already initialised", false);
  const float* values = msg.frames[1].data<float>();
  if (!all_finite(values, c->range.length)) return (*error = "initial values are not all finite", false);
  std::memcpy(c->values->data(), values, c->range.length * sizeof(float));
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
  *error = c->policy->check_push(worker, h.step, c->version);
  if (!error->empty()) return false;
  if (worker == 0 && h.checkpoint != 0 && h.checkpoint != h.step + 1) {
    return (*error = "checkpoint of version " + std::to_string(h.checkpoint) + " asked in a push for step " +
                     std::to_string(h.step), false);
  }
  if (h.samples == 0) return (*error = "push with zero samples", false);
  const float* grad = msg.frames[1].data<float>();
  const size_t n = c->range.length;
  if (!all_finite(grad, n)) return (*error = "gradient is not all finite", false);

  // Every check passed: only now is state touched.
  if (worker == 0 && h.checkpoint != 0) checkpoint_at_ = h.checkpoint;  // the chief decides (docs/checkpoints.md)
  if (worker == 0 && h.stop != 0) stop_at_ = h.step + 1;
  if (c->pushes == 0) c->waiting_since = Clock::now();
  add_metrics(&c->pending, h, c->pushes);
  const bool first = c->pushes++ == 0;
  const bool complete = c->policy->record_push(worker);
  if (first) {
    c->accum.move(msg.frames[1]);
  } else {
    add_into(c->accum.data<float>(), grad, n);
  }
  if (complete) apply(*c, c->accum.data<float>());
  if (complete) chunk_advanced(static_cast<size_t>(c - chunks_.data()));
  return true;
}

void ParameterServer::apply(Chunk& c, const float* grad_sum) {
  if (options_.allow_rejoin) {
    // Keep version v for a replacement worker; recycle the buffer of v - 1 when nothing holds it.
    auto next = c.previous && c.previous.use_count() == 1 ? std::move(c.previous)
                                                          : std::make_shared<std::vector<float>>(c.range.length);
    std::copy(c.values->begin(), c.values->end(), next->begin());
    c.previous = std::move(c.values);
    c.values = std::move(next);
    c.previous_last = c.last;
  } else if (c.values.use_count() > 1) {
    c.values = std::make_shared<std::vector<float>>(*c.values);  // in flight
  }
  optimizer_->apply(c.local, c.range.length, c.values->data(), grad_sum,
                    1.0f / static_cast<float>(c.pending.samples),
                    scheduled_lr(options_.optimizer, c.version, total_steps_), c.version);
  ++c.version;
  c.last = c.pending;
  c.pushes = 0;
  c.accum.rebuild();  // gives the message's buffer back to ZeroMQ
  c.policy->applied();
}

bool ParameterServer::on_pull(const Message& msg, const Header& h, std::string* error) {
  if (total_ == 0) return (*error = "pull before HELLO", false);
  for (const Chunk& c : chunks_) {
    if (c.policy->check_pull(h.step, c.version) == PullVerdict::kReject) {
      *error = "pull for version " + std::to_string(h.step) + " while at version " + std::to_string(c.version);
      return false;
    }
  }
  Parked p{msg.route, h.request_id, h.step, std::vector<bool>(chunks_.size(), false), chunks_.size()};
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const Chunk& c = chunks_[i];
    if (c.initialized && c.policy->check_pull(h.step, c.version) == PullVerdict::kAnswerNow) {
      send_chunk(msg.route, h.request_id, c, h.step);
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
    if (!p.sent[index] && c.policy->check_pull(p.want, c.version) == PullVerdict::kAnswerNow) {
      send_chunk(p.route, p.request_id, c, p.want);
      p.sent[index] = true;
      --p.left;
    }
  }
  parked_.erase(std::remove_if(parked_.begin(), parked_.end(), [](const Parked& p) { return p.left == 0; }),
                parked_.end());
}

void ParameterServer::on_done(const Message& msg, const Header& h) {
  if (!done_[h.sender]) {
    done_[h.sender] = true;
    ++num_done_;
    PSLOG(INFO) << "ps" << options_.index << ": worker " << h.sender << " is done (" << num_done_ << "/"
                << options_.num_workers << ")";
  }
  Header ack;
  ack.op = Op::kDone;
  ack.request_id = h.request_id;
  reply(msg.route, ack, nullptr);
}

void ParameterServer::send_chunk(const std::string& route, uint64_t request_id, const Chunk& c, uint64_t want) {
  // A replacement redoing a step may want the version before the chunk's (kept with --allow-rejoin).
  const bool previous = want + 1 == c.version && c.previous != nullptr;
  Header h = previous ? c.previous_last : c.last;
  h.op = Op::kParams;
  h.request_id = request_id;
  h.step = previous ? want : c.version;
  h.stop = stop_at_ != 0 && h.step == stop_at_ ? 1 : 0;
  h.write_us = written_ != 0 && h.step == written_ ? write_us_ : 0;  // the workers' wait includes it
  h.offset = c.range.offset;
  h.length = c.range.length;
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
  c.total = total_;
  c.total_steps = total_steps_;
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
  if (!checkpointer_.load(total_, total_steps_, slice_, slots.size(), &c, error)) return false;
  for (size_t k = 0; k < slots.size(); ++k) *slots[k] = c.slots[k];
  for (Chunk& chunk : chunks_) {
    std::copy(c.values.begin() + static_cast<long>(chunk.local),
              c.values.begin() + static_cast<long>(chunk.local + chunk.range.length), chunk.values->begin());
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
    if (c.pushes > 0 && (stalled == nullptr || c.waiting_since < stalled->waiting_since)) stalled = &c;
  }
  std::vector<int> missing;
  std::ostringstream os;
  os << "ps" << options_.index << ": stall: ";
  if (stalled != nullptr) {
    if (now - stalled->waiting_since < threshold) return;
    missing = stalled->policy->missing();
    os << "barrier of step " << stalled->version << " has waited "
       << std::chrono::duration<double>(now - stalled->waiting_since).count() << " s for worker(s)";
  } else {
    for (int i = 0; i < options_.num_workers; ++i) {
      if (route_of_worker_[static_cast<size_t>(i)].empty()) missing.push_back(i);
    }
    if (missing.empty()) return;
    os << "still waiting for worker(s) to register:";
  }
  for (int w : missing) os << " " << w;
  PSLOG(WARN) << os.str();
  last_stall_report_ = now;
}

}  // namespace pstrain
