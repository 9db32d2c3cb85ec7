// The PS channel's one receive loop (worker/ps_link/channel.h): each message goes to whoever
// awaits its request, whichever wait is running when it arrives. A scripted endpoint plays the
// shards: no sockets, no threads, nothing timed (a wait that asks for more than the script holds
// fails the test at once).
#include <gtest/gtest.h>

#include <deque>
#include <stdexcept>

#include "shared/util/error.h"
#include "shared/wire/protocol.h"
#include "shared/wire/sparse_wire.h"
#include "tests/test_util/errors.h"
#include "worker/ps_link/channel.h"
#include "worker/ps_link/dense_client.h"
#include "worker/ps_link/row_client.h"
#include "worker/ps_link/stats_client.h"

namespace pstrain {
namespace {

constexpr uint64_t kTotal = 8;  // two shards of 4 floats, one chunk each

class ScriptedEndpoint final : public Endpoint {
 public:
  bool send(Message&& msg, Clock::time_point, std::string*) override {
    Header h;
    std::string error;
    EXPECT_TRUE(decode_header(msg.frames[0].data(), msg.frames[0].size(), &h, &error)) << error;
    sent.push_back(h);
    return true;
  }
  bool recv(Message* msg, Clock::time_point) override {
    if (script.empty()) throw std::runtime_error("the script has no more messages");
    *msg = std::move(script.front());
    script.pop_front();
    return true;
  }
  std::string address(int shard) const override { return "shard" + std::to_string(shard); }
  void close(Clock::time_point) override {}

  // A message from `shard`: h, and payload as its second frame when not empty.
  void add(int shard, const Header& h, const std::string& payload = "") {
    Message msg;
    msg.shard = shard;
    const std::string header = encode_header(h);
    msg.frames.emplace_back(header.data(), header.size());
    if (!payload.empty()) msg.frames.emplace_back(payload.data(), payload.size());
    script.push_back(std::move(msg));
  }

  std::deque<Message> script;
  std::vector<Header> sent;
};

Header reply(Op op, uint64_t request_id, uint64_t step = 0) {
  Header h;
  h.op = op;
  h.request_id = request_id;
  h.step = step;
  return h;
}

class PsChannelTest : public ::testing::Test {
 protected:
  PsChannelTest() : channel_(options(), kTotal, endpoint_) {}

  static PsClientOptions options() {
    PsClientOptions o;
    o.num_ps = 2;
    o.shared_memory = false;
    o.row_dim = 2;
    return o;
  }
  // Both shards welcome this worker (HELLO is request 1) at step 0.
  void hello() {
    for (int s = 0; s < 2; ++s) {
      Header h = reply(Op::kWelcome, 1);
      h.offset = 4 * static_cast<uint64_t>(s);
      h.length = 4;
      h.chunk = 4;
      endpoint_.add(s, h);
    }
    ASSERT_EQ(channel_.hello(1), 0u);
  }
  // Shard s's PARAMS of version 1 for request `rid`.
  void add_params(int s, uint64_t rid) {
    Header h = reply(Op::kParams, rid, 1);
    h.offset = 4 * static_cast<uint64_t>(s);
    h.length = 4;
    const std::vector<float> values(4, 1.0f + static_cast<float>(s));
    endpoint_.add(s, h, std::string(reinterpret_cast<const char*>(values.data()), 4 * sizeof(float)));
  }
  // Shard s's SPARSE_ROWS for ticket `rid`: one row of table 0, values {s, s}.
  void add_rows(int s, uint64_t rid) {
    SparseSection section;
    section.dim = 2;
    section.values = {static_cast<float>(s), static_cast<float>(s)};
    const std::string body = encode_sparse_body(Op::kSparseRows, {section});
    Header h = reply(Op::kSparseRows, rid, 1);
    h.length = body.size() / 4;
    endpoint_.add(s, h, body);
  }
  uint64_t request_one_row_each(RowClient& rows) {
    SparseSection asked;
    asked.ids = {7};
    const std::vector<SparseSection> one{asked};
    return rows.request_rows(1, {&one, &one});
  }

  ScriptedEndpoint endpoint_;
  PsChannel channel_;
};

// Rows asked for before the PULL arrive while receive_params waits: kept for receive_rows, which
// then returns them without receiving anything more.
TEST_F(PsChannelTest, RowsArrivingDuringThePullAreKeptForTheirAwaiter) {
  hello();
  DenseClient dense(channel_, 0);
  RowClient rows(channel_);
  const uint64_t ticket = request_one_row_each(rows);  // request 2
  dense.request_params(1);                             // request 3
  add_rows(1, ticket);
  add_params(0, 3);
  add_rows(0, ticket);
  add_params(1, 3);
  std::vector<float> params(kTotal, 0.0f);
  dense.receive_params(params.data(), nullptr, nullptr);
  EXPECT_EQ(params, std::vector<float>({1, 1, 1, 1, 2, 2, 2, 2}));
  ASSERT_TRUE(endpoint_.script.empty());
  const auto answers = rows.receive_rows(ticket);
  ASSERT_EQ(answers.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    ASSERT_EQ(answers[s].size(), 1u);
    EXPECT_EQ(answers[s][0].values, std::vector<float>(2, static_cast<float>(s)));
  }
}

// An ERROR about a pending row request ends whichever wait is running, naming the shard and the
// request it refused; one about nobody's request is named by the running wait.
TEST_F(PsChannelTest, AnErrorEndsTheWaitNamingTheShardAndItsRequest) {
  hello();
  DenseClient dense(channel_, 0);
  RowClient rows(channel_);
  const uint64_t ticket = request_one_row_each(rows);
  dense.request_params(1);
  add_params(0, 3);
  Header error = reply(Op::kError, ticket);
  error.message = "unknown embedding table 0";
  endpoint_.add(1, error);
  std::vector<float> params(kTotal, 0.0f);
  EXPECT_EQ(test::error_of([&] { dense.receive_params(params.data(), nullptr, nullptr); }),
            "ps1 rejected SPARSE_PULL: unknown embedding table 0");

  StatsClient stats(channel_);
  Header other = reply(Op::kError, 99);
  other.message = "no such thing";
  endpoint_.add(0, other);
  std::vector<double> sums{1.0, 2.0};
  EXPECT_EQ(test::error_of([&] { stats.combine(1, 0, sums); }),
            "ps0 rejected batch-norm statistics: no such thing");
}

// A WAITING about a request answered since and a NORM of a pull answered since (it crossed the
// PARAMS) are dropped by whichever wait receives them; the awaited reply still counts.
TEST_F(PsChannelTest, LateWaitingAndNormOfAnsweredRequestsAreDropped) {
  hello();
  DenseClient dense(channel_, 0);
  RowClient rows(channel_);
  StatsClient stats(channel_);
  dense.request_params(1);  // request 2
  add_params(0, 2);
  add_params(1, 2);
  std::vector<float> params(kTotal, 0.0f);
  dense.receive_params(params.data(), nullptr, nullptr);

  const uint64_t ticket = request_one_row_each(rows);  // request 3
  Header norm = reply(Op::kNorm, 2, 0);
  norm.length = kNormWords;
  endpoint_.add(0, norm, std::string(kNormWords * 4, '\0'));
  endpoint_.add(1, reply(Op::kWaiting, 2));
  add_rows(0, ticket);
  endpoint_.add(1, norm, std::string(kNormWords * 4, '\0'));
  add_rows(1, ticket);
  const size_t sent = endpoint_.sent.size();
  EXPECT_EQ(rows.receive_rows(ticket).size(), 2u);
  EXPECT_EQ(endpoint_.sent.size(), sent) << "a CLIP for a step the shards applied already";

  std::vector<double> sums{1.0, 2.0};
  endpoint_.add(1, reply(Op::kWaiting, 2));
  Header sum = reply(Op::kStatsSum, 4, 1);
  sum.offset = 0;
  sum.length = 4;
  const std::vector<double> total{3.0, 5.0};
  endpoint_.add(0, sum, std::string(reinterpret_cast<const char*>(total.data()), sizeof(double) * 2));
  stats.combine(1, 0, sums);
  EXPECT_EQ(sums, total);
  EXPECT_TRUE(endpoint_.script.empty());
}

}  // namespace
}  // namespace pstrain
