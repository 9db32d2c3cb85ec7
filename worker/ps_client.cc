#include "worker/ps_client.h"

#include <algorithm>
#include <cstring>

#include "shared/error.h"
#include "shared/log.h"

namespace pstrain {
namespace {
constexpr double kWaitReportSeconds = 5;  // log a line this often while a reply is missing
}  // namespace

PsClient::PsClient(const JobOptions& options, uint64_t total, Endpoint& endpoint)
    : options_(options), total_(total), endpoint_(endpoint), slices_(balance_slices(total, options.num_ps)) {}

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

void PsClient::send(int shard, const Header& h, const float* payload) {
  Message msg;
  msg.shard = shard;
  const std::string header = encode_header(h);
  msg.frames.emplace_back(header.data(), header.size());
  if (payload != nullptr) msg.frames.emplace_back(payload + h.offset, h.length * sizeof(float));
  std::string error;
  if (!endpoint_.send(std::move(msg), deadline_after(options_.timeout_s), &error)) {
    throw Error(std::string("sending ") + op_name(h.op) + " to ps" + std::to_string(shard) + " at " +
                endpoint_.address(shard) + " failed: " + error);
  }
}

std::vector<Message> PsClient::await(const std::vector<bool>& pending, uint64_t request_id, Op want,
                                     const char* what) {
  const int shards = static_cast<int>(pending.size());
  std::vector<Message> replies(static_cast<size_t>(shards));
  std::vector<bool> waiting = pending;
  int left = 0;
  for (bool p : pending) left += p;
  const auto deadline = deadline_after(options_.timeout_s);
  const auto missing = [&] {
    std::string text;
    for (int s = 0; s < shards; ++s) {
      if (waiting[static_cast<size_t>(s)]) text += " ps" + std::to_string(s) + " at " + endpoint_.address(s);
    }
    return text;
  };
  while (left > 0) {
    Message msg;
    const auto tick = std::min(deadline, deadline_after(kWaitReportSeconds));
    if (!endpoint_.recv(&msg, tick)) {
      if (Clock::now() >= deadline) {
        throw Error("timed out after " + std::to_string(options_.timeout_s) + " s waiting for " + what +
                    " from" + missing());
      }
      PSLOG(INFO) << "w" << options_.index << ": waiting for " << what << " from" << missing();
      continue;
    }
    Header h;
    std::string error;
    const size_t payload = msg.frames.size() > 1 ? msg.frames[1].size() : 0;
    if (msg.frames.empty() || !decode_header(msg.frames[0].data(), msg.frames[0].size(), &h, &error) ||
        !check_frames(h, msg.frames.size(), payload, &error)) {
      throw Error("malformed reply from ps" + std::to_string(msg.shard) + ": " + error);
    }
    if (h.op == Op::kError) {
      throw Error("ps" + std::to_string(msg.shard) + " rejected " + what + ": " + h.message);
    }
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
  std::vector<bool> pending(static_cast<size_t>(shards), true);
  for (int s = 0; s < shards; ++s) {
    Header h = request(Op::kHello, total_steps, s);
    h.request_id = rid;
    h.total = total_;
    h.num_workers = static_cast<uint32_t>(options_.num_workers);
    send(s, h, nullptr);
    PSLOG(INFO) << "w" << options_.index << ": connecting to ps" << s << " at " << endpoint_.address(s);
  }
  const auto replies = await(pending, rid, Op::kWelcome, "HELLO");
  uint64_t version = 0;
  for (int s = 0; s < shards; ++s) {
    Header h;
    std::string error;
    decode_header(replies[s].frames[0].data(), replies[s].frames[0].size(), &h, &error);
    if (h.offset != slices_[s].offset || h.length != slices_[s].length) {
      throw Error("ps" + std::to_string(s) + " holds a different slice than this worker expects "
                  "(are --num-ps and the model the same everywhere?)");
    }
    if (s == 0) version = h.step;
    if (h.step != version) throw Error("shards are at different versions");
  }
  return version;
}

void PsClient::init(const float* params) {
  for (int s = 0; s < options_.num_ps; ++s) send(s, request(Op::kInit, 0, s), params);
  ++next_request_;
}

void PsClient::push(uint64_t step, const float* grad, uint64_t samples, double loss_sum, uint64_t correct) {
  for (int s = 0; s < options_.num_ps; ++s) {
    Header h = request(Op::kPush, step, s);
    h.samples = samples;
    h.loss_sum = loss_sum;
    h.correct = correct;
    send(s, h, grad);
  }
  ++next_request_;
}

StepMetrics PsClient::pull(uint64_t version, float* params) {
  const uint64_t rid = next_request_++;
  for (int s = 0; s < options_.num_ps; ++s) {
    Header h = request(Op::kPull, version, s);
    h.request_id = rid;
    send(s, h, nullptr);
  }
  const auto replies = await(std::vector<bool>(static_cast<size_t>(options_.num_ps), true), rid,
                             Op::kParams, "parameters");
  StepMetrics metrics;
  for (int s = 0; s < options_.num_ps; ++s) {
    Header h;
    std::string error;
    decode_header(replies[s].frames[0].data(), replies[s].frames[0].size(), &h, &error);
    const Slice& slice = slices_[static_cast<size_t>(s)];
    if (h.step != version || h.offset != slice.offset || h.length != slice.length) {
      throw Error("ps" + std::to_string(s) + " answered version " + std::to_string(h.step) + " slice [" +
                  std::to_string(h.offset) + ", +" + std::to_string(h.length) + ") to a pull of version " +
                  std::to_string(version));
    }
    std::memcpy(params + slice.offset, replies[s].frames[1].data(), slice.length * sizeof(float));
    if (s == 0) metrics = StepMetrics{h.samples, h.loss_sum, h.correct};
  }
  return metrics;
}

void PsClient::done() {
  // Waits for every shard's acknowledgement: the process may exit right after, and ZeroMQ
  // drops what is still queued when a socket with linger 0 closes.
  const uint64_t rid = next_request_++;
  for (int s = 0; s < options_.num_ps; ++s) {
    Header h = request(Op::kDone, 0, s);
    h.request_id = rid;
    send(s, h, nullptr);
  }
  await(std::vector<bool>(static_cast<size_t>(options_.num_ps), true), rid, Op::kDone, "DONE");
}

}  // namespace pstrain
