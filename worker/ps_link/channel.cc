#include "worker/ps_link/channel.h"

#include <algorithm>

#include "shared/util/error.h"
#include "shared/util/log.h"

namespace pstrain {
namespace {

constexpr double kWaitReportSeconds = 5;        // log a line this often while a reply is missing
constexpr double kFirstHelloReportSeconds = 1;  // at start, the first line comes sooner

}  // namespace

// await()'s wait: one reply of one kind to one request from each pending shard.
class PsChannel::Await final : public PsChannel::Wait {
 public:
  Await(const PsChannel& channel, const std::vector<bool>& pending, uint64_t request_id, Op want,
        const char* what)
      : channel_(channel),
        waiting_(pending),
        left_(std::count(pending.begin(), pending.end(), true)),
        replies_(pending.size()),
        request_id_(request_id),
        want_(want),
        what_(what),
        // HELLO is the first message: the shards may still be starting (docs/cluster.md), so it
        // waits up to --start-timeout and says so after a second.
        hello_(want == Op::kWelcome),
        timeout_s_(hello_ && channel.options_.start_timeout_s > 0 ? channel.options_.start_timeout_s
                                                                  : channel.options_.timeout_s),
        deadline_(deadline_after(timeout_s_)),
        report_(deadline_after(hello_ ? kFirstHelloReportSeconds : kWaitReportSeconds)) {}

  bool owns(const Header& h) const override { return h.request_id == request_id_; }
  std::string what() const override { return what_; }
  void waiting(int shard, const Header& h) override {
    waits_ += "; ps" + std::to_string(shard) + ": " + h.message;
  }
  void take(Message& msg, const Header& h) override {
    const auto s = static_cast<size_t>(msg.shard);
    if (h.request_id != request_id_ || h.op != want_ || !waiting_[s]) {
      throw Error("unexpected " + std::string(op_name(h.op)) + " reply from ps" + std::to_string(msg.shard));
    }
    waiting_[s] = false;
    --left_;
    replies_[s] = std::move(msg);
  }
  bool finished() const override { return left_ == 0; }
  Clock::time_point until() const override { return std::min(deadline_, report_); }
  void expired() override {
    if (Clock::now() >= deadline_) {
      const char* hint =
          " (--start-timeout: is every PS running and reachable from this host, and does it "
          "use CURVE exactly when this worker does? docs/security.md)";
      throw Error("timed out after " + seconds_text(timeout_s_) + " waiting for " + what_ + " from" +
                  missing() + (hello_ ? hint : "") + waits_);
    }
    const int index = channel_.options_.index;
    if (hello_) {
      PSLOG(INFO) << "w" << index << ": waiting for" << missing() << " (no answer to HELLO yet)";
    } else {
      PSLOG(INFO) << "w" << index << ": waiting for " << what_ << " from" << missing();
    }
    report_ = deadline_after(kWaitReportSeconds);
  }
  std::vector<Message> replies() { return std::move(replies_); }

 private:
  std::string missing() const {
    std::string text;
    for (size_t s = 0; s < waiting_.size(); ++s) {
      if (!waiting_[s]) continue;
      text += (text.empty() ? " ps" : ", ps") + std::to_string(s) + " at " +
              channel_.address(static_cast<int>(s));
    }
    return text;
  }

  const PsChannel& channel_;
  std::vector<bool> waiting_;
  std::ptrdiff_t left_;
  std::vector<Message> replies_;
  const uint64_t request_id_;
  const Op want_;
  const std::string what_;
  const bool hello_;
  const double timeout_s_;
  const Clock::time_point deadline_;
  Clock::time_point report_;
  std::string waits_;  // what the shards said they wait for before answering (WAITING)
};

PsChannel::PsChannel(const PsClientOptions& options, uint64_t total, Endpoint& endpoint)
    : options_(options),
      total_(total),
      endpoint_(endpoint),
      slices_(balance_slices(total, options.num_ps)),
      heard_(static_cast<size_t>(options.num_ps), Clock::now()),
      sent_(static_cast<size_t>(options.num_ps), OpCounts{}) {}

Header PsChannel::request(Op op, uint64_t step, int shard) const {
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

void PsChannel::send(int shard, const Header& h, Frame* payload) {
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

Header PsChannel::decode(const Message& msg) const {
  Header h;
  std::string error;
  const size_t payload = msg.frames.size() > 1 ? msg.frames[1].size() : 0;
  if (msg.frames.empty() || !decode_header(msg.frames[0].data(), msg.frames[0].size(), &h, &error) ||
      !check_frames(h, msg.frames.size(), payload, &error)) {
    throw Error("malformed reply from ps" + std::to_string(msg.shard) + ": " + error);
  }
  return h;
}

void PsChannel::attach(Awaiter* awaiter) { awaiters_.push_back(awaiter); }

void PsChannel::detach(Awaiter* awaiter) {
  awaiters_.erase(std::remove(awaiters_.begin(), awaiters_.end(), awaiter), awaiters_.end());
}

void PsChannel::receive(Wait& wait) {
  while (!wait.finished()) {
    Message msg;
    if (!endpoint_.recv(&msg, wait.until())) {
      wait.expired();
      continue;
    }
    dispatch(msg, wait);
  }
}

void PsChannel::dispatch(Message& msg, Wait& wait) {
  heard_.at(static_cast<size_t>(msg.shard)) = Clock::now();
  const Header h = decode(msg);
  Awaiter* owner = wait.owns(h) ? &wait : nullptr;
  for (size_t i = 0; owner == nullptr && i < awaiters_.size(); ++i) {
    if (awaiters_[i]->owns(h)) owner = awaiters_[i];
  }
  if (h.op == Op::kError) {
    throw Error("ps" + std::to_string(msg.shard) + " rejected " + (owner != nullptr ? owner : &wait)->what() +
                ": " + h.message);
  }
  if (h.op == Op::kWaiting) {  // nobody's: about a request answered since (it crossed the answer)
    if (owner != nullptr) owner->waiting(msg.shard, h);
    return;
  }
  (owner != nullptr ? owner : &wait)->take(msg, h);
}

std::vector<Message> PsChannel::await(const std::vector<bool>& pending, uint64_t request_id, Op want,
                                      const char* what) {
  Await wait(*this, pending, request_id, want, what);
  receive(wait);
  return wait.replies();
}

uint64_t PsChannel::hello(uint64_t total_steps) {
  const int shards = options_.num_ps;
  const uint64_t rid = new_request();
  segments_.clear();
  segments_.resize(static_cast<size_t>(shards));
  areas_.clear();
  areas_.resize(static_cast<size_t>(shards));
  chunks_.assign(static_cast<size_t>(shards), 0);
  sent_.assign(static_cast<size_t>(shards), OpCounts{});
  for (int s = 0; s < shards; ++s) send_hello(s, rid, total_steps);
  const auto replies =
      await(std::vector<bool>(static_cast<size_t>(shards), true), rid, Op::kWelcome, "HELLO");
  uint64_t version = UINT64_MAX, newest = 0;
  for (int s = 0; s < shards; ++s) {
    const Header h = decode(replies[static_cast<size_t>(s)]);
    welcome(s, h);
    version = std::min(version, h.step);
    newest = std::max(newest, h.step);
  }
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

void PsChannel::send_hello(int s, uint64_t rid, uint64_t total_steps) {
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
    PSLOG(INFO) << "w" << options_.index << ": no shared memory for ps" << s << " (" << why
                << "): sockets only";
  }
  h.total = total_;
  h.num_workers = static_cast<uint32_t>(options_.num_workers);
  h.mode = static_cast<uint64_t>(mode_code(options_.mode));
  h.samples = options_.samples_per_step;  // every worker must agree
  send(s, h, nullptr);
  PSLOG(INFO) << "w" << options_.index << ": connecting to ps" << s << " at " << endpoint_.address(s);
}

void PsChannel::welcome(int s, const Header& h) {
  const Slice& slice = slices_[static_cast<size_t>(s)];
  if (h.offset != slice.offset || h.length != slice.length) {
    throw Error("ps" + std::to_string(s) +
                " holds a different slice than this worker expects "
                "(are --num-ps and the model the same everywhere?)");
  }
  if (h.chunk == 0) throw Error("ps" + std::to_string(s) + " announced chunks of 0 elements");
  chunks_[static_cast<size_t>(s)] = h.chunk;
  // The PS has mapped the segment (shm 1) or will not (another host): its name can go.
  SharedMemory& segment = segments_[static_cast<size_t>(s)];
  segment.unlink();
  if (h.shm == 0) segment = SharedMemory();
  if (h.shm == 2) {
    // The shard's values live in its parameter area: mapped read-only, read after each PARAMS.
    if (h.message.empty())
      throw Error("ps" + std::to_string(s) + " offered its parameter area without naming it");
    std::string why;
    if (!SharedMemory::open(h.message, slice.length * sizeof(float), &areas_[static_cast<size_t>(s)], &why,
                            /*read_only=*/true)) {
      PSLOG(INFO) << "w" << options_.index << ": cannot map ps" << s << "'s parameter area (" << why
                  << "): its values are copied into this worker's segment instead";
    }
  }
}

void PsChannel::use_local_channels() {
  std::string local, headers;
  for (int s = 0; s < options_.num_ps; ++s) {
    if (!segments_[static_cast<size_t>(s)].mapped()) continue;
    local += (local.empty() ? "ps" : " and ps") + std::to_string(s);
    // Its headers too can skip ZeroMQ's I/O threads now that every one of them is small.
    std::string why;
    if (!endpoint_.use_local_channel(s, &why))
      headers += "; ps" + std::to_string(s) + "'s headers through ZeroMQ (" + why + ")";
  }
  if (!local.empty()) {
    PSLOG(INFO) << "w" << options_.index << ": " << local << " on this host: payloads through shared memory"
                << (headers.empty() ? ", headers over the local channel" : headers);
  }
}

void PsChannel::done(bool stopped) {
  // DONE says how many messages of each kind this worker sent the shard; the shard acknowledges
  // once it has them all, and until then answers WAITING naming what has not arrived (which a
  // timeout here reports).
  const uint64_t rid = new_request();
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
