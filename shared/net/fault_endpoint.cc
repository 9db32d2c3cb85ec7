#include "shared/net/fault_endpoint.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "shared/util/error.h"
#include "shared/util/log.h"
#include "shared/wire/protocol.h"

namespace pstrain {
namespace {

// A reordered message goes after the next one this process sends, or after this long when the
// process sends nothing more until it hears back (a PULL, the last message of a step).
constexpr auto kReorderWait = std::chrono::milliseconds(50);

const char* kind_name(FaultRule::Kind kind) {
  switch (kind) {
    case FaultRule::kDrop: return "drop";
    case FaultRule::kDelay: return "delay";
    case FaultRule::kDuplicate: return "duplicate";
    case FaultRule::kReorder: return "reorder";
    case FaultRule::kTruncate: return "truncate";
    case FaultRule::kCorrupt: return "corrupt";
  }
  return "?";
}

FaultRule::Kind parse_kind(const std::string& word, const std::string& rule) {
  for (auto kind : {FaultRule::kDrop, FaultRule::kDelay, FaultRule::kDuplicate, FaultRule::kReorder,
                    FaultRule::kTruncate, FaultRule::kCorrupt}) {
    if (word == kind_name(kind)) return kind;
  }
  throw UsageError("--inject-faults: '" + rule + "': '" + word +
                   "' is not drop, delay, duplicate, reorder, truncate or corrupt");
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

Message copy_of(const Message& msg) {
  Message copy;
  copy.route = msg.route;
  copy.shard = msg.shard;
  copy.local = msg.local;
  for (const zmq::message_t& f : msg.frames) copy.frames.emplace_back(f.data(), f.size());
  return copy;
}

class FaultyEndpoint final : public Endpoint {
 public:
  FaultyEndpoint(std::unique_ptr<Endpoint> inner, std::vector<FaultRule> rules)
      : inner_(std::move(inner)), rules_(std::move(rules)) {}

  bool send(Message&& msg, Clock::time_point deadline, std::string* error) override {
    if (!flush(Clock::now(), deadline, error)) return false;
    Header h;
    std::string why;
    const bool decoded = !msg.frames.empty() && decode_header(msg.frames[0].data(), msg.frames[0].size(), &h, &why);
    const FaultRule* rule = decoded ? match(h) : nullptr;
    if (rule == nullptr) return send_then_reordered(std::move(msg), deadline, error);
    PSLOG(WARN) << "fault injected: " << kind_name(rule->kind) << " " << op_name(h.op) << " #" << rule->nth
                << " (step " << h.step << ") to " << peer(msg);
    switch (rule->kind) {
      case FaultRule::kDrop:
        return true;
      case FaultRule::kDelay:
        held_.push_back({Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(rule->delay_s)),
                         std::move(msg), false});
        return true;
      case FaultRule::kReorder:  // after the next message, or after kReorderWait if none comes
        held_.push_back({Clock::now() + kReorderWait, std::move(msg), true});
        return true;
      case FaultRule::kDuplicate: {
        Message again = copy_of(msg);
        return inner_->send(std::move(msg), deadline, error) && inner_->send(std::move(again), deadline, error);
      }
      case FaultRule::kTruncate: {
        zmq::message_t& last = msg.frames.back();
        zmq::message_t cut(last.data(), std::min(last.size() / 2, last.size() - (last.size() > 0 ? 1 : 0)));
        last.swap(cut);
        return inner_->send(std::move(msg), deadline, error);
      }
      case FaultRule::kCorrupt: {
        zmq::message_t& header = msg.frames[0];
        // Inside the first key's name (after the map's and the string's headers): the same
        // byte of every header, whatever its values.
        if (header.size() > 0) static_cast<unsigned char*>(header.data())[std::min<size_t>(5, header.size() - 1)] ^= 0x10;
        return inner_->send(std::move(msg), deadline, error);
      }
    }
    return true;
  }

  bool recv(Message* msg, Clock::time_point deadline) override {
    for (;;) {
      std::string error;
      if (!flush(Clock::now(), deadline, &error)) PSLOG(WARN) << "fault injection: a held message was lost: " << error;
      Clock::time_point until = deadline;
      for (const Held& h : held_) until = std::min(until, h.due);
      if (inner_->recv(msg, until)) return true;
      if (Clock::now() >= deadline) return false;
    }
  }

  bool use_local_channel(int shard, std::string* why) override { return inner_->use_local_channel(shard, why); }
  std::string address(int shard) const override { return inner_->address(shard); }
  void close(Clock::time_point deadline) override { inner_->close(deadline); }

 private:
  struct Held {
    Clock::time_point due;
    Message msg;
    bool reordered;  // goes after the next message sent, or at `due` if none is
  };

  const FaultRule* match(const Header& h) {
    const std::string op = op_name(h.op);
    const uint64_t n = ++sent_of_[op];
    for (const FaultRule& rule : rules_) {
      if (rule.op == op && rule.nth == n) return &rule;
    }
    return nullptr;
  }

  static std::string peer(const Message& msg) {
    return msg.shard >= 0 ? "ps" + std::to_string(msg.shard) : "a worker";
  }

  // Sends `msg`, then what a reorder held back: it goes after the next message.
  bool send_then_reordered(Message&& msg, Clock::time_point deadline, std::string* error) {
    if (!inner_->send(std::move(msg), deadline, error)) return false;
    return flush(Clock::now(), deadline, error, /*reordered_too=*/true);
  }

  // Sends the held messages that are due, and with `reordered_too` every reordered one.
  bool flush(Clock::time_point now, Clock::time_point deadline, std::string* error, bool reordered_too = false) {
    for (auto it = held_.begin(); it != held_.end();) {
      if (it->due > now && !(reordered_too && it->reordered)) {
        ++it;
        continue;
      }
      Message msg = std::move(it->msg);
      it = held_.erase(it);
      if (!inner_->send(std::move(msg), deadline, error)) return false;
    }
    return true;
  }

  std::unique_ptr<Endpoint> inner_;
  const std::vector<FaultRule> rules_;
  std::map<std::string, uint64_t> sent_of_;  // messages sent, by operation
  std::vector<Held> held_;                    // delayed, or reordered
};

}  // namespace

std::vector<FaultRule> parse_fault_rules(const std::string& text) {
  std::vector<FaultRule> rules;
  for (const std::string& spec : split(text, ',')) {
    if (spec.empty()) continue;
    const std::vector<std::string> parts = split(spec, ':');
    if (parts.size() < 2 || parts.size() > 4) {
      throw UsageError("--inject-faults: '" + spec + "' is not KIND:OP[:N[:SECONDS]]");
    }
    FaultRule rule;
    rule.kind = parse_kind(parts[0], spec);
    rule.op = parts[1];
    bool known = false;
    for (uint32_t op = 1; op <= static_cast<uint32_t>(Op::kError); ++op) known |= rule.op == op_name(static_cast<Op>(op));
    if (!known) throw UsageError("--inject-faults: '" + spec + "': '" + rule.op + "' is not an operation (PUSH, PULL, ...)");
    try {
      if (parts.size() > 2) rule.nth = std::stoull(parts[2]);
      if (parts.size() > 3) rule.delay_s = std::stod(parts[3]);
    } catch (const std::exception&) {
      throw UsageError("--inject-faults: '" + spec + "': N and SECONDS must be numbers");
    }
    if (rule.nth == 0 || !std::isfinite(rule.delay_s) || rule.delay_s < 0) {
      throw UsageError("--inject-faults: '" + spec + "': N counts from 1, SECONDS must be >= 0");
    }
    rules.push_back(rule);
  }
  return rules;
}

std::unique_ptr<Endpoint> with_faults(std::unique_ptr<Endpoint> inner, std::vector<FaultRule> rules) {
  return std::make_unique<FaultyEndpoint>(std::move(inner), std::move(rules));
}

}  // namespace pstrain
