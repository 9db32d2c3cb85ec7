// The fault double itself (shared/net/fault_endpoint.h): over an endpoint (or a ring link) that
// records what it is asked to send, each kind of fault does to the nth message of its operation
// what it says, and nothing to any other message. tests/fault_test.cc runs real jobs with it.
#include "shared/net/fault_endpoint.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/wire/protocol.h"

namespace pstrain {
namespace {

class RecordingEndpoint final : public Endpoint {
 public:
  explicit RecordingEndpoint(std::vector<Message>* sent) : sent_(sent) {}
  bool send(Message&& msg, Clock::time_point, std::string*) override {
    sent_->push_back(std::move(msg));
    return true;
  }
  bool recv(Message*, Clock::time_point deadline) override {
    std::this_thread::sleep_until(deadline);  // nothing ever arrives
    return false;
  }
  std::string address(int) const override { return "recorder"; }
  void close(Clock::time_point) override {}

 private:
  std::vector<Message>* sent_;
};

Message message(Op op, uint64_t request, size_t payload_floats = 0) {
  Header h;
  h.op = op;
  h.request_id = request;
  h.length = payload_floats;
  Message msg;
  msg.shard = 0;
  const std::string header = encode_header(h);
  msg.frames.emplace_back(header.data(), header.size());
  if (payload_floats > 0) msg.frames.emplace_back(payload_floats * sizeof(float));
  return msg;
}

uint64_t request_of(const Message& msg) {
  Header h;
  std::string error;
  return decode_header(msg.frames[0].data(), msg.frames[0].size(), &h, &error) ? h.request_id : UINT64_MAX;
}

// Sends PUSH 1, PULL 2, PUSH 3, PUSH 4 through the faults; returns what reached the wire.
std::vector<Message> through(const std::string& faults, bool wait_after = false) {
  std::vector<Message> sent;
  auto endpoint = with_faults(std::make_unique<RecordingEndpoint>(&sent), parse_fault_rules(faults));
  std::string error;
  const auto deadline = deadline_after(5);
  EXPECT_TRUE(endpoint->send(message(Op::kPush, 1, 4), deadline, &error));
  EXPECT_TRUE(endpoint->send(message(Op::kPull, 2), deadline, &error));
  EXPECT_TRUE(endpoint->send(message(Op::kPush, 3, 4), deadline, &error));
  EXPECT_TRUE(endpoint->send(message(Op::kPush, 4, 4), deadline, &error));
  if (wait_after) {
    Message none;
    EXPECT_FALSE(endpoint->recv(&none, deadline_after(0.3)));  // held messages leave meanwhile
  }
  return sent;
}

std::vector<uint64_t> requests(const std::vector<Message>& sent) {
  std::vector<uint64_t> ids;
  for (const Message& m : sent) ids.push_back(request_of(m));
  return ids;
}

TEST(FaultEndpointTest, EachFaultHitsOnlyTheNthMessageOfItsOperation) {
  EXPECT_EQ(requests(through("")), (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(requests(through("drop:PUSH:2")), (std::vector<uint64_t>{1, 2, 4}));
  EXPECT_EQ(requests(through("drop:PULL")), (std::vector<uint64_t>{1, 3, 4}));
  EXPECT_EQ(requests(through("duplicate:PUSH:3")), (std::vector<uint64_t>{1, 2, 3, 4, 4}));
  EXPECT_EQ(requests(through("reorder:PUSH:1")), (std::vector<uint64_t>{2, 1, 3, 4}));
  EXPECT_EQ(requests(through("reorder:PUSH:3", true)), (std::vector<uint64_t>{1, 2, 3, 4}));  // let go in time
  EXPECT_EQ(requests(through("delay:PUSH:1:0.1", true)), (std::vector<uint64_t>{2, 3, 4, 1}));
  EXPECT_EQ(requests(through("delay:PUSH:1:30", true)), (std::vector<uint64_t>{2, 3, 4}));  // still held
  EXPECT_EQ(requests(through("drop:PUSH:9")), (std::vector<uint64_t>{1, 2, 3, 4}));  // no 9th PUSH
  // A reorder lets only the reordered message go with the next one, not a delayed one.
  EXPECT_EQ(requests(through("delay:PUSH:1:30,reorder:PULL:1")), (std::vector<uint64_t>{3, 2, 4}));
}

TEST(FaultEndpointTest, TruncateCutsTheLastFrameAndCorruptFlipsTheHeadersFirstKey) {
  const std::vector<Message> cut = through("truncate:PUSH:2");
  ASSERT_EQ(cut.size(), 4u);
  EXPECT_EQ(cut[2].frames.back().size(), 8u);  // 16 bytes of payload, halved
  EXPECT_EQ(cut[0].frames.back().size(), 16u);
  const std::vector<Message> flipped = through("corrupt:PULL:1");
  ASSERT_EQ(flipped.size(), 4u);
  Header h;
  std::string error;
  EXPECT_FALSE(decode_header(flipped[1].frames[0].data(), flipped[1].frames[0].size(), &h, &error));
  EXPECT_NE(error.find("unknown header field 'mqgic'"), std::string::npos) << error;
  EXPECT_EQ(request_of(flipped[2]), 3u);
}

TEST(FaultEndpointTest, BadRulesAreUsageErrorsNamingThem) {
  EXPECT_EQ(parse_fault_rules("drop:PUSH:3,delay:PARAMS:2:1.5").size(), 2u);
  for (const char* bad : {"drop", "lose:PUSH", "drop:PUHS", "drop:PUSH:0", "delay:PUSH:1:-1", "drop:PUSH:x",
                          "drop:PUSH:1:2:3"}) {
    try {
      parse_fault_rules(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

// A ring link that records what it is asked to send; it always has room.
class RecordingLink final : public Link {
 public:
  explicit RecordingLink(std::vector<std::string>* sent) : sent_(sent) {}
  const std::string& address() const override { return address_; }
  void connect_right(const std::string&) override {}
  bool try_send(std::vector<Frame>* frames, Clock::time_point) override {
    std::string text;
    for (const Frame& f : *frames) text += (text.empty() ? "" : "|") + f.to_string();
    sent_->push_back(text);
    frames->clear();
    return true;
  }
  bool send(std::vector<Frame>* frames, Clock::time_point deadline) override { return try_send(frames, deadline); }
  bool try_recv(std::vector<Frame>*) override { return false; }
  bool wait(bool, bool, Clock::time_point deadline) override {
    std::this_thread::sleep_until(deadline);  // nothing ever arrives
    return false;
  }
  void set_close_linger(int) override {}
  void close_right() override {}

 private:
  std::string address_ = "recorder";
  std::vector<std::string>* sent_;
};

// Ring messages here are "OP:n" headers with an optional payload frame; the namer reads the OP.
std::vector<Frame> ring_message(const std::string& header, const std::string& payload = "") {
  std::vector<Frame> frames;
  frames.emplace_back(header);
  if (!payload.empty()) frames.emplace_back(payload);
  return frames;
}
std::string name_of(const std::vector<Frame>& frames, std::string* detail) {
  const std::string header = frames.at(0).to_string();
  *detail = header;
  return header.substr(0, header.find(':'));
}

// Sends REDUCE:1, GATHER:2, REDUCE:3, REDUCE:4 (each with a payload) through the faults, then
// waits on the link until `wait_s` passed; returns what reached the wire, in order.
std::vector<std::string> through_link(const std::string& faults, double wait_s = 0) {
  std::vector<std::string> sent;
  auto link = with_faults(std::make_unique<RecordingLink>(&sent),
                          parse_fault_rules(faults, {"REDUCE", "GATHER"}), &name_of);
  const auto deadline = deadline_after(5);
  for (const char* header : {"REDUCE:1", "GATHER:2", "REDUCE:3", "REDUCE:4"}) {
    std::vector<Frame> frames = ring_message(header, "payload");
    EXPECT_TRUE(link->try_send(&frames, deadline)) << header;
    EXPECT_TRUE(frames.empty()) << header << ": a sent message is consumed";
  }
  const auto until = deadline_after(wait_s);
  while (Clock::now() < until) link->wait(true, false, until);
  return sent;
}

using Wire = std::vector<std::string>;

TEST(FaultLinkTest, EachFaultDoesWhatItSaysToTheNthMessageOfItsOperationOnly) {
  EXPECT_EQ(through_link(""), (Wire{"REDUCE:1|payload", "GATHER:2|payload", "REDUCE:3|payload", "REDUCE:4|payload"}));
  EXPECT_EQ(through_link("drop:REDUCE:2"), (Wire{"REDUCE:1|payload", "GATHER:2|payload", "REDUCE:4|payload"}));
  EXPECT_EQ(through_link("duplicate:GATHER:1"),
            (Wire{"REDUCE:1|payload", "GATHER:2|payload", "GATHER:2|payload", "REDUCE:3|payload", "REDUCE:4|payload"}));
  EXPECT_EQ(through_link("reorder:REDUCE:1"),
            (Wire{"GATHER:2|payload", "REDUCE:1|payload", "REDUCE:3|payload", "REDUCE:4|payload"}));
  EXPECT_EQ(through_link("truncate:REDUCE:3"),  // the third REDUCE
            (Wire{"REDUCE:1|payload", "GATHER:2|payload", "REDUCE:3|payload", "REDUCE:4|pay"}));
  const Wire corrupted = through_link("corrupt:GATHER:1");
  ASSERT_EQ(corrupted.size(), 4u);
  EXPECT_EQ(corrupted[1], std::string("GATHE") + static_cast<char>('R' ^ 0x10) + ":2|payload");
}

TEST(FaultLinkTest, ADelayedMessageHoldsBackTheOnesAfterItAsAStalledConnectionDoes) {
  std::vector<std::string> sent;
  auto link = with_faults(std::make_unique<RecordingLink>(&sent), parse_fault_rules("delay:GATHER:1:0.3", {"GATHER"}),
                          &name_of);
  const auto start = Clock::now();
  for (const char* header : {"REDUCE:1", "GATHER:2", "REDUCE:3"}) {
    std::vector<Frame> frames = ring_message(header);
    ASSERT_TRUE(link->try_send(&frames, deadline_after(5)));
  }
  EXPECT_EQ(sent, (Wire{"REDUCE:1"}));  // GATHER:2 held, REDUCE:3 behind it
  // The link's wait wakes up when the held message is due, and sends it and what is behind it.
  while (sent.size() < 3 && Clock::now() < start + std::chrono::seconds(5)) link->wait(true, false, deadline_after(5));
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(sent, (Wire{"REDUCE:1", "GATHER:2", "REDUCE:3"}));
  EXPECT_GE(waited, 0.29);
  EXPECT_LT(waited, 3.0);
}

TEST(FaultLinkTest, HeldMessagesAreCopiesAndGoOutWhenTheLinkIsDestroyed) {
  std::vector<std::string> sent;
  {
    auto link = with_faults(std::make_unique<RecordingLink>(&sent), parse_fault_rules("delay:REDUCE:1:60", {"REDUCE"}),
                            &name_of);
    std::string buffer = "borrowed";
    bool returned = false;
    std::vector<Frame> frames;
    frames.emplace_back("REDUCE:1");
    frames.emplace_back(std::shared_ptr<const void>(buffer.data(), [&returned](const void*) { returned = true; }),
                        buffer.data(), buffer.size());
    ASSERT_TRUE(link->try_send(&frames, deadline_after(5)));
    EXPECT_TRUE(returned) << "the held message must not keep the sender's buffer";
    buffer = "changed!";
    EXPECT_TRUE(sent.empty());
  }
  EXPECT_EQ(sent, (Wire{"REDUCE:1|borrowed"}));
}

TEST(FaultLinkTest, RingOperationsAreAcceptedWhereTheProcessNamesThem) {
  EXPECT_EQ(parse_fault_rules("drop:REDUCE:2", {"REDUCE"}).size(), 1u);
  EXPECT_THROW(parse_fault_rules("drop:REDUCE:2"), UsageError);  // a PS has no ring
}

}  // namespace
}  // namespace pstrain
