#include "worker/ps_client.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"

namespace pstrain {
namespace {

constexpr double kWaitReportSeconds = 5;  // log a line this often while a reply is missing
constexpr double kFirstHelloReportSeconds = 1;  // at start, the first line comes sooner
// A worker waits for parameters while its PS says (WAITING) that the barrier waits for another
// worker, but at most this many --timeout in all: long enough for a replacement of a worker cut
// off (it times out after one --timeout, then the new one registers), never forever.
constexpr double kPatienceTimeouts = 4;

// "16:02:03": when `then` (steady clock) was, on the wall clock, as log lines print it.
std::string wall_time_of(Clock::time_point then) {
  using namespace std::chrono;
  const auto wall = system_clock::now() - duration_cast<system_clock::duration>(Clock::now() - then);
  const std::time_t secs = system_clock::to_time_t(wall);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char text[16];
  std::snprintf(text, sizeof text, "%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec);
  return text;
}


uint64_t micros(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

// The step's metrics, which the PARAMS of the first chunk carries.
StepMetrics metrics_of(const Header& h) {
  StepMetrics metrics = StepMetrics{h.samples, h.loss_sum, h.correct, h.times, h.slowest, h.slowest_us, false};
  metrics.stale_sum = h.stale_sum;
  metrics.stale_count = h.stale_count;
  metrics.stale_max = h.stale_max;
  metrics.lead_max = h.lead_max;
  metrics.dropped = h.dropped;
  metrics.eval = EvalSums{h.eval_samples, h.eval_loss, h.eval_correct};
  return metrics;
}

}  // namespace

PsClient::PsClient(const PsClientOptions& options, uint64_t total, Endpoint& endpoint)
    : options_(options),
      total_(total),
      endpoint_(endpoint),
      slices_(balance_slices(total, options.num_ps)),
      exact_versions_(options.mode == Mode::kSync && options.backup_workers == 0),
      global_batch_(options.samples_per_step) {}

Header PsClient::request(Op op, uint64_t step, int shard) const {
  Header h;
  h.op = op;
  h.request_id = next_request_;
  h.role = SenderRole::kWorker;
  h.sender = static_cast<uint32_t>(options_.index);
  h.step = step;
  h.offset = slices_[static_cast<size_t>(shard)].offset;
  h.length = slices_[static_cast<size_t>(shard)].length;
  return h;
}

void PsClient::send(int shard, const Header& h, Frame* payload) {
  Message msg;
  msg.shard = shard;
  const std::string header = encode_header(h);
  msg.frames.emplace_back(header.data(), header.size());
  if (payload != nullptr) msg.frames.push_back(std::move(*payload));
  std::string error;
  if (!endpoint_.send(std::move(msg), deadline_after(options_.timeout_s), &error)) {
    throw Error(std::string("sending ") + op_name(h.op) + " to ps" + std::to_string(shard) + " at " +
                endpoint_.address(shard) + " failed: " + error);
  }
  ++sent_.at(static_cast<size_t>(shard)).at(static_cast<size_t>(h.op));  // DONE says how many
}

Header PsClient::decode(const Message& msg) const {
  Header h;
  std::string error;
  const size_t payload = msg.frames.size() > 1 ? msg.frames[1].size() : 0;
  if (msg.frames.empty() || !decode_header(msg.frames[0].data(), msg.frames[0].size(), &h, &error) ||
      !check_frames(h, msg.frames.size(), payload, &error)) {
    throw Error("malformed reply from ps" + std::to_string(msg.shard) + ": " + error);
  }
  return h;
}

std::vector<Message> PsClient::await(const std::vector<bool>& pending, uint64_t request_id, Op want,
                                     const char* what) {
  const int shards = static_cast<int>(pending.size());
  std::vector<Message> replies(static_cast<size_t>(shards));
  std::vector<bool> waiting = pending;
  int left = static_cast<int>(std::count(pending.begin(), pending.end(), true));
  // HELLO is the first message: the shards may still be starting (docs/cluster.md), so it waits
  // up to --start-timeout and says so after a second.
  const bool hello = want == Op::kWelcome;
  const double timeout_s = hello && options_.start_timeout_s > 0 ? options_.start_timeout_s : options_.timeout_s;
  const auto deadline = deadline_after(timeout_s);
  auto report = deadline_after(hello ? kFirstHelloReportSeconds : kWaitReportSeconds);
  const auto missing = [&] {
    std::string text;
    for (int s = 0; s < shards; ++s) {
      if (!waiting[static_cast<size_t>(s)]) continue;
      text += (text.empty() ? " ps" : ", ps") + std::to_string(s) + " at " + endpoint_.address(s);
    }
    return text;
  };
  std::string waits;  // what the shards said they wait for before answering (WAITING)
  while (left > 0) {
    Message msg;
    if (!endpoint_.recv(&msg, std::min(deadline, report))) {
      if (Clock::now() >= deadline) {
        const char* hint = " (--start-timeout: is every PS running and reachable from this host, and does it "
                           "use CURVE exactly when this worker does? docs/security.md)";
        throw Error("timed out after " + seconds_text(timeout_s) + " waiting for " + what + " from" + missing() +
                    (hello ? hint : "") + waits);
      }
      if (hello) {
        PSLOG(INFO) << "w" << options_.index << ": waiting for" << missing() << " (no answer to HELLO yet)";
      } else {
        PSLOG(INFO) << "w" << options_.index << ": waiting for " << what << " from" << missing();
      }
      report = deadline_after(kWaitReportSeconds);
      continue;
    }
    const Header h = decode(msg);
    if (take_rows(msg, h)) continue;
    if (h.op == Op::kError) throw Error("ps" + std::to_string(msg.shard) + " rejected " + what + ": " + h.message);
    if (h.op == Op::kWaiting) {  // about this request, or a PULL answered since (it crossed the PARAMS)
      if (h.request_id == request_id) waits += "; ps" + std::to_string(msg.shard) + ": " + h.message;
      continue;
    }
    // --clip-norm: a NORM of a PULL answered since (another worker's CLIP applied its step, and
    // on one host the PARAMS took the local channel past this NORM's ZeroMQ): nothing to do.
    if (h.op == Op::kNorm && h.request_id <= pull_request_) continue;
    const auto s = static_cast<size_t>(msg.shard);
    if (h.request_id != request_id || h.op != want || !waiting[s]) {
      throw Error("unexpected " + std::string(op_name(h.op)) + " reply from ps" + std::to_string(msg.shard));
    }
    waiting[s] = false;
    --left;
    replies[s] = std::move(msg);
  }
  return replies;
}

uint64_t PsClient::hello(uint64_t total_steps) {
  const int shards = options_.num_ps;
  const uint64_t rid = next_request_++;
  segments_.clear();
  segments_.resize(static_cast<size_t>(shards));
  areas_.clear();
  areas_.resize(static_cast<size_t>(shards));
  sent_.assign(static_cast<size_t>(shards), OpCounts{});
  for (int s = 0; s < shards; ++s) send_hello(s, rid, total_steps);
  const auto replies = await(std::vector<bool>(static_cast<size_t>(shards), true), rid, Op::kWelcome, "HELLO");
  uint64_t version = UINT64_MAX, newest = 0;
  chunks_.clear();
  for (int s = 0; s < shards; ++s) {
    const Header h = decode(replies[static_cast<size_t>(s)]);
    welcome(s, h);
    version = std::min(version, h.step);
    newest = std::max(newest, h.step);
  }
  versions_.assign(chunks_.size(), version);
  use_local_channels();
  // Each shard answers with the step this worker does next there. They differ by one only for a
  // replacement whose predecessor died between its pushes to different shards: it redoes the
  // earlier step, and the shard that has its push already drops the repeat.
  if (newest > version + 1) {
    throw Error("the PS shards are at steps " + std::to_string(version) + " to " + std::to_string(newest) +
                " (are --num-ps and the job the same everywhere?)");
  }
  return version;
}

void PsClient::send_hello(int s, uint64_t rid, uint64_t total_steps) {
  Header h = request(Op::kHello, total_steps, s);
  h.request_id = rid;
  SharedMemory& segment = segments_[static_cast<size_t>(s)];
  std::string why;
  if (options_.shared_memory &&
      SharedMemory::create("pstrain-ps" + std::to_string(s) + "-w" + std::to_string(options_.index),
                           shm_segment_bytes(slices_[static_cast<size_t>(s)].length), &segment, &why)) {
    h.shm = 1;
    h.message = segment.name();
  } else if (!why.empty()) {
    PSLOG(INFO) << "w" << options_.index << ": no shared memory for ps" << s << " (" << why << "): sockets only";
  }
  h.total = total_;
  h.num_workers = static_cast<uint32_t>(options_.num_workers);
  h.mode = static_cast<uint64_t>(mode_code(options_.mode));
  h.samples = global_batch_;
  send(s, h, nullptr);
  PSLOG(INFO) << "w" << options_.index << ": connecting to ps" << s << " at " << endpoint_.address(s);
}

void PsClient::welcome(int s, const Header& h) {
  const Slice& slice = slices_[static_cast<size_t>(s)];
  if (h.offset != slice.offset || h.length != slice.length) {
    throw Error("ps" + std::to_string(s) + " holds a different slice than this worker expects "
                "(are --num-ps and the model the same everywhere?)");
  }
  if (h.chunk == 0) throw Error("ps" + std::to_string(s) + " announced chunks of 0 elements");
  part_bytes_.resize(slices_.size());
  part_bytes_[static_cast<size_t>(s)] = h.chunk * sizeof(float);
  // The PS has mapped the segment (shm 1) or will not (another host): its name can go.
  SharedMemory& segment = segments_[static_cast<size_t>(s)];
  segment.unlink();
  if (h.shm == 0) segment = SharedMemory();
  if (h.shm == 2) {
    // The shard's values live in its parameter area: mapped read-only, read after each PARAMS.
    if (h.message.empty()) throw Error("ps" + std::to_string(s) + " offered its parameter area without naming it");
    std::string why;
    if (!SharedMemory::open(h.message, slice.length * sizeof(float), &areas_[static_cast<size_t>(s)], &why,
                            /*read_only=*/true)) {
      PSLOG(INFO) << "w" << options_.index << ": cannot map ps" << s << "'s parameter area (" << why
                  << "): its values are copied into this worker's segment instead";
    }
  }
  for (uint64_t local = 0; local < slice.length; local += h.chunk) {
    chunks_.push_back(ChunkRef{s, Slice{slice.offset + local, std::min<uint64_t>(h.chunk, slice.length - local)}});
  }
}

void PsClient::use_local_channels() {
  std::string local, headers;
  for (int s = 0; s < options_.num_ps; ++s) {
    if (!segments_[static_cast<size_t>(s)].mapped()) continue;
    local += (local.empty() ? "ps" : " and ps") + std::to_string(s);
    // Its headers too can skip ZeroMQ's I/O threads now that every one of them is small.
    std::string why;
    if (!endpoint_.use_local_channel(s, &why)) headers += "; ps" + std::to_string(s) + "'s headers through ZeroMQ (" + why + ")";
  }
  if (!local.empty()) {
    PSLOG(INFO) << "w" << options_.index << ": " << local << " on this host: payloads through shared memory"
                << (headers.empty() ? ", headers over the local channel" : headers);
  }
}

float* PsClient::gradient_area() const {
  if (segments_.size() != 1 || !segments_[0].mapped()) return nullptr;
  return static_cast<float*>(segments_[0].data());  // the slice is [0, total): offset 0
}

const float* PsClient::params_area() const {
  if (areas_.size() != 1 || !areas_[0].mapped()) return nullptr;
  return static_cast<const float*>(areas_[0].data());  // the slice is [0, total): offset 0
}

void PsClient::init(const float* params) {
  for (const ChunkRef& c : chunks_) {
    Header h = request(Op::kInit, 0, c.shard);
    h.offset = c.range.offset;
    h.length = c.range.length;
    Frame payload(params + c.range.offset, c.range.length * sizeof(float));  // copied: sent once
    send(c.shard, h, &payload);
  }
  ++next_request_;
}

void PsClient::request_params(uint64_t version) {
  pull_request_ = next_request_++;
  pull_version_ = version;
  norm_from_.assign(static_cast<size_t>(options_.num_ps), false);
  norm_sum_ = ExactSquares();
  for (int s = 0; s < options_.num_ps; ++s) {
    Header h = request(Op::kPull, version, s);
    h.request_id = pull_request_;
    h.shm = areas_[static_cast<size_t>(s)].mapped() ? 2 : segments_[static_cast<size_t>(s)].mapped() ? 1 : 0;
    send(s, h, nullptr);
  }
}

void PsClient::push_ready(uint64_t step, const float* grad, size_t ready_from, const PushInfo& info) {
  if (pushing_step_ != step) {
    pushing_step_ = step;
    unpushed_ = chunks_.size();
  }
  while (unpushed_ > 0 && chunks_[unpushed_ - 1].range.offset >= ready_from) {
    const ChunkRef& c = chunks_[--unpushed_];
    Header h = request(Op::kPush, step, c.shard);
    h.offset = c.range.offset;
    h.length = c.range.length;
    h.samples = info.samples;
    h.loss_sum = info.loss_sum;
    h.correct = info.correct;
    h.times = info.times;
    h.eval_samples = info.eval.samples;
    h.eval_loss = info.eval.loss_sum;
    h.eval_correct = info.eval.correct;
    h.checkpoint = info.checkpoint;
    h.stop = info.stop ? 1 : 0;
    h.based_on = versions_[unpushed_];
    const SharedMemory& segment = segments_[static_cast<size_t>(c.shard)];
    if (segment.mapped()) {
      // The PS has read it before it sends the PARAMS that let this worker compute the next one.
      const uint64_t local = c.range.offset - slices_[static_cast<size_t>(c.shard)].offset;
      float* area = static_cast<float*>(segment.data()) + local;
      if (area != grad + c.range.offset) std::memcpy(area, grad + c.range.offset, c.range.length * sizeof(float));
      h.shm = 1;
      send(c.shard, h, nullptr);
      continue;
    }
    Frame payload = Frame::view(grad + c.range.offset, c.range.length * sizeof(float));  // see push_ready's contract
    send(c.shard, h, &payload);
  }
}

StepMetrics PsClient::receive_params(float* params, uint64_t* wait_us, uint64_t* pull_us) {
  const auto start = Clock::now();
  auto first = start;
  std::vector<bool> received(chunks_.size(), false);
  size_t left = chunks_.size();
  StepMetrics metrics;
  std::vector<ShardFigures> shards(static_cast<size_t>(options_.num_ps));
  bool stop = false;
  uint64_t write_us = 0, version = UINT64_MAX;
  Silence silence{std::vector<Clock::time_point>(static_cast<size_t>(options_.num_ps), start),
                  std::vector<std::string>(static_cast<size_t>(options_.num_ps)),
                  start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(kPatienceTimeouts * options_.timeout_s))};
  auto report = deadline_after(kWaitReportSeconds);
  while (left > 0) {
    Message msg;
    const auto deadline = wait_deadline(received, silence);
    if (!endpoint_.recv(&msg, std::min(deadline, report))) {
      report_waiting(received, silence);
      report = deadline_after(kWaitReportSeconds);
      continue;
    }
    silence.heard[static_cast<size_t>(msg.shard)] = Clock::now();
    const Header h = decode(msg);
    if (take_rows(msg, h)) continue;  // the next step's embedding rows, asked for before this PULL
    if (h.op == Op::kNorm) {
      take_norm(msg, h);
      continue;
    }
    if (left == chunks_.size()) first = Clock::now();
    if (h.op == Op::kError) throw Error("ps" + std::to_string(msg.shard) + " rejected parameters: " + h.message);
    if (h.op == Op::kWaiting) {  // the PS is there; its barrier waits for another worker
      if (h.request_id == pull_request_) silence.barrier[static_cast<size_t>(msg.shard)] = h.message;
      if (Clock::now() >= report) {
        report_waiting(received, silence);
        report = deadline_after(kWaitReportSeconds);
      }
      continue;
    }
    const auto it = std::find_if(chunks_.begin(), chunks_.end(), [&](const ChunkRef& c) {
      return c.shard == msg.shard && c.range.offset == h.offset && c.range.length == h.length;
    });
    const size_t index = static_cast<size_t>(it - chunks_.begin());
    // A PARAMS that answers an earlier PULL, or a second copy of one received: a repeat (a
    // duplicated message, docs/operations.md "Faults"); the values are those already taken.
    if (h.op == Op::kParams && it != chunks_.end() &&
        (h.request_id < pull_request_ || (h.request_id == pull_request_ && received[index]))) {
      PSLOG(WARN) << "w" << options_.index << ": ignored a repeated PARAMS from ps" << msg.shard << " (version "
                  << h.step << ", request " << h.request_id << ")";
      continue;
    }
    // Sync sends exactly the version asked for; the other modes the newest, which is at least it.
    const bool version_ok = exact_versions_ ? h.step == pull_version_ : h.step >= pull_version_;
    if (h.op != Op::kParams || h.request_id != pull_request_ || !version_ok || it == chunks_.end() || received[index]) {
      throw Error("unexpected " + std::string(op_name(h.op)) + " from ps" + std::to_string(msg.shard) + " (version " +
                  std::to_string(h.step) + ", slice [" + std::to_string(h.offset) + ", +" + std::to_string(h.length) +
                  ")) while pulling version " + std::to_string(pull_version_));
    }
    const float* values = values_of(msg, h);
    if (params + h.offset != values) std::memcpy(params + h.offset, values, h.length * sizeof(float));
    received[index] = true;
    versions_[index] = h.step;
    version = std::min(version, h.step);
    --left;
    if (index == 0) metrics = metrics_of(h);
    if (h.offset == slices_[static_cast<size_t>(msg.shard)].offset) {
      shards[static_cast<size_t>(msg.shard)] = ShardFigures{h.apply_us, h.bytes_in, h.bytes_out};
    }
    stop = stop || h.stop != 0;
    write_us = std::max(write_us, h.write_us);
  }
  metrics.stop = stop;
  metrics.shards = std::move(shards);
  metrics.write_us = write_us;
  metrics.version = version;
  const auto end = Clock::now();
  if (wait_us != nullptr) *wait_us = micros(first - start);
  if (pull_us != nullptr) *pull_us = micros(end - first);
  return metrics;
}

void PsClient::take_norm(const Message& msg, const Header& h) {
  const auto shard = static_cast<size_t>(msg.shard);
  // The NORM of an earlier PULL: another worker's CLIP had its step applied, and the PARAMS came
  // first (on the same host they take the local channel, a NORM's payload ZeroMQ).
  if (h.request_id < pull_request_) return;
  if (h.request_id != pull_request_ || h.step + 1 != pull_version_ || h.length != kNormWords) {
    throw Error("unexpected NORM from ps" + std::to_string(msg.shard) + " (step " + std::to_string(h.step) +
                ", request " + std::to_string(h.request_id) + ") while pulling version " + std::to_string(pull_version_));
  }
  if (norm_from_[shard]) return;  // a repeat (a duplicated message): its part is counted already
  norm_sum_.merge(ExactSquares::from_bytes(msg.frames[1].data()));
  norm_from_[shard] = true;
  if (std::find(norm_from_.begin(), norm_from_.end(), false) != norm_from_.end()) return;
  for (int s = 0; s < options_.num_ps; ++s) {
    Header clip = request(Op::kClip, h.step, s);
    clip.request_id = pull_request_;
    clip.length = kNormWords;
    Frame payload(norm_sum_.limbs().data(), sizeof(uint64_t) * ExactSquares::kLimbs);
    send(s, clip, &payload);
  }
}

const float* PsClient::values_of(const Message& msg, const Header& h) const {
  const SharedMemory& segment = segments_[static_cast<size_t>(msg.shard)];
  if (payload_in_shared_memory(h) != segment.mapped()) {
    throw Error("ps" + std::to_string(msg.shard) + " sent PARAMS " + (h.shm ? "in" : "outside") +
                " shared memory, against what this worker asked for");
  }
  const uint64_t local = h.offset - slices_[static_cast<size_t>(msg.shard)].offset;
  const SharedMemory& area = areas_[static_cast<size_t>(msg.shard)];
  const float* values = area.mapped() ? static_cast<const float*>(area.data()) + local
                        : segment.mapped()
                            ? static_cast<const float*>(segment.data()) +
                                  shm_area_floats(slices_[static_cast<size_t>(msg.shard)].length) + local
                            : msg.frames[1].data_as<float>();
  return values;
}

Clock::time_point PsClient::wait_deadline(const std::vector<bool>& received, const Silence& silence) const {
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_s));
  Clock::time_point deadline = silence.give_up;
  for (size_t i = 0; i < chunks_.size(); ++i) {
    if (!received[i]) deadline = std::min(deadline, silence.heard[static_cast<size_t>(chunks_[i].shard)] + timeout);
  }
  return deadline;
}

void PsClient::report_waiting(const std::vector<bool>& received, const Silence& silence) const {
  std::vector<bool> pending(static_cast<size_t>(options_.num_ps), false);
  for (size_t i = 0; i < chunks_.size(); ++i) {
    if (!received[i]) pending[static_cast<size_t>(chunks_[i].shard)] = true;
  }
  const auto now = Clock::now();
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.timeout_s));
  std::string shards, waits;
  for (int s = 0; s < options_.num_ps; ++s) {
    const auto i = static_cast<size_t>(s);
    if (!pending[i]) continue;
    const std::string name = "ps" + std::to_string(s);
    if (now >= silence.heard[i] + timeout) {  // nothing from it, not even a WAITING: cut off, or gone
      throw Error("timed out after " + seconds_text(options_.timeout_s) + " waiting for parameters from " + name +
                  " at " + endpoint_.address(s) + ": w" + std::to_string(options_.index) + " cannot reach " + name +
                  " since " + wall_time_of(silence.heard[i]) + " (nothing from it for " +
                  seconds_text(options_.timeout_s) + ")");
    }
    shards += " " + name + " at " + endpoint_.address(s);
    if (!silence.barrier[i].empty()) waits += "; " + name + " waits for " + silence.barrier[i];
  }
  if (now >= silence.give_up) {
    throw Error("gave up after " + seconds_text(kPatienceTimeouts * options_.timeout_s) + " (" +
                std::to_string(static_cast<int>(kPatienceTimeouts)) + " x --timeout) waiting for parameters of version " +
                std::to_string(pull_version_) + " from" + shards + waits);
  }
  PSLOG(INFO) << "w" << options_.index << ": waiting for parameters of version " << pull_version_ << " from" << shards
              << waits;
}

StepMetrics PsClient::pull(uint64_t version, float* params) {
  request_params(version);
  return receive_params(params, nullptr, nullptr);
}

uint64_t PsClient::request_rows(uint64_t version, const std::vector<const std::vector<SparseSection>*>& requests) {
  const size_t shards = static_cast<size_t>(options_.num_ps);
  RowsRequest r;
  r.ticket = next_request_++;
  r.waiting.assign(shards, false);
  r.rows.resize(shards);
  r.shards.resize(shards);
  // Every shard is asked, also one that holds none of the IDs (an empty pull): its answer says
  // that its tables reached the version, which the step's push to it needs in hybrid mode (where
  // no PARAMS of the shard's say so).
  static const std::vector<SparseSection> kNone;
  for (size_t s = 0; s < shards; ++s) {
    const std::vector<SparseSection>& sections = requests[s] != nullptr ? *requests[s] : kNone;
    std::vector<uint32_t> dims;
    for (const SparseSection& section : sections) {
      const auto dim = row_dims_.find(section.table);
      dims.push_back(dim != row_dims_.end() ? dim->second : options_.row_dim);
    }
    std::vector<std::string> bodies = encode_sparse_parts(Op::kSparsePull, sections, part_bytes_.at(s), dims);
    ShardRows& answer = r.shards[s];
    answer.parts = answer.left = bodies.size();
    answer.answers.resize(bodies.size());
    answer.got.assign(bodies.size(), false);
    for (size_t k = 0; k < bodies.size() && bodies.size() > 1; ++k) {  // what each part asks for
      std::vector<SparseSection> asked;
      std::string error;
      PSTRAIN_CHECK(decode_sparse_body(Op::kSparsePull, bodies[k].data(), bodies[k].size(), &asked, &error));
      answer.asked.emplace_back();
      for (const SparseSection& section : asked) answer.asked.back().emplace_back(section.table, section.ids.size());
    }
    for (size_t k = 0; k < bodies.size(); ++k) {
      Header h = request(Op::kSparsePull, version, static_cast<int>(s));
      h.request_id = r.ticket;
      h.offset = 0;
      h.length = bodies[k].size() / 4;
      h.part = k;
      h.parts = bodies.size();
      Frame payload(std::move(bodies[k]));
      send(static_cast<int>(s), h, &payload);
    }
    r.waiting[s] = true;
    ++r.left;
  }
  rows_requests_.push_back(std::move(r));
  return rows_requests_.back().ticket;
}

bool PsClient::take_rows(const Message& msg, const Header& h) {
  const auto r = std::find_if(rows_requests_.begin(), rows_requests_.end(),
                              [&](const RowsRequest& q) { return q.ticket == h.request_id; });
  if (r == rows_requests_.end()) return false;
  const auto s = static_cast<size_t>(msg.shard);
  if (h.op == Op::kError) throw Error("ps" + std::to_string(s) + " rejected SPARSE_PULL: " + h.message);
  if (h.op == Op::kWaiting) return true;
  if (h.op != Op::kSparseRows || !r->waiting[s]) {
    throw Error("unexpected " + std::string(op_name(h.op)) + " reply from ps" + std::to_string(s) +
                " to SPARSE_PULL " + std::to_string(h.request_id));
  }
  std::vector<SparseSection> answer;
  std::string error;
  if (!decode_sparse_body(h.op, msg.frames[1].data(), msg.frames[1].size(), &answer, &error)) {
    throw Error("ps" + std::to_string(s) + " sent malformed SPARSE_ROWS: " + error);
  }
  take_rows_part(*r, s, h, std::move(answer));
  return true;
}

void PsClient::take_rows_part(RowsRequest& r, size_t s, const Header& h, std::vector<SparseSection> answer) {
  ShardRows& q = r.shards[s];
  const std::string where = "ps" + std::to_string(s) + " sent SPARSE_ROWS part " + std::to_string(h.part) + " of " +
                            std::to_string(h.parts) + " to a pull in " + std::to_string(q.parts) + " part(s)";
  if (std::max<uint64_t>(h.parts, 1) != q.parts || h.part >= q.parts) throw Error(where);
  if (q.got[h.part]) throw Error(where + ": that part came already");
  if (q.parts > 1) {  // a whole answer is checked against the whole pull by its caller
    const auto& asked = q.asked[h.part];
    bool matches = asked.size() == answer.size();
    for (size_t i = 0; matches && i < asked.size(); ++i) {
      matches = answer[i].table == asked[i].first && answer[i].count() == asked[i].second &&
                answer[i].values.size() == asked[i].second * answer[i].dim;
    }
    if (!matches) throw Error(where + ": its sections are not the rows that part asked for");
  }
  q.got[h.part] = true;
  for (const SparseSection& section : answer) row_dims_[section.table] = section.dim;
  q.answers[h.part] = std::move(answer);
  if (--q.left > 0) return;
  if (q.parts == 1) {
    r.rows[s] = std::move(q.answers[0]);
  } else {
    for (auto& part : q.answers) {
      std::string error;
      if (!append_sparse_part(&r.rows[s], std::move(part), &error)) throw Error("ps" + std::to_string(s) + ": " + error);
    }
  }
  q.answers.clear();
  r.waiting[s] = false;
  --r.left;
}

std::vector<std::vector<SparseSection>> PsClient::receive_rows(uint64_t ticket) {
  const auto find = [&] {
    return std::find_if(rows_requests_.begin(), rows_requests_.end(),
                        [&](const RowsRequest& q) { return q.ticket == ticket; });
  };
  PSTRAIN_CHECK(find() != rows_requests_.end());
  auto deadline = deadline_after(options_.timeout_s);
  const auto give_up = deadline_after(kPatienceTimeouts * options_.timeout_s);
  std::vector<std::string> waits(find()->waiting.size());  // by shard: what its last WAITING said
  while (find()->left > 0) {
    Message msg;
    if (!endpoint_.recv(&msg, std::min(deadline, give_up))) {
      std::string missing, why;
      for (size_t s = 0; s < find()->waiting.size(); ++s) {
        if (find()->waiting[s]) missing += (missing.empty() ? "ps" : ", ps") + std::to_string(s);
        if (find()->waiting[s] && !waits[s].empty()) why += "; ps" + std::to_string(s) + " waits for " + waits[s];
      }
      throw Error("timed out after " + seconds_text(Clock::now() >= give_up ? kPatienceTimeouts * options_.timeout_s
                                                                           : options_.timeout_s) +
                  " waiting for embedding rows from " + missing + why);
    }
    const Header h = decode(msg);
    if (take_rows(msg, h)) {
      if (h.op == Op::kWaiting && h.request_id == ticket) {
        deadline = deadline_after(options_.timeout_s);
        waits[static_cast<size_t>(msg.shard)] = h.message;
      }
      continue;
    }
    if (h.op == Op::kWaiting) continue;  // about a PULL answered since
    throw Error("unexpected " + std::string(op_name(h.op)) + " from ps" + std::to_string(msg.shard) +
                " while waiting for embedding rows");
  }
  const auto r = find();
  std::vector<std::vector<SparseSection>> rows = std::move(r->rows);
  rows_requests_.erase(r);
  return rows;
}

void PsClient::push_rows(uint64_t step, uint64_t samples, const std::vector<std::vector<SparseSection>>& sections) {
  for (int s = 0; s < options_.num_ps; ++s) {
    std::vector<std::string> bodies =
        encode_sparse_parts(Op::kSparsePush, sections[static_cast<size_t>(s)], part_bytes_.at(static_cast<size_t>(s)));
    const uint64_t rid = next_request_++;
    for (size_t k = 0; k < bodies.size(); ++k) {
      Header h = request(Op::kSparsePush, step, s);
      h.request_id = rid;
      h.samples = samples;
      h.checkpoint = step == marked_step_ ? marked_checkpoint_ : 0;
      h.offset = 0;
      h.length = bodies[k].size() / 4;
      h.part = k;
      h.parts = bodies.size();
      Frame payload(std::move(bodies[k]));
      send(s, h, &payload);
    }
  }
}

void PsClient::combine_stats(uint64_t step, uint64_t call, std::vector<double>& sums) {
  // ps0 disconnects a peer whose frame passes the bound STATS sets (docs/wire_protocol.md, "Frame
  // bound"): said here, before it is sent, rather than as a timeout.
  if (sums.size() > kMaxStatsValues) {
    throw Error("batch-norm statistics of " + std::to_string(sums.size()) + " values, more than a STATS carries (" +
                std::to_string(kMaxStatsValues) + "): give the job --batchnorm-stats local");
  }
  Header h = request(Op::kStats, step, 0);
  h.request_id = next_request_++;
  h.offset = call;
  h.length = sums.size() * sizeof(double) / 4;
  Frame payload(sums.data(), sums.size() * sizeof(double));
  send(0, h, &payload);
  std::vector<bool> pending(static_cast<size_t>(options_.num_ps), false);
  pending[0] = true;
  const std::vector<Message> replies = await(pending, h.request_id, Op::kStatsSum, "batch-norm statistics");
  const Message& reply = replies[0];
  if (reply.frames.size() != 2 || reply.frames[1].size() != sums.size() * sizeof(double)) {
    throw Error("ps0 sent batch-norm statistics of " +
                std::to_string(reply.frames.size() > 1 ? reply.frames[1].size() : 0) + " bytes, expected " +
                std::to_string(sums.size() * sizeof(double)));
  }
  std::memcpy(sums.data(), reply.frames[1].data(), sums.size() * sizeof(double));
}

void PsClient::done(bool stopped) {
  // Waits for every shard's acknowledgement: the process may exit right after, and ZeroMQ
  // drops what is still queued when a socket with linger 0 closes. DONE says how many messages
  // of each kind this worker sent the shard; the shard acknowledges once it has them all, and
  // until then answers WAITING naming what has not arrived (which a timeout here reports).
  const uint64_t rid = next_request_++;
  for (int s = 0; s < options_.num_ps; ++s) {
    Header h = request(Op::kDone, 0, s);
    h.request_id = rid;
    h.message = encode_op_counts(sent_.at(static_cast<size_t>(s)));
    h.stop = stopped ? 1 : 0;
    send(s, h, nullptr);
  }
  await(std::vector<bool>(static_cast<size_t>(options_.num_ps), true), rid, Op::kDone, "DONE");
}

}  // namespace pstrain
