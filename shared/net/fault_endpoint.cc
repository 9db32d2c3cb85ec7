#include "shared/net/fault_endpoint.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"
#include "shared/wire/protocol.h"

namespace pstrain {
namespace {

// A reordered message goes after the next one this process sends, or after this long when the
// process sends nothing more until it hears back (a PULL, the last message of a step).
constexpr auto kReorderWait = std::chrono::milliseconds(50);
// On a ring link, where a rank sends its next message only once its neighbour's arrived, longer:
// long enough that the next operation's first message overtakes it, short of any deadline.
constexpr auto kLinkReorderWait = std::chrono::seconds(1);

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

std::vector<Frame> copy_of(const std::vector<Frame>& frames) {
  std::vector<Frame> copy;
  for (const Frame& f : frames) copy.emplace_back(f.data(), f.size());
  return copy;
}

// The faults that change a message's bytes: the last frame cut to half (at least one byte
// less), or a bit flipped in the first frame's sixth byte (inside a PS header's first key's name,
// in a ring header's version). Copies: the frames may share their bytes with the sender.
void truncate_last(std::vector<Frame>* frames) {
  Frame& last = frames->back();
  last = Frame(last.data(), std::min(last.size() / 2, last.size() - (last.size() > 0 ? 1 : 0)));
}
void corrupt_first(std::vector<Frame>* frames) {
  Frame& header = frames->front();
  header = Frame(header.data(), header.size());
  if (header.size() > 0) header.data()[std::min<size_t>(5, header.size() - 1)] ^= 0x10;
}

Message copy_of(const Message& msg) {
  Message copy;
  copy.route = msg.route;
  copy.shard = msg.shard;
  copy.local = msg.local;
  copy.frames = copy_of(msg.frames);
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
      case FaultRule::kTruncate:
        truncate_last(&msg.frames);
        return inner_->send(std::move(msg), deadline, error);
      case FaultRule::kCorrupt:
        corrupt_first(&msg.frames);
        return inner_->send(std::move(msg), deadline, error);
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

class FaultyLink final : public Link {
 public:
  FaultyLink(std::unique_ptr<Link> inner, std::vector<FaultRule> rules, MessageNamer namer)
      : inner_(std::move(inner)), rules_(std::move(rules)), namer_(std::move(namer)) {}

  // What is still held goes out now, in order (bounded: a test double must not hang a process).
  ~FaultyLink() override {
    try {
      for (Held& held : held_) {
        if (!inner_->send(&held.frames, deadline_after(2))) break;
      }
    } catch (const std::exception& e) {
      PSLOG(WARN) << "fault injection: held ring messages lost at close: " << e.what();
    }
  }

  const std::string& address() const override { return inner_->address(); }
  void connect_right(const std::string& right_address) override { inner_->connect_right(right_address); }

  bool try_send(std::vector<Frame>* frames, Clock::time_point deadline) override {
    flush(deadline);
    std::string detail;
    const std::string op = namer_(*frames, &detail);
    const FaultRule* rule = match(op);
    if (rule == nullptr) {
      if (held_.empty() && !inner_->try_send(frames, deadline)) {
        --sent_of_[op];  // not sent: it comes again
        return false;
      }
      if (!frames->empty()) hold(frames, Clock::now(), false);  // behind what is held: order kept
      return true;
    }
    PSLOG(WARN) << "fault injected: " << kind_name(rule->kind) << " " << op << " #" << rule->nth << " (" << detail
                << ") to the right neighbour";
    inject(*rule, frames);
    flush(deadline);
    return true;
  }

  bool send(std::vector<Frame>* frames, Clock::time_point deadline) override {
    while (!try_send(frames, deadline)) {
      if (!inner_->wait(false, true, deadline)) return false;
    }
    return true;
  }

  bool try_recv(std::vector<Frame>* frames) override {
    flush(Clock::now());
    return inner_->try_recv(frames);
  }

  // Wakes up when something held is due as well.
  bool wait(bool want_in, bool want_out, Clock::time_point deadline) override {
    flush(Clock::now());
    if (held_.empty()) return inner_->wait(want_in, want_out, deadline);
    const bool due = held_.front().due <= Clock::now() && !reordered_only();
    const bool ready = inner_->wait(want_in, want_out || due, std::min(deadline, due ? deadline : next_due()));
    flush(Clock::now());
    return ready || Clock::now() < deadline;
  }

  void set_close_linger(int millis) override { inner_->set_close_linger(millis); }
  void close_right() override {
    held_.clear();
    inner_->close_right();
  }

 private:
  struct Held {
    Clock::time_point due;
    std::vector<Frame> frames;
    bool reordered;  // goes after the next message, or at `due` if none comes
  };

  // Applies `rule` to a message about to be sent: every faulted message is held, even for no
  // time, so that it goes out in order behind what is already held.
  void inject(const FaultRule& rule, std::vector<Frame>* frames) {
    switch (rule.kind) {
      case FaultRule::kDrop:
        frames->clear();
        return;
      case FaultRule::kDelay:
        return hold(frames, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(rule.delay_s)),
                    false);
      case FaultRule::kReorder:
        return hold(frames, Clock::now() + kLinkReorderWait, true);
      case FaultRule::kDuplicate: {
        std::vector<Frame> again = copy_of(*frames);
        hold(frames, Clock::now(), false);
        return hold(&again, Clock::now(), false);
      }
      case FaultRule::kTruncate:
        truncate_last(frames);
        return hold(frames, Clock::now(), false);
      case FaultRule::kCorrupt:
        corrupt_first(frames);
        return hold(frames, Clock::now(), false);
    }
  }

  const FaultRule* match(const std::string& op) {
    if (op.empty()) return nullptr;
    const uint64_t n = ++sent_of_[op];
    for (const FaultRule& rule : rules_) {
      if (rule.op == op && rule.nth == n) return &rule;
    }
    return nullptr;
  }

  // Queues a copy of `frames` (consumed, as a send consumes them). A message queued behind a
  // reordered one overtakes it.
  void hold(std::vector<Frame>* frames, Clock::time_point due, bool reordered) {
    Held held{due, copy_of(*frames), reordered};
    frames->clear();
    auto at = held_.end();
    if (!reordered && !held_.empty() && held_.back().reordered) {
      held_.back().due = Clock::now();  // it goes right after this one
      held_.back().reordered = false;
      at = held_.end() - 1;
    }
    held_.insert(at, std::move(held));
  }

  bool reordered_only() const { return held_.size() == 1 && held_.front().reordered; }
  Clock::time_point next_due() const { return held_.empty() ? Clock::time_point::max() : held_.front().due; }

  // Sends the held messages in order while the first is due and the link takes them.
  void flush(Clock::time_point deadline) {
    while (!held_.empty() && held_.front().due <= Clock::now()) {
      if (!inner_->try_send(&held_.front().frames, deadline)) return;
      held_.erase(held_.begin());
    }
  }

  std::unique_ptr<Link> inner_;
  const std::vector<FaultRule> rules_;
  const MessageNamer namer_;
  std::map<std::string, uint64_t> sent_of_;  // messages sent, by operation
  std::vector<Held> held_;                    // in the order they go out
};

}  // namespace

std::vector<FaultRule> parse_fault_rules(const std::string& text, const std::vector<std::string>& more_ops) {
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
    // Every operation, the sparse ones, CLIP and STATS included (their messages too must arrive
    // or be reported: DONE counts them).
    for (uint32_t op = 1; op <= static_cast<uint32_t>(Op::kStatsSum); ++op) {
      known |= rule.op == op_name(static_cast<Op>(op));
    }
    known |= std::find(more_ops.begin(), more_ops.end(), rule.op) != more_ops.end();
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

std::unique_ptr<Link> with_faults(std::unique_ptr<Link> inner, std::vector<FaultRule> rules, MessageNamer namer) {
  return std::make_unique<FaultyLink>(std::move(inner), std::move(rules), std::move(namer));
}

}  // namespace pstrain
