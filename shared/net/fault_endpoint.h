// Faults injected on the wire (tests; the testing flag --inject-faults): an Endpoint that wraps
// another and drops, delays, duplicates, reorders, truncates or corrupts chosen messages that this
// process sends, as leveldb's ErrorEnv does for files. The fault tests (tests/fault_test.cc) run
// real jobs with it and assert what each fault leads to: survived with the same bits, or the job
// ended within its deadline naming the peer and what went wrong (docs/operations.md, "Faults").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shared/net/transport.h"

namespace pstrain {

struct FaultRule {
  enum Kind { kDrop, kDelay, kDuplicate, kReorder, kTruncate, kCorrupt };
  Kind kind = kDrop;
  std::string op;        // the operation it applies to: "PUSH", "PULL", "PARAMS", ... (op_name)
  uint64_t nth = 1;      // the nth message of that operation this process sends (1-based)
  double delay_s = 1.0;  // kDelay: how long it is held
};

// Parses "KIND:OP[:N[:SECONDS]]" (e.g. "drop:PUSH:5", "delay:PARAMS:3:2.5"), several separated
// by commas. KIND: drop | delay | duplicate | reorder (sent after the next message) | truncate
// (the last frame cut to half, at least one byte less) | corrupt (a bit flipped in the header's
// first key). OP: an operation of the PS protocol, or one of `more_ops` (the ring's, where the
// process has a ring). Throws pstrain::UsageError naming what is wrong.
std::vector<FaultRule> parse_fault_rules(const std::string& text, const std::vector<std::string>& more_ops = {});

// Every fault it injects is logged ("fault injected: drop PUSH #5 (step 4) to ps0").
std::unique_ptr<Endpoint> with_faults(std::unique_ptr<Endpoint> inner, std::vector<FaultRule> rules);

// A link's messages are not the PS protocol's: the link's owner names them. Returns the
// operation of a message ("REDUCE") and sets *detail to what identifies it in the log ("seq 2
// step 1 chunk 0"); "" for a message it cannot read.
using MessageNamer = std::function<std::string(const std::vector<Frame>& frames, std::string* detail)>;

// The same faults on the messages a ring link sends to its right neighbour. A link is an ordered
// stream, so a delayed message holds back the ones after it (a stalled connection); a reordered
// one goes after the next. Held messages are copies (the sender's buffer is free at once); they
// go out at the link's next call once due, or when the link is destroyed.
std::unique_ptr<Link> with_faults(std::unique_ptr<Link> inner, std::vector<FaultRule> rules, MessageNamer namer);

}  // namespace pstrain
