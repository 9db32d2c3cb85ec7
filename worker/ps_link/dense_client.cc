#include "worker/ps_link/dense_client.h"

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

constexpr double kWaitReportSeconds = 5;  // log a line this often while parameters are missing
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


Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The step's metrics, which the PARAMS of the first chunk carries.
StepMetrics metrics_of(const Header& h) {
  StepMetrics metrics =
      StepMetrics{h.samples, h.loss_sum, h.correct, h.times, h.slowest, h.slowest_us, false};
  metrics.stale_sum = h.stale_sum;
  metrics.stale_count = h.stale_count;
  metrics.stale_max = h.stale_max;
  metrics.lead_max = h.lead_max;
  metrics.dropped = h.dropped;
  metrics.eval = EvalSums{h.eval_samples, h.eval_loss, h.eval_correct};
  return metrics;
}

}  // namespace

// receive_params' wait: the PARAMS (and WAITING, ERROR) of the pending PULL, and whatever nobody
// else owns (a repeated PARAMS, or an unexpected message).
class DenseClient::Receive final : public PsChannel::Wait {
 public:
  Receive(DenseClient& client, float* params)
      : c_(client),
        o_(client.options_),
        params_(params),
        received_(client.chunks_.size(), false),
        left_(client.chunks_.size()),
        shards_(static_cast<size_t>(o_.num_ps)),
        barrier_(static_cast<size_t>(o_.num_ps)),
        start_(Clock::now()),
        first_(start_),
        give_up_(start_ + seconds(kPatienceTimeouts * o_.timeout_s)),
        report_(deadline_after(kWaitReportSeconds)) {}

  bool owns(const Header& h) const override { return h.request_id == c_.pull_request_ && h.op != Op::kNorm; }
  std::string what() const override { return "parameters"; }
  void waiting(int shard,
               const Header& h) override {  // the PS is there; its barrier waits for another worker
    if (left_ == c_.chunks_.size()) first_ = Clock::now();
    barrier_[static_cast<size_t>(shard)] = h.message;
    if (Clock::now() >= report_) expired();
  }
  void take(Message& msg, const Header& h) override;
  bool finished() const override { return left_ == 0; }
  Clock::time_point until() const override { return std::min(wait_deadline(), report_); }
  void expired() override {
    report_waiting();
    report_ = deadline_after(kWaitReportSeconds);
  }
  // The step's figures, once finished.
  StepMetrics metrics(uint64_t* wait_us, uint64_t* pull_us) {
    metrics_.stop = stop_;
    metrics_.shards = std::move(shards_);
    metrics_.write_us = write_us_;
    metrics_.durable = durable_;
    metrics_.version = version_;
    const auto end = Clock::now();
    if (wait_us != nullptr) *wait_us = micros(first_ - start_);
    if (pull_us != nullptr) *pull_us = micros(end - first_);
    return metrics_;
  }

 private:
  // When shard s was last heard from (any message, WAITING included) since the wait began.
  Clock::time_point heard(int s) const { return std::max(start_, c_.channel_.heard(s)); }
  // The earliest of: --timeout after the last word from a shard that still owes chunks, give_up_.
  Clock::time_point wait_deadline() const {
    Clock::time_point deadline = give_up_;
    for (size_t i = 0; i < received_.size(); ++i) {
      if (!received_[i]) deadline = std::min(deadline, heard(c_.chunks_[i].shard) + seconds(o_.timeout_s));
    }
    return deadline;
  }
  void report_waiting() const;

  DenseClient& c_;
  const PsClientOptions& o_;
  float* const params_;
  std::vector<bool> received_;  // by chunk
  size_t left_;
  StepMetrics metrics_;
  std::vector<ShardFigures> shards_;
  bool stop_ = false;
  uint64_t write_us_ = 0, version_ = UINT64_MAX, durable_ = UINT64_MAX;
  std::vector<std::string> barrier_;  // by shard: what its barrier waits for (its last WAITING)
  const Clock::time_point start_;
  Clock::time_point first_;  // the first message of the pull
  const Clock::time_point give_up_;
  Clock::time_point report_;
};

void DenseClient::Receive::take(Message& msg, const Header& h) {
  if (left_ == c_.chunks_.size()) first_ = Clock::now();
  const auto it = std::find_if(c_.chunks_.begin(), c_.chunks_.end(), [&](const ChunkRef& c) {
    return c.shard == msg.shard && c.range.offset == h.offset && c.range.length == h.length;
  });
  const size_t index = static_cast<size_t>(it - c_.chunks_.begin());
  // A PARAMS that answers an earlier PULL, or a second copy of one received: a repeat (a
  // duplicated message, docs/operations.md "Faults"); the values are those already taken.
  if (h.op == Op::kParams && it != c_.chunks_.end() &&
      (h.request_id < c_.pull_request_ || (h.request_id == c_.pull_request_ && received_[index]))) {
    PSLOG(WARN) << "w" << o_.index << ": ignored a repeated PARAMS from ps" << msg.shard << " (version "
                << h.step << ", request " << h.request_id << ")";
    return;
  }
  // Sync sends exactly the version asked for; the other modes the newest, which is at least it.
  const bool version_ok = c_.exact_versions_ ? h.step == c_.pull_version_ : h.step >= c_.pull_version_;
  if (h.op != Op::kParams || h.request_id != c_.pull_request_ || !version_ok || it == c_.chunks_.end() ||
      received_[index]) {
    throw Error("unexpected " + std::string(op_name(h.op)) + " from ps" + std::to_string(msg.shard) +
                " (version " + std::to_string(h.step) + ", slice [" + std::to_string(h.offset) + ", +" +
                std::to_string(h.length) + ")) while pulling version " + std::to_string(c_.pull_version_));
  }
  const float* values = c_.values_of(msg, h);
  if (params_ + h.offset != values) std::memcpy(params_ + h.offset, values, h.length * sizeof(float));
  received_[index] = true;
  c_.versions_[index] = h.step;
  version_ = std::min(version_, h.step);
  --left_;
  if (index == 0) metrics_ = metrics_of(h);
  if (h.offset == c_.channel_.slice(msg.shard).offset) {
    shards_[static_cast<size_t>(msg.shard)] = ShardFigures{h.apply_us, h.bytes_in, h.bytes_out};
  }
  stop_ = stop_ || h.stop != 0;
  write_us_ = std::max(write_us_, h.write_us);
  durable_ = std::min(durable_, h.durable);
}

void DenseClient::Receive::report_waiting() const {
  std::vector<bool> pending(static_cast<size_t>(o_.num_ps), false);
  for (size_t i = 0; i < received_.size(); ++i) {
    if (!received_[i]) pending[static_cast<size_t>(c_.chunks_[i].shard)] = true;
  }
  const auto now = Clock::now();
  std::string shards, waits;
  for (int s = 0; s < o_.num_ps; ++s) {
    const auto i = static_cast<size_t>(s);
    if (!pending[i]) continue;
    const std::string name = "ps" + std::to_string(s);
    if (now >= heard(s) + seconds(o_.timeout_s)) {  // nothing from it, not even a WAITING: cut off, or gone
      throw Error("timed out after " + seconds_text(o_.timeout_s) + " waiting for parameters from " + name +
                  " at " + c_.channel_.address(s) + ": w" + std::to_string(o_.index) + " cannot reach " +
                  name + " since " + wall_time_of(heard(s)) + " (nothing from it for " +
                  seconds_text(o_.timeout_s) + ")");
    }
    shards += " " + name + " at " + c_.channel_.address(s);
    if (!barrier_[i].empty()) waits += "; " + name + " waits for " + barrier_[i];
  }
  if (now >= give_up_) {
    throw Error("gave up after " + seconds_text(kPatienceTimeouts * o_.timeout_s) + " (" +
                std::to_string(static_cast<int>(kPatienceTimeouts)) +
                " x --timeout) waiting for parameters of version " + std::to_string(c_.pull_version_) +
                " from" + shards + waits);
  }
  PSLOG(INFO) << "w" << o_.index << ": waiting for parameters of version " << c_.pull_version_ << " from"
              << shards << waits;
}

DenseClient::DenseClient(PsChannel& channel, uint64_t version)
    : channel_(channel),
      options_(channel.options()),
      exact_versions_(options_.mode == Mode::kSync && options_.backup_workers == 0) {
  for (int s = 0; s < channel.num_shards(); ++s) {
    const Slice& slice = channel.slice(s);
    const uint64_t chunk = channel.chunk(s);
    for (uint64_t local = 0; local < slice.length; local += chunk) {
      chunks_.push_back(
          ChunkRef{s, Slice{slice.offset + local, std::min<uint64_t>(chunk, slice.length - local)}});
    }
  }
  versions_.assign(chunks_.size(), version);
  channel_.attach(this);
}

DenseClient::~DenseClient() { channel_.detach(this); }

float* DenseClient::gradient_area() const {
  if (channel_.num_shards() != 1 || !channel_.segment(0).mapped()) return nullptr;
  return static_cast<float*>(channel_.segment(0).data());  // the slice is [0, total): offset 0
}

const float* DenseClient::params_area() const {
  if (channel_.num_shards() != 1 || !channel_.area(0).mapped()) return nullptr;
  return static_cast<const float*>(channel_.area(0).data());  // the slice is [0, total): offset 0
}

void DenseClient::init(const float* params) {
  for (const ChunkRef& c : chunks_) {
    Header h = channel_.request(Op::kInit, 0, c.shard);
    h.offset = c.range.offset;
    h.length = c.range.length;
    Frame payload(params + c.range.offset, c.range.length * sizeof(float));  // copied: sent once
    channel_.send(c.shard, h, &payload);
  }
  channel_.new_request();
}

void DenseClient::request_params(uint64_t version) {
  pull_request_ = channel_.new_request();
  pull_version_ = version;
  pulling_ = true;
  norm_from_.assign(static_cast<size_t>(options_.num_ps), false);
  norm_sum_ = ExactSquares();
  for (int s = 0; s < options_.num_ps; ++s) {
    Header h = channel_.request(Op::kPull, version, s);
    h.request_id = pull_request_;
    h.shm = channel_.area(s).mapped() ? 2 : channel_.segment(s).mapped() ? 1 : 0;
    channel_.send(s, h, nullptr);
  }
}

void DenseClient::push_ready(uint64_t step, const float* grad, size_t ready_from, const PushInfo& info) {
  if (pushing_step_ != step) {
    pushing_step_ = step;
    unpushed_ = chunks_.size();
  }
  while (unpushed_ > 0 && chunks_[unpushed_ - 1].range.offset >= ready_from) {
    const ChunkRef& c = chunks_[--unpushed_];
    Header h = channel_.request(Op::kPush, step, c.shard);
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
    SharedMemory& segment = channel_.segment(c.shard);
    if (segment.mapped()) {
      // The PS has read it before it sends the PARAMS that let this worker compute the next one.
      const uint64_t local = c.range.offset - channel_.slice(c.shard).offset;
      float* area = static_cast<float*>(segment.data()) + local;
      if (area != grad + c.range.offset)
        std::memcpy(area, grad + c.range.offset, c.range.length * sizeof(float));
      h.shm = 1;
      channel_.send(c.shard, h, nullptr);
      continue;
    }
    Frame payload =
        Frame::view(grad + c.range.offset, c.range.length * sizeof(float));  // see push_ready's contract
    channel_.send(c.shard, h, &payload);
  }
}

StepMetrics DenseClient::receive_params(float* params, uint64_t* wait_us, uint64_t* pull_us) {
  Receive wait(*this, params);
  channel_.receive(wait);
  pulling_ = false;
  return wait.metrics(wait_us, pull_us);
}

StepMetrics DenseClient::pull(uint64_t version, float* params) {
  request_params(version);
  return receive_params(params, nullptr, nullptr);
}

void DenseClient::take_norm(const Message& msg, const Header& h) {
  const auto shard = static_cast<size_t>(msg.shard);
  // The NORM of a PULL answered already: another worker's CLIP had its step applied, and the
  // PARAMS came first (on the same host they take the local channel, a NORM's payload ZeroMQ).
  if (h.request_id < pull_request_ || (h.request_id == pull_request_ && !pulling_)) return;
  if (h.request_id != pull_request_ || h.step + 1 != pull_version_ || h.length != kNormWords) {
    throw Error("unexpected NORM from ps" + std::to_string(msg.shard) + " (step " + std::to_string(h.step) +
                ", request " + std::to_string(h.request_id) + ") while pulling version " +
                std::to_string(pull_version_));
  }
  if (norm_from_[shard]) return;  // a repeat (a duplicated message): its part is counted already
  norm_sum_.merge(ExactSquares::from_bytes(msg.frames[1].data()));
  norm_from_[shard] = true;
  if (std::find(norm_from_.begin(), norm_from_.end(), false) != norm_from_.end()) return;
  for (int s = 0; s < options_.num_ps; ++s) {
    Header clip = channel_.request(Op::kClip, h.step, s);
    clip.request_id = pull_request_;
    clip.length = kNormWords;
    Frame payload(norm_sum_.limbs().data(), sizeof(uint64_t) * ExactSquares::kLimbs);
    channel_.send(s, clip, &payload);
  }
}

const float* DenseClient::values_of(const Message& msg, const Header& h) const {
  const SharedMemory& segment = channel_.segment(msg.shard);
  if (payload_in_shared_memory(h) != segment.mapped()) {
    throw Error("ps" + std::to_string(msg.shard) + " sent PARAMS " + (h.shm ? "in" : "outside") +
                " shared memory, against what this worker asked for");
  }
  const Slice& slice = channel_.slice(msg.shard);
  const uint64_t local = h.offset - slice.offset;
  const SharedMemory& area = channel_.area(msg.shard);
  if (area.mapped()) return static_cast<const float*>(area.data()) + local;
  if (segment.mapped())
    return static_cast<const float*>(segment.data()) + shm_area_floats(slice.length) + local;
  return msg.frames[1].data_as<float>();
}

}  // namespace pstrain
