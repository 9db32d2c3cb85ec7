// One suite, every implementation of the transport (shared/net/transport.h). Endpoints: ZeroMQ
// over TCP, over ipc, with CURVE, switched to the same-host local channel, and wrapped by the
// fault double with no faults (shared/net/fault_endpoint.h). Each must carry header-only and
// payload messages both ways with every byte intact, keep one peer's messages in order, honour a
// receive deadline, and close twice without harm. Ring links (what the ring all-reduce runs on):
// ZeroMQ over TCP, with CURVE, and wrapped by the fault double; the same checks, and a sender
// that runs ahead is held back, and a frame's keeper is let go once it is sent or dropped.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "shared/net/curve.h"
#include "shared/net/fault_endpoint.h"
#include "shared/net/zmq_transport.h"
#include "shared/util/clock.h"
#include "test_util/idx_writer.h"

namespace pstrain {
namespace {

constexpr double kWait = 10;  // seconds: a bound, never a sleep

class TransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& kind = GetParam();
    static int serial = 0;
    const std::string ipc = "@pstrain-transport-" + std::to_string(::getpid()) + "-" + std::to_string(++serial);
    if (kind == "curve") {
      const std::string path = dir_.path + "/job.key";
      std::ofstream(path) << make_key_file_text();
      ::chmod(path.c_str(), 0600);
      security_ = read_key_file(path);
      zap_ = make_zap_handler(context_, security_);
    }
    const bool by_ipc = kind == "ipc" || kind == "local";
    server_ = make_zmq_server(context_, "127.0.0.1", 0, by_ipc ? ipc : "", security_, kind == "local");
    client_ = make_zmq_client(context_, {by_ipc ? "ipc://" + ipc : server_->address()}, security_, kind == "local");
    if (kind == "faulty") client_ = with_faults(std::move(client_), {});
    route_ = receive(*server_, frame("hello")).route;  // the server learns the client's route
    if (kind == "local") {
      std::string why;
      ASSERT_TRUE(client_->use_local_channel(0, &why)) << why;
    }
  }

  static Message frame(const std::string& header, size_t payload_bytes = 0, char fill = 0) {
    Message m;
    m.shard = 0;
    m.frames.emplace_back(header.data(), header.size());
    if (payload_bytes > 0) {
      std::string payload(payload_bytes, fill);
      for (size_t i = 0; i < payload_bytes; i += 4093) payload[i] = static_cast<char>(i / 4093);
      m.frames.emplace_back(payload.data(), payload.size());
    }
    return m;
  }
  // Sends `m` from the client and returns what the server received.
  Message receive(Endpoint& server, Message m) {
    std::string error;
    EXPECT_TRUE(client_->send(std::move(m), deadline_after(kWait), &error)) << error;
    Message in;
    EXPECT_TRUE(server.recv(&in, deadline_after(kWait))) << "nothing arrived";
    return in;
  }
  Message reply(Message m) {
    m.route = route_;
    std::string error;
    EXPECT_TRUE(server_->send(std::move(m), deadline_after(kWait), &error)) << error;
    Message in;
    EXPECT_TRUE(client_->recv(&in, deadline_after(kWait))) << "nothing came back";
    return in;
  }

  TempDir dir_{"transport"};
  zmq::context_t context_{1};
  Security security_;
  std::unique_ptr<ZapHandler> zap_;
  std::unique_ptr<Endpoint> server_, client_;
  std::string route_;
};

TEST_P(TransportTest, HeadersAndPayloadsArriveWhole) {
  const Message pull = receive(*server_, frame("pull"));
  EXPECT_EQ(pull.route, route_);
  EXPECT_EQ(pull.local, GetParam() == "local");  // header-only: over the local channel once switched
  ASSERT_EQ(pull.frames.size(), 1u);
  EXPECT_EQ(pull.frames[0].to_string(), "pull");
  const Message push = receive(*server_, frame("push", 1 << 20, 'g'));
  EXPECT_EQ(push.route, route_);
  ASSERT_EQ(push.frames.size(), 2u);
  EXPECT_EQ(push.frames[1].to_string(), frame("", 1 << 20, 'g').frames[1].to_string());
  const Message params = reply(frame("params", 3 << 20, 'p'));
  EXPECT_EQ(params.shard, 0);
  ASSERT_EQ(params.frames.size(), 2u);
  EXPECT_EQ(params.frames[0].to_string(), "params");
  EXPECT_EQ(params.frames[1].to_string(), frame("", 3 << 20, 'p').frames[1].to_string());
  const Message ack = reply(frame("ack"));
  EXPECT_EQ(ack.local, GetParam() == "local");
  ASSERT_EQ(ack.frames.size(), 1u);
  EXPECT_EQ(ack.frames[0].to_string(), "ack");
}

TEST_P(TransportTest, OnePeersMessagesKeepTheirOrder) {
  std::string error;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(client_->send(frame("m" + std::to_string(i)), deadline_after(kWait), &error)) << error;
  }
  for (int i = 0; i < 200; ++i) {
    Message in;
    ASSERT_TRUE(server_->recv(&in, deadline_after(kWait))) << "message " << i << " did not arrive";
    EXPECT_EQ(in.frames.at(0).to_string(), "m" + std::to_string(i));
  }
}

// Messages with a payload and header-only ones, interleaved, as a worker sends SPARSE_PUSH and
// then DONE: on the local channel they go two ways (the headers over the channel, the others
// through ZeroMQ), and a header must not overtake the payload message sent before it, nor the
// other way round. The client closes at once after the last (linger 0, as a worker does after
// DONE's acknowledgement): everything sent before it is in.
TEST_P(TransportTest, OnePeersMessagesKeepTheirOrderWithAndWithoutPayloads) {
  std::string error;
  constexpr int kMessages = 60;
  const auto payload_of = [](int i) { return i % 3 == 0 ? size_t{0} : static_cast<size_t>(1000 + 4096 * (i % 5)); };
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_TRUE(client_->send(frame("m" + std::to_string(i), payload_of(i), 'a'), deadline_after(kWait), &error))
        << error;
  }
  for (int i = 0; i < kMessages; ++i) {
    Message in;
    ASSERT_TRUE(server_->recv(&in, deadline_after(kWait))) << "message " << i << " did not arrive";
    ASSERT_EQ(in.frames.at(0).to_string(), "m" + std::to_string(i));
    EXPECT_EQ(in.frames.size(), payload_of(i) > 0 ? 2u : 1u);
    EXPECT_EQ(in.route, route_);
  }
  // The last word: a push, DONE, its acknowledgement, and the client closes at once.
  ASSERT_TRUE(client_->send(frame("push", 1 << 16, 'p'), deadline_after(kWait), &error)) << error;
  ASSERT_TRUE(client_->send(frame("done"), deadline_after(kWait), &error)) << error;
  Message in;
  ASSERT_TRUE(server_->recv(&in, deadline_after(kWait)));
  ASSERT_EQ(in.frames.at(0).to_string(), "push") << "DONE overtook the push sent before it";
  ASSERT_TRUE(server_->recv(&in, deadline_after(kWait)));
  ASSERT_EQ(in.frames.at(0).to_string(), "done");
  EXPECT_EQ(reply(frame("ack")).frames.at(0).to_string(), "ack");
  client_->close(Clock::now());
}

TEST_P(TransportTest, AReceiveWithNothingToReceiveEndsAtItsDeadline) {
  for (Endpoint* endpoint : {server_.get(), client_.get()}) {
    const auto start = Clock::now();
    Message in;
    EXPECT_FALSE(endpoint->recv(&in, deadline_after(0.2)));
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_GE(waited, 0.19);
    EXPECT_LT(waited, 2.0);
  }
}

TEST_P(TransportTest, CloseTwiceIsHarmless) {
  client_->close(deadline_after(1));
  client_->close(deadline_after(1));
  server_->close(deadline_after(1));
  server_->close(deadline_after(1));
}

// Two links closed into a ring of two: a sends to b, b to a.
class LinkTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& kind = GetParam();
    if (kind == "curve") {
      const std::string path = dir_.path + "/job.key";
      std::ofstream(path) << make_key_file_text();
      ::chmod(path.c_str(), 0600);
      security_ = read_key_file(path);
      zap_ = make_zap_handler(context_, security_);
    }
    a_ = make_zmq_link(context_, "127.0.0.1", 0, security_);
    b_ = make_zmq_link(context_, "127.0.0.1", 0, security_);
    if (kind == "faulty") {
      const MessageNamer none = [](const std::vector<Frame>&, std::string*) { return std::string(); };
      a_ = with_faults(std::move(a_), {}, none);
      b_ = with_faults(std::move(b_), {}, none);
    }
    a_->connect_right(b_->address());
    b_->connect_right(a_->address());
  }

  static std::vector<Frame> message(const std::string& header, size_t payload_bytes = 0, char fill = 0) {
    std::vector<Frame> frames;
    frames.emplace_back(header);
    if (payload_bytes > 0) {
      std::string payload(payload_bytes, fill);
      for (size_t i = 0; i < payload_bytes; i += 4093) payload[i] = static_cast<char>(i / 4093);
      frames.emplace_back(std::move(payload));
    }
    return frames;
  }
  static std::vector<Frame> receive(Link& link) {
    std::vector<Frame> in;
    const auto deadline = deadline_after(kWait);
    while (!link.try_recv(&in)) {
      if (!link.wait(true, false, deadline) && Clock::now() >= deadline) {
        ADD_FAILURE() << "nothing arrived";
        return in;
      }
    }
    return in;
  }

  TempDir dir_{"link"};
  zmq::context_t context_{1};
  Security security_;
  std::unique_ptr<ZapHandler> zap_;
  std::unique_ptr<Link> a_, b_;
};

TEST_P(LinkTest, MessagesArriveWholeBothWays) {
  std::vector<Frame> out = message("reduce", 3 << 20, 'r');
  ASSERT_TRUE(a_->send(&out, deadline_after(kWait)));
  EXPECT_TRUE(out.empty()) << "a sent message is consumed";
  std::vector<Frame> in = receive(*b_);
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0].to_string(), "reduce");
  EXPECT_EQ(in[1].to_string(), message("", 3 << 20, 'r')[1].to_string());
  out = message("check");
  ASSERT_TRUE(b_->send(&out, deadline_after(kWait)));
  in = receive(*a_);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].to_string(), "check");
}

TEST_P(LinkTest, MessagesKeepTheirOrder) {
  for (int i = 0; i < 200; ++i) {
    std::vector<Frame> out = message("m" + std::to_string(i), i % 7 == 0 ? 4096 : 0);
    ASSERT_TRUE(a_->send(&out, deadline_after(kWait))) << i;
  }
  for (int i = 0; i < 200; ++i) EXPECT_EQ(receive(*b_).at(0).to_string(), "m" + std::to_string(i));
}

TEST_P(LinkTest, ASenderThatRunsAheadIsHeldBackThenEverythingArrives) {
  // 1 MiB messages fill the kernel's buffers and the bounded queues: try_send says no, without
  // taking the message, while b does not read.
  int queued = 0;
  std::vector<Frame> out = message("q0", 1 << 20);
  while (queued < 1000 && a_->try_send(&out, deadline_after(kWait))) out = message("q" + std::to_string(++queued), 1 << 20);
  ASSERT_LT(queued, 1000) << "the link never pushed back";
  EXPECT_EQ(out.size(), 2u) << "a refused message stays the caller's";
  for (int i = 0; i < queued; ++i) EXPECT_EQ(receive(*b_).at(0).to_string(), "q" + std::to_string(i));
}

TEST_P(LinkTest, WaitingWithNothingToReceiveEndsAtTheDeadline) {
  const auto start = Clock::now();
  std::vector<Frame> in;
  EXPECT_FALSE(a_->try_recv(&in));
  EXPECT_FALSE(a_->wait(true, false, deadline_after(0.2)));
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(waited, 0.19);
  EXPECT_LT(waited, 2.0);
}

TEST_P(LinkTest, AFramesKeeperIsLetGoOnceSentOrDropped) {
  // Sent: a large frame lends the transport its bytes; once b has it, the keeper is let go.
  std::promise<void> sent_back;
  std::string bytes(1 << 20, 's');
  {
    std::vector<Frame> out = message("loan");
    out.emplace_back(std::shared_ptr<const void>(bytes.data(), [&](const void*) { sent_back.set_value(); }), bytes.data(),
                     bytes.size());
    ASSERT_TRUE(a_->send(&out, deadline_after(kWait)));
  }
  EXPECT_EQ(receive(*b_).at(1).to_string(), bytes);
  EXPECT_EQ(sent_back.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  // Dropped: queued for a neighbour that is not there, then close_right.
  auto lone = make_zmq_link(context_, "127.0.0.1", 0, security_);
  lone->connect_right("127.0.0.1:1");  // nobody listens there
  std::promise<void> dropped_back;
  {
    std::vector<Frame> out = message("loan");
    out.emplace_back(std::shared_ptr<const void>(bytes.data(), [&](const void*) { dropped_back.set_value(); }),
                     bytes.data(), bytes.size());
    ASSERT_TRUE(lone->try_send(&out, deadline_after(kWait)));
  }
  auto returned = dropped_back.get_future();
  EXPECT_EQ(returned.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout) << "still queued";
  lone->close_right();
  EXPECT_EQ(returned.wait_for(std::chrono::seconds(10)), std::future_status::ready);
}

INSTANTIATE_TEST_SUITE_P(EveryLink, LinkTest, ::testing::Values("tcp", "curve", "faulty"),
                         [](const auto& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(EveryTransport, TransportTest, ::testing::Values("tcp", "ipc", "curve", "local", "faulty"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pstrain
