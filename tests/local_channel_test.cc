// The same-host local channel of the PS transport (shared/net/local_channel.h, docs/wire_protocol.md
// "Same host"): a client switched to it sends its headers there and gets the server's header-only
// replies there, under the same route as its ZeroMQ messages; payload frames stay on ZeroMQ; the
// first connection naming a route keeps it; a closed peer is forgotten.
#include "shared/net/local_channel.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>
#include <zmq.hpp>

#include "shared/net/zmq_transport.h"

namespace pstrain {
namespace {

constexpr double kWait = 10;  // seconds: a bound, never a sleep

std::string unique_name(const std::string& what) {
  return "@pstrain-test-" + what + "-" + std::to_string(::getpid());
}

Message header(const std::string& text, int shard = 0) {
  Message m;
  m.shard = shard;
  m.frames.emplace_back(text.data(), text.size());
  return m;
}

Message receive(Endpoint& endpoint) {
  Message m;
  EXPECT_TRUE(endpoint.recv(&m, deadline_after(kWait))) << "nothing arrived";
  return m;
}

void send(Endpoint& endpoint, Message m) {
  std::string error;
  ASSERT_TRUE(endpoint.send(std::move(m), deadline_after(kWait), &error)) << error;
}

TEST(LocalChannelTest, HeadersMoveToTheChannelUnderTheSameRouteAndPayloadsStayOnZeroMq) {
  zmq::context_t context(1);
  const std::string ipc = unique_name("route");
  auto server = make_zmq_server(context, "127.0.0.1", 0, ipc, Security{}, true);
  auto client = make_zmq_client(context, {"ipc://" + ipc}, Security{}, true);

  send(*client, header("hello"));  // before the switch: ZeroMQ
  const Message hello = receive(*server);
  EXPECT_FALSE(hello.local);
  EXPECT_EQ(hello.frames.at(0).to_string(), "hello");

  std::string why;
  ASSERT_TRUE(client->use_local_channel(0, &why)) << why;
  send(*client, header("pull"));
  const Message pull = receive(*server);
  EXPECT_TRUE(pull.local);
  EXPECT_EQ(pull.route, hello.route);  // the same peer, whichever way it came
  EXPECT_EQ(pull.frames.at(0).to_string(), "pull");

  Message reply = header("params");
  reply.route = pull.route;
  send(*server, std::move(reply));
  const Message params = receive(*client);
  EXPECT_TRUE(params.local);
  EXPECT_EQ(params.shard, 0);
  EXPECT_EQ(params.frames.at(0).to_string(), "params");

  // A message with a payload frame goes through ZeroMQ both ways, to the same route.
  Message init = header("init");
  init.frames.emplace_back(std::string(100000, 'x').data(), 100000);
  send(*client, std::move(init));
  const Message init_in = receive(*server);
  EXPECT_FALSE(init_in.local);
  EXPECT_EQ(init_in.route, hello.route);
  ASSERT_EQ(init_in.frames.size(), 2u);
  EXPECT_EQ(init_in.frames[1].size(), 100000u);
  Message big = header("big");
  big.route = hello.route;
  big.frames.emplace_back(std::string(5000, 'y').data(), 5000);
  send(*server, std::move(big));
  const Message big_in = receive(*client);
  EXPECT_FALSE(big_in.local);
  ASSERT_EQ(big_in.frames.size(), 2u);

  // Many headers in a row arrive whole and in order.
  for (int i = 0; i < 50; ++i) send(*client, header("push " + std::to_string(i)));
  for (int i = 0; i < 50; ++i) {
    const Message m = receive(*server);
    ASSERT_TRUE(m.local);
    ASSERT_EQ(m.frames.at(0).to_string(), "push " + std::to_string(i));
  }
  // Replies beyond what the client's queue holds (the server never waits) overflow into ZeroMQ:
  // every one arrives, in order on each channel.
  constexpr int kFlood = 1000;  // well under ZeroMQ's queue of 1000 plus what the channel holds
  for (int i = 0; i < kFlood; ++i) {
    Message m = header("chunk " + std::to_string(i) + std::string(300, '.'));
    m.route = hello.route;
    send(*server, std::move(m));
  }
  int overflowed = 0, last_local = -1, last_zmq = -1;
  for (int i = 0; i < kFlood; ++i) {
    const Message m = receive(*client);
    const std::string text = m.frames.at(0).to_string();
    const int n = std::stoi(text.substr(6));
    int& last = m.local ? last_local : last_zmq;
    ASSERT_GT(n, last) << "out of order on " << (m.local ? "the local channel" : "ZeroMQ");
    last = n;
    overflowed += m.local ? 0 : 1;
  }
  EXPECT_GT(overflowed, 0) << "the client's queue held " << kFlood << " replies: flood it harder";
  client->close(deadline_after(1));
  server->close(deadline_after(1));
}

TEST(LocalChannelTest, NoChannelWhereTheServerHasNoneOrTheAddressIsNotLocal) {
  zmq::context_t context(1);
  const std::string ipc = unique_name("none");
  auto server = make_zmq_server(context, "127.0.0.1", 0, ipc, Security{}, false);
  auto client = make_zmq_client(context, {"ipc://" + ipc, server->address()}, Security{}, true);
  std::string why;
  EXPECT_FALSE(client->use_local_channel(0, &why));
  EXPECT_NE(why.find("cannot connect to @" + ipc.substr(1) + ".local"), std::string::npos) << why;
  EXPECT_FALSE(client->use_local_channel(1, &why));  // tcp: another host, as far as it knows
  EXPECT_EQ(why, "not an ipc://@ address");
  auto plain = make_zmq_client(context, {"ipc://" + ipc}, Security{}, false);
  EXPECT_FALSE(plain->use_local_channel(0, &why));
  // Everything still goes through ZeroMQ.
  send(*client, header("still here"));
  EXPECT_FALSE(receive(*server).local);
}

TEST(LocalChannelTest, TheFirstConnectionKeepsARouteAndAClosedPeerIsForgotten) {
  zmq::context_t context(1);
  const std::string ipc = unique_name("first");
  auto server = make_zmq_server(context, "127.0.0.1", 0, ipc, Security{}, true);
  auto client = make_zmq_client(context, {"ipc://" + ipc}, Security{}, true);
  send(*client, header("hello"));
  const std::string route = receive(*server).route;
  std::string why;
  ASSERT_TRUE(client->use_local_channel(0, &why)) << why;
  send(*client, header("one"));
  ASSERT_TRUE(receive(*server).local);

  // An impostor naming the same route is dropped; its packets never arrive.
  LocalSocket impostor;
  ASSERT_TRUE(connect_local(ipc.substr(1) + ".local", &impostor, &why)) << why;
  ASSERT_TRUE(send_packet(impostor, route.data(), route.size(), &why)) << why;
  ASSERT_TRUE(send_packet(impostor, "forged", 6, &why)) << why;
  send(*client, header("two"));
  const Message two = receive(*server);
  EXPECT_EQ(two.frames.at(0).to_string(), "two");
  EXPECT_EQ(two.route, route);

  // The real client's replies still reach it; after it closes, the server answers by ZeroMQ
  // (which has no peer either: the reply is dropped or refused, never sent to the impostor).
  Message reply = header("reply");
  reply.route = route;
  send(*server, std::move(reply));
  EXPECT_EQ(receive(*client).frames.at(0).to_string(), "reply");
  client->close(deadline_after(1));
  Message nothing;
  EXPECT_FALSE(server->recv(&nothing, deadline_after(0.2)));  // notices the close, returns nothing
  std::string packet;
  EXPECT_NE(receive_packet(impostor, &packet), PacketResult::kPacket);
  server->close(deadline_after(1));
}

}  // namespace
}  // namespace pstrain
