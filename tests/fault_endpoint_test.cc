// The fault double itself (shared/net/fault_endpoint.h): over an endpoint that records what it is
// asked to send, each kind of fault does to the nth message of its operation what it says, and
// nothing to any other message. tests/fault_test.cc runs real jobs with it.
#include "shared/net/fault_endpoint.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

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

}  // namespace
}  // namespace pstrain
