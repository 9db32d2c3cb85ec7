// Ring collective (worker/collective/collective.h, docs/collective.md): N ranks as threads in one process,
// each with its own Collective on 127.0.0.1, plus the framing's decoder. No sleeps: ranks meet
// through the rendezvous, and failure tests measure how long each rank took to give up.
#include "worker/collective/collective.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "shared/util/error.h"
#include "test_util/random.h"
#include "worker/collective/ring_wire.h"
#include "worker/collective/shm_allreduce.h"

namespace pstrain {
namespace {

using test::random_floats;

using TestClock = std::chrono::steady_clock;

double seconds_since(TestClock::time_point start) {
  return std::chrono::duration<double>(TestClock::now() - start).count();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct RankOutcome {
  std::string error;   // what() of the pstrain::Error the rank ended with; empty = success
  double seconds = 0;  // from the rank's start to its end
};

using RankBody = std::function<void(int rank, Collective& collective)>;
// Turns rank r's connected ring into the collective under test (e.g. the shared-memory one).
using Wrap = std::function<std::unique_ptr<Collective>(int rank, std::unique_ptr<Collective> ring)>;

// Runs `body` on `world` threads, one Collective each. Rank 0 binds the coordinator on a free
// port and hands the address to the others (race-free). Ranks in `absent` are never started;
// a non-empty `coordinator` replaces rank 0's address (for tests where rank 0 is absent).
std::vector<RankOutcome> run_ranks(int world, const RingOptions& base, const RankBody& body,
                                   const std::set<int>& absent = {}, const std::string& coordinator = "",
                                   const Wrap& wrap = nullptr) {
  zmq::context_t context;
  std::promise<std::string> bound;
  std::shared_future<std::string> address = bound.get_future().share();
  std::vector<RankOutcome> outcomes(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    if (absent.count(r)) continue;
    threads.emplace_back([&, r] {
      const auto start = TestClock::now();
      RankOutcome& out = outcomes[static_cast<size_t>(r)];
      bool told = false;
      try {
        RingOptions o = base;
        o.rank = r;
        o.world = world;
        if (!coordinator.empty()) {
          o.coordinator = coordinator;
        } else if (r == 0) {
          o.coordinator = "127.0.0.1:0";
          o.on_coordinator_bound = [&](const std::string& a) {
            told = true;
            bound.set_value(a);
          };
        } else if (world > 1) {
          if (address.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
            throw Error("test: rank 0 never bound the coordinator");
          }
          o.coordinator = address.get();
        }
        std::unique_ptr<Collective> collective = make_ring_collective(context, o);
        if (wrap) collective = wrap(r, std::move(collective));
        EXPECT_EQ(collective->rank(), r);
        EXPECT_EQ(collective->world(), world);
        body(r, *collective);
      } catch (const Error& e) {
        out.error = e.what();
      }
      if (r == 0 && coordinator.empty() && world > 1 && !told) bound.set_value("127.0.0.1:1");
      out.seconds = seconds_since(start);
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

RingOptions fast_options(double timeout_s) {
  RingOptions o;
  o.timeout_s = timeout_s;
  return o;
}

// The documented summation order: element i of segment s (segments as in docs/collective.md)
// is ((x_s + x_{s+1}) + x_{s+2}) + ... over ranks s, s+1, ..., s-1 (mod N), in float.
std::vector<float> ring_order_sum(const std::vector<std::vector<float>>& inputs) {
  const size_t world = inputs.size(), n = inputs[0].size();
  std::vector<float> out(n);
  const size_t base = n / world, extra = n % world;
  for (size_t s = 0, begin = 0; s < world; ++s) {
    const size_t length = base + (s < extra ? 1 : 0);
    for (size_t i = begin; i < begin + length; ++i) {
      float acc = inputs[s][i];
      for (size_t j = 1; j < world; ++j) acc = inputs[(s + j) % world][i] + acc;
      out[i] = acc;
    }
    begin += length;
  }
  return out;
}

// Per rank: inputs and outputs of one allreduce_sum of n floats and 3 scalars.
struct SumRun {
  std::vector<std::vector<float>> inputs, outputs;
  std::vector<std::vector<double>> scalars;
};

SumRun run_sum(int world, size_t n, const RingOptions& options, const Wrap& wrap = nullptr) {
  SumRun run;
  for (int r = 0; r < world; ++r) {
    run.inputs.push_back(random_floats(n, 1000u * static_cast<uint32_t>(world) + static_cast<uint32_t>(r)));
    run.scalars.push_back({1.0 + r, 64.0 * r, 0.25 * r});  // sums are exact in double
  }
  run.outputs = run.inputs;
  const auto outcomes = run_ranks(world, options, [&](int r, Collective& c) {
    c.allreduce_sum(run.outputs[static_cast<size_t>(r)].data(), n, run.scalars[static_cast<size_t>(r)].data(),
                    3);
  }, {}, "", wrap);
  for (int r = 0; r < world; ++r) EXPECT_EQ(outcomes[static_cast<size_t>(r)].error, "") << "rank " << r;
  return run;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The shared-memory collective's order: ((x_0 + x_1) + x_2) + ... for every element.
std::vector<float> rank_order_sum(const std::vector<std::vector<float>>& inputs) {
  std::vector<float> out = inputs[0];
  for (size_t r = 1; r < inputs.size(); ++r) {
    for (size_t i = 0; i < out.size(); ++i) out[i] += inputs[r][i];
  }
  return out;
}

enum class Order { kRing, kRank };

void expect_correct_sum(const SumRun& run, Order order = Order::kRing) {
  const size_t world = run.inputs.size(), n = run.inputs[0].size();
  const std::vector<float> ordered = order == Order::kRing ? ring_order_sum(run.inputs) : rank_order_sum(run.inputs);
  size_t bad = 0;
  for (size_t i = 0; i < n && bad < 5; ++i) {
    double sum = 0, magnitude = 0;
    for (size_t r = 0; r < world; ++r) {
      sum += run.inputs[r][i];
      magnitude += std::abs(run.inputs[r][i]);
    }
    const double got = run.outputs[0][i];
    if (std::abs(got - sum) > 1e-6 * magnitude) {
      ADD_FAILURE() << "element " << i << ": " << got << " vs reference " << sum;
      ++bad;
    }
  }
  for (size_t r = 0; r < world; ++r) {
    EXPECT_TRUE(same_bits(run.outputs[r], run.outputs[0])) << "rank " << r << " differs from rank 0";
    EXPECT_EQ(run.scalars[r], (std::vector<double>{world * (world + 1) / 2.0, 32.0 * world * (world - 1),
                                                   0.125 * world * (world - 1)}))
        << "rank " << r;
  }
  EXPECT_TRUE(same_bits(run.outputs[0], ordered))
      << "the result does not follow the documented summation order";
}

// ---------------------------------------------------------------------------------------------
// Framing.

TEST(RingWire, HeaderRoundTrips) {
  RingHeader h;
  h.op = RingOp::kGather;
  h.sender = 7;
  h.world = 9;
  h.seq = 0x0102030405060708ull;
  h.step = 15;
  h.segment = 8;
  h.offset = 1ull << 40;
  h.length = 123456789;
  h.total = 1ull << 41;
  h.scalars = 3;
  h.flags = kRingFlagScalars;
  const Frame frame = encode_ring_header(h);
  ASSERT_EQ(frame.size(), kRingHeaderBytes);
  EXPECT_EQ(0, std::memcmp(frame.data(), "PSRC\x01\x00\x07\x00", 8));
  RingHeader back;
  std::string error;
  ASSERT_TRUE(decode_ring_header(frame.data(), frame.size(), &back, &error)) << error;
  EXPECT_TRUE(ring_header_matches(back, h, &error)) << error;
}

std::string decode_error(std::string bytes) {
  RingHeader h;
  std::string error;
  EXPECT_FALSE(decode_ring_header(bytes.data(), bytes.size(), &h, &error));
  return error;
}

TEST(RingWire, MalformedHeadersFailWithTheExactError) {
  RingHeader h;
  h.op = RingOp::kReduce;
  const Frame frame = encode_ring_header(h);
  const std::string good = frame.to_string();
  EXPECT_EQ(decode_error(good.substr(0, 63)), "ring header is 63 bytes, expected 64");
  EXPECT_EQ(decode_error(good + "x"), "ring header is 65 bytes, expected 64");
  EXPECT_EQ(decode_error(""), "ring header is 0 bytes, expected 64");
  std::string bad = good;
  bad[0] = 'Q';
  EXPECT_EQ(decode_error(bad), "bad magic 0x43525351 (not a pstrain ring message)");
  bad = good;
  bad[4] = 2;
  EXPECT_EQ(decode_error(bad), "ring protocol version 2, this build speaks 1");
  bad = good;
  bad[6] = 0;
  EXPECT_EQ(decode_error(bad), "unknown ring op 0");
  bad[6] = 9;
  EXPECT_EQ(decode_error(bad), "unknown ring op 9");
  bad = good;
  bad[60] = 2;
  EXPECT_EQ(decode_error(bad), "unknown flags 0x2");
}

TEST(RingWire, MismatchNamesTheFirstDifferentField) {
  RingHeader want;
  want.op = RingOp::kReduce;
  want.sender = 2;
  want.seq = 5;
  want.length = 100;
  std::string error;
  RingHeader got = want;
  got.op = RingOp::kBroadcast;
  EXPECT_FALSE(ring_header_matches(got, want, &error));
  EXPECT_EQ(error, "op is BROADCAST, expected REDUCE");
  got = want;
  got.sender = 3;
  EXPECT_FALSE(ring_header_matches(got, want, &error));
  EXPECT_EQ(error, "sender is 3, expected 2");
  got = want;
  got.seq = 4;
  EXPECT_FALSE(ring_header_matches(got, want, &error));
  EXPECT_EQ(error, "seq is 4, expected 5");
  got = want;
  got.length = 99;
  EXPECT_FALSE(ring_header_matches(got, want, &error));
  EXPECT_EQ(error, "length is 99, expected 100");
}

// ---------------------------------------------------------------------------------------------
// Sums.

constexpr int kWorldMinusOne = -1;  // n = world - 1: some segments are empty

// Test names of the (world, n) sum suites, e.g. world3_n7, world3_nWorldMinus1.
std::string world_and_size_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  const int n = std::get<1>(info.param);
  return "world" + std::to_string(std::get<0>(info.param)) + "_n" +
         (n == kWorldMinusOne ? std::string("WorldMinus1") : std::to_string(n));
}

class RingSumTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(RingSumTest, SumIsCorrectBitIdenticalAndInRingOrder) {
  const int world = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam()) == kWorldMinusOne ? world - 1 : std::get<1>(GetParam());
  expect_correct_sum(run_sum(world, static_cast<size_t>(n), fast_options(20)));
}

INSTANTIATE_TEST_SUITE_P(WorldsAndSizes, RingSumTest,
                         ::testing::Combine(::testing::Range(1, 6),
                                            ::testing::Values(0, 1, 7, kWorldMinusOne, 1000003)),
                         world_and_size_name);

// Many chunks per segment, with chunk_bytes not a multiple of 4: the pipeline path.
TEST(RingCollective, SmallChunksPipelineLargeBuffers) {
  RingOptions o = fast_options(20);
  o.chunk_bytes = 1002;  // 250 floats
  expect_correct_sum(run_sum(3, 100003, o));
  o.chunk_bytes = 4;
  expect_correct_sum(run_sum(4, 1001, o));
}

// Sequence numbers advance over allreduce and broadcast calls of varying sizes.
TEST(RingCollective, RepeatedOperationsStayInStep) {
  constexpr int kWorld = 3, kRounds = 25;
  std::vector<std::string> mismatches(kWorld);
  const auto outcomes = run_ranks(kWorld, fast_options(20), [&](int r, Collective& c) {
    for (int round = 0; round < kRounds; ++round) {
      const size_t n = static_cast<size_t>(round * 37 % 101);
      std::vector<float> data(n, static_cast<float>(r + round));
      double count = 1;
      c.allreduce_sum(data.data(), n, &count, 1);
      const float want = static_cast<float>(3 * round + 3);
      for (float x : data) {
        if (x != want) mismatches[static_cast<size_t>(r)] = "round " + std::to_string(round);
      }
      if (count != kWorld) mismatches[static_cast<size_t>(r)] = "count in round " + std::to_string(round);
      if (round % 5 == 0) {
        const std::string blob = c.broadcast(r == 0 ? "round " + std::to_string(round) : "ignored");
        if (blob != "round " + std::to_string(round))
          mismatches[static_cast<size_t>(r)] = "broadcast " + blob;
      }
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].error, "") << "rank " << r;
    EXPECT_EQ(mismatches[static_cast<size_t>(r)], "") << "rank " << r;
  }
}

// allreduce_sum returns only once ZeroMQ has let go of the buffer its frames borrowed: the caller
// scribbles over it and frees it at once, and every rank still ends with the same bits.
TEST(RingCollective, BufferIsFreeWhenTheCallReturns) {
  constexpr int kWorld = 3, kRounds = 6;
  constexpr size_t kN = 200003;
  RingOptions o = fast_options(20);
  o.chunk_bytes = 16 << 10;
  std::vector<std::vector<std::vector<float>>> results(kWorld);
  const auto outcomes = run_ranks(kWorld, o, [&](int r, Collective& c) {
    for (int round = 0; round < kRounds; ++round) {
      auto data =
          std::make_unique<std::vector<float>>(random_floats(kN, static_cast<uint32_t>(10 * round + r)));
      c.allreduce_sum(data->data(), kN, nullptr, 0);
      results[static_cast<size_t>(r)].push_back(*data);
      std::fill(data->begin(), data->end(), std::nanf(""));
      data.reset();
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].error, "") << "rank " << r;
    for (int round = 0; round < kRounds && r > 0; ++round) {
      EXPECT_TRUE(same_bits(results[static_cast<size_t>(r)][static_cast<size_t>(round)],
                            results[0][static_cast<size_t>(round)]))
          << "rank " << r << " round " << round;
    }
  }
}

// The last messages of a rank that destroys its collective right after its last call still reach
// its neighbour (tiny buffers: every frame is a copy, nothing for the call itself to wait on).
TEST(RingCollective, LastMessagesSurviveImmediateShutdown) {
  constexpr int kWorld = 5, kJobs = 20;
  for (int job = 0; job < kJobs; ++job) {
    const auto outcomes = run_ranks(kWorld, fast_options(5), [&](int r, Collective& c) {
      float x = static_cast<float>(r);
      double count = 1;
      c.allreduce_sum(&x, 1, &count, 1);
      if (x != 10.0f || count != kWorld) throw Error("wrong sum on rank " + std::to_string(r));
    });
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_EQ(outcomes[static_cast<size_t>(r)].error, "") << "job " << job << " rank " << r;
    }
  }
}

TEST(RingCollective, BroadcastReturnsRankZerosBytes) {
  constexpr int kWorld = 4;
  std::string id(128, '\0');  // binary, like an NCCL unique id
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7);
  std::vector<std::string> got(kWorld), empty(kWorld, "x");
  const auto outcomes = run_ranks(kWorld, fast_options(20), [&](int r, Collective& c) {
    got[static_cast<size_t>(r)] = c.broadcast(r == 0 ? id : "not this");
    empty[static_cast<size_t>(r)] = c.broadcast(r == 0 ? "" : "not this either");
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].error, "") << "rank " << r;
    EXPECT_EQ(got[static_cast<size_t>(r)], id) << "rank " << r;
    EXPECT_EQ(empty[static_cast<size_t>(r)], "") << "rank " << r;
  }
}

// ---------------------------------------------------------------------------------------------
// Misuse and failures.

// Rank 0 fails at once; its ABORT travels the ring, so nobody waits for the deadline.
TEST(RingCollective, OversizedBroadcastAbortsEveryRankQuickly) {
  const auto outcomes = run_ranks(3, fast_options(20), [](int r, Collective& c) {
    c.broadcast(r == 0 ? std::string(kMaxBroadcastBytes + 1, 'x') : "");
  });
  for (int r = 0; r < 3; ++r) {
    const auto& out = outcomes[static_cast<size_t>(r)];
    EXPECT_TRUE(contains(out.error, "exceeds the limit")) << "rank " << r << ": " << out.error;
    EXPECT_LT(out.seconds, 5) << "rank " << r;
  }
}

// A peer whose buffer length differs is caught by the header check, not mis-added.
TEST(RingCollective, MismatchedLengthsAreAnError) {
  const auto outcomes = run_ranks(2, fast_options(20), [](int r, Collective& c) {
    std::vector<float> data(10 + static_cast<size_t>(r));
    c.allreduce_sum(data.data(), data.size(), nullptr, 0);
  });
  for (int r = 0; r < 2; ++r) {
    const auto& error = outcomes[static_cast<size_t>(r)].error;
    EXPECT_TRUE(contains(error, "total is 1")) << "rank " << r << ": " << error;
  }
}

// Ranks calling different collectives: the message's op and sequence number give it away.
TEST(RingCollective, MismatchedOperationsAreAnError) {
  std::string second_call;
  const auto outcomes = run_ranks(2, fast_options(20), [&](int r, Collective& c) {
    std::vector<float> data(5);
    if (r == 0) {
      c.broadcast("blob");
      try {
        c.allreduce_sum(data.data(), data.size(), nullptr, 0);
      } catch (const Error& e) {
        second_call = e.what();
      }
    } else {
      c.allreduce_sum(data.data(), data.size(), nullptr, 0);
    }
  });
  EXPECT_EQ(outcomes[0].error, "");
  EXPECT_NE(second_call, "") << "rank 0's second call should fail";
  EXPECT_TRUE(contains(outcomes[1].error, "op is BROADCAST, expected REDUCE")) << outcomes[1].error;
}

// Both ranks learn the reason from rank 0's ABORT. (A rank that had not joined yet would only
// see rank 0 fall silent and fail at its deadline.)
TEST(RingCollective, MismatchedChunkSizeFailsTheRendezvous) {
  zmq::context_t context;
  std::promise<std::string> bound;
  auto address = bound.get_future().share();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      RingOptions o = fast_options(20);
      o.rank = r;
      o.world = 2;
      o.chunk_bytes = r == 1 ? 1024 : 4096;
      if (r == 0) {
        o.coordinator = "127.0.0.1:0";
        o.on_coordinator_bound = [&](const std::string& a) { bound.set_value(a); };
      } else {
        o.coordinator = address.get();
      }
      try {
        make_ring_collective(context, o);
      } catch (const Error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(contains(errors[static_cast<size_t>(r)], "rank 1 uses chunk_bytes 1024, rank 0 uses 4096"))
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
  }
}

constexpr double kTimeout = 1.0;
constexpr double kSlack = 1.5;  // scheduling on a loaded 2-core machine

TEST(RingCollective, RankThatNeverJoinsIsNamedAtTheDeadline) {
  const auto outcomes = run_ranks(4, fast_options(kTimeout), [](int, Collective&) {}, {2});
  for (int r : {0, 1, 3}) {
    const auto& out = outcomes[static_cast<size_t>(r)];
    EXPECT_TRUE(contains(out.error, "rank 2 did not join")) << "rank " << r << ": " << out.error;
    EXPECT_LT(out.seconds, kTimeout + kSlack) << "rank " << r;
  }
  EXPECT_GE(outcomes[0].seconds, kTimeout * 0.95);
}

TEST(RingCollective, MissingCoordinatorIsNamedAtTheDeadline) {
  zmq::context_t context;
  zmq::socket_t silent(context, zmq::socket_type::router);  // a port that accepts and never answers
  silent.set(zmq::sockopt::linger, 0);
  silent.bind("tcp://127.0.0.1:*");
  const std::string endpoint = silent.get(zmq::sockopt::last_endpoint);
  const auto outcomes = run_ranks(
      3, fast_options(kTimeout), [](int, Collective&) {}, {0}, endpoint.substr(std::string("tcp://").size()));
  for (int r : {1, 2}) {
    const auto& out = outcomes[static_cast<size_t>(r)];
    EXPECT_TRUE(contains(out.error, "timed out after 1 s: rank 0 (the coordinator")) << out.error;
    EXPECT_GE(out.seconds, kTimeout * 0.95) << "rank " << r;
    EXPECT_LT(out.seconds, kTimeout + kSlack) << "rank " << r;
  }
}

// Rank 2 takes part in the first all-reduce, then stops calling (its Collective stays alive
// until the others are done, or is destroyed at once): everyone else fails near the deadline.
void expect_others_fail_when_rank2_stops(bool rank2_exits) {
  constexpr int kWorld = 4;
  constexpr size_t kN = 300001;
  std::promise<void> others_done;
  std::shared_future<void> done = others_done.get_future().share();
  std::vector<double> second_call(kWorld, 0);
  std::vector<std::string> later(kWorld);
  std::atomic<int> finished{0};
  RingOptions o = fast_options(kTimeout);
  o.chunk_bytes = 64 << 10;
  const auto outcomes = run_ranks(kWorld, o, [&](int r, Collective& c) {
    std::vector<float> data = random_floats(kN, static_cast<uint32_t>(r));
    c.allreduce_sum(data.data(), kN, nullptr, 0);
    if (r == 2) {
      if (!rank2_exits) done.wait_for(std::chrono::seconds(20));
      return;
    }
    const auto start = TestClock::now();
    try {
      c.allreduce_sum(data.data(), kN, nullptr, 0);
    } catch (const Error&) {
      second_call[static_cast<size_t>(r)] = seconds_since(start);
      try {
        c.allreduce_sum(data.data(), kN, nullptr, 0);
      } catch (const Error& e) {
        later[static_cast<size_t>(r)] = e.what();
      }
      if (++finished == kWorld - 1) others_done.set_value();
      throw;
    }
    if (++finished == kWorld - 1) others_done.set_value();
  });
  EXPECT_EQ(outcomes[2].error, "");
  for (int r : {0, 1, 3}) {
    const auto& out = outcomes[static_cast<size_t>(r)];
    EXPECT_TRUE(contains(out.error, "allreduce #2")) << "rank " << r << ": " << out.error;
    EXPECT_GT(second_call[static_cast<size_t>(r)], 0) << "rank " << r;
    EXPECT_LT(second_call[static_cast<size_t>(r)], kTimeout + kSlack) << "rank " << r;
    EXPECT_TRUE(contains(later[static_cast<size_t>(r)], "failed earlier")) << later[static_cast<size_t>(r)];
  }
  // The right neighbour of the silent rank waits for it and says so.
  EXPECT_TRUE(contains(outcomes[3].error, "no data from rank 2 (left neighbour")) << outcomes[3].error;
}

TEST(RingCollective, PeerThatStopsParticipatingFailsTheOthersAtTheDeadline) {
  expect_others_fail_when_rank2_stops(false);
}

TEST(RingCollective, PeerThatExitsFailsTheOthersAtTheDeadline) { expect_others_fail_when_rank2_stops(true); }

// ---------------------------------------------------------------------------------------------
// The shared-memory all-reduce (worker/collective/shm_allreduce.h): the ranks are threads of one
// process, so they share /dev/shm as processes on one host do.

Wrap shared_memory(double timeout_s, const std::set<int>& refusing = {}) {
  return [=](int r, std::unique_ptr<Collective> ring) {
    return make_shared_memory_collective(std::move(ring), timeout_s, refusing.count(r) == 0);
  };
}

class SharedMemorySumTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

// Rank order (not the ring's) proves the sum went through shared memory: from 3 ranks on the two
// orders round some elements differently.
TEST_P(SharedMemorySumTest, SumIsCorrectBitIdenticalAndInRankOrder) {
  const int world = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam()) == kWorldMinusOne ? world - 1 : std::get<1>(GetParam());
  const SumRun run = run_sum(world, static_cast<size_t>(n), fast_options(20), shared_memory(20));
  expect_correct_sum(run, Order::kRank);
  if (world >= 3 && n > 1000) {
    EXPECT_FALSE(same_bits(run.outputs[0], ring_order_sum(run.inputs))) << "no element rounds differently?";
  }
}

INSTANTIATE_TEST_SUITE_P(WorldsAndSizes, SharedMemorySumTest,
                         ::testing::Combine(::testing::Range(1, 5),
                                            ::testing::Values(0, 1, 7, kWorldMinusOne, 100003)),
                         world_and_size_name);

// One rank that cannot map the segment (as one on another host) keeps every rank on the ring.
TEST(SharedMemoryCollective, OneRefusingRankKeepsEveryRankOnTheRing) {
  expect_correct_sum(run_sum(3, 10007, fast_options(20), shared_memory(20, {1})), Order::kRing);
}

// Many calls of varying sizes and broadcasts between them: a buffer larger than the segment made
// for the first call goes over the ring, the others through shared memory; every sum is right.
TEST(SharedMemoryCollective, RepeatedCallsOfVaryingSizesStayCorrect) {
  constexpr int kWorld = 3, kRounds = 40;
  std::vector<std::vector<std::string>> problems(kWorld);
  const auto outcomes = run_ranks(kWorld, fast_options(20), [&](int r, Collective& c) {
    for (int round = 0; round < kRounds; ++round) {
      const size_t n = round % 7 == 6 ? 5000 : 1000 - static_cast<size_t>(round);  // the first call: 1000
      std::vector<std::vector<float>> inputs;
      for (int j = 0; j < kWorld; ++j) inputs.push_back(random_floats(n, static_cast<uint32_t>(100 * round + j)));
      std::vector<float> data = inputs[static_cast<size_t>(r)];
      double scalar = round + r;
      c.allreduce_sum(data.data(), n, &scalar, 1);
      const auto want = n > 1000 ? ring_order_sum(inputs) : rank_order_sum(inputs);
      if (!same_bits(data, want) || scalar != 3.0 * round + 3) problems[static_cast<size_t>(r)].push_back(std::to_string(round));
      if (round % 5 == 0 && c.broadcast("round " + std::to_string(round + r)) != "round " + std::to_string(round)) {
        problems[static_cast<size_t>(r)].push_back("broadcast " + std::to_string(round));
      }
    }
  }, {}, "", shared_memory(20));
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].error, "") << "rank " << r;
    EXPECT_TRUE(problems[static_cast<size_t>(r)].empty()) << "rank " << r << " wrong in rounds " << problems[static_cast<size_t>(r)].front();
  }
}

// input_buffer: nothing before the first call or for more floats than the segment holds; after
// it, the rank's slot, which a caller fills and passes as `data`: the sum (rank order, identical
// bits) is then done in place, round after round, mixed with calls from the caller's own memory.
TEST(SharedMemoryCollective, InputBufferSumsInPlaceWithoutCopies) {
  constexpr int kWorld = 3, kRounds = 20;
  constexpr size_t kN = 30011;  // segments of ~10000 floats: several blocks of the fused sum each
  std::vector<std::vector<std::string>> problems(kWorld);
  const auto outcomes = run_ranks(kWorld, fast_options(20), [&](int r, Collective& c) {
    auto& mine = problems[static_cast<size_t>(r)];
    if (c.input_buffer(kN) != nullptr) mine.push_back("a buffer before the first call");
    std::vector<float> first(kN, 1.0f);
    c.allreduce_sum(first.data(), kN, nullptr, 0);
    if (c.input_buffer(kN + 1) != nullptr) mine.push_back("a buffer larger than the segment");
    float* slot = c.input_buffer(kN);
    if (slot == nullptr) {
      mine.push_back("no buffer after the first call");
      return;
    }
    for (int round = 0; round < kRounds; ++round) {
      const size_t n = kN - static_cast<size_t>(round) * 401;
      std::vector<std::vector<float>> inputs;
      for (int j = 0; j < kWorld; ++j) inputs.push_back(random_floats(n, static_cast<uint32_t>(100 * round + j)));
      const auto want = rank_order_sum(inputs);
      double scalar = r;
      std::vector<float> own;
      if (round % 3 == 2) {  // now and then from the caller's memory: copied in and out
        own = inputs[static_cast<size_t>(r)];
        c.allreduce_sum(own.data(), n, &scalar, 1);
      } else {
        if (c.input_buffer(n) != slot) mine.push_back("another buffer in round " + std::to_string(round));
        std::copy(inputs[static_cast<size_t>(r)].begin(), inputs[static_cast<size_t>(r)].end(), slot);
        c.allreduce_sum(slot, n, &scalar, 1);
        own.assign(slot, slot + n);
      }
      if (!same_bits(own, want) || scalar != 3.0) mine.push_back("wrong sum in round " + std::to_string(round));
    }
  }, {}, "", shared_memory(20));
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(outcomes[static_cast<size_t>(r)].error, "") << "rank " << r;
    EXPECT_TRUE(problems[static_cast<size_t>(r)].empty()) << "rank " << r << ": " << problems[static_cast<size_t>(r)].front();
  }
}

TEST(SharedMemoryCollective, MismatchedLengthsFailEveryRankAtOnce) {
  const auto outcomes = run_ranks(3, fast_options(20), [](int r, Collective& c) {
    std::vector<float> data(100);
    c.allreduce_sum(data.data(), 100, nullptr, 0);  // makes the segment
    c.allreduce_sum(data.data(), r == 1 ? 50 : 60, nullptr, 0);
  }, {}, "", shared_memory(20));
  for (int r = 0; r < 3; ++r) {
    const auto& out = outcomes[static_cast<size_t>(r)];
    EXPECT_TRUE(contains(out.error, "allreduce #2 (shared memory)")) << "rank " << r << ": " << out.error;
    EXPECT_TRUE(contains(out.error, "rank 0: 60 floats, 0 scalars; rank 1: 50 floats, 0 scalars; rank 2: 60 floats"))
        << "rank " << r << ": " << out.error;
    EXPECT_LT(out.seconds, 10) << "rank " << r;
  }
}

// Rank 2 stops calling. Rank 0, with the shortest deadline, names it when the deadline passes,
// and its abort fails ranks 1 and 3 at once (their own deadlines are far away). Later calls fail
// at once.
TEST(SharedMemoryCollective, ASilentRankIsNamedAndTheFirstTimeoutAbortsTheOthers) {
  std::promise<void> others_done;
  std::shared_future<void> done = others_done.get_future().share();
  std::atomic<int> finished{0};
  std::vector<std::string> later(4);
  const auto wrap = [](int r, std::unique_ptr<Collective> ring) {
    return make_shared_memory_collective(std::move(ring), r == 0 ? kTimeout : 30);
  };
  const auto outcomes = run_ranks(4, fast_options(30), [&](int r, Collective& c) {
    std::vector<float> data = random_floats(1000, static_cast<uint32_t>(r));
    c.allreduce_sum(data.data(), data.size(), nullptr, 0);
    if (r == 2) {
      done.wait_for(std::chrono::seconds(20));
      return;
    }
    try {
      c.allreduce_sum(data.data(), data.size(), nullptr, 0);
    } catch (const Error&) {
      try {
        c.allreduce_sum(data.data(), data.size(), nullptr, 0);
      } catch (const Error& e) {
        later[static_cast<size_t>(r)] = e.what();
      }
      if (++finished == 3) others_done.set_value();
      throw;
    }
    if (++finished == 3) others_done.set_value();
  }, {}, "", wrap);
  EXPECT_EQ(outcomes[2].error, "");
  EXPECT_TRUE(contains(outcomes[0].error, "allreduce #2 (shared memory) timed out after 1 s: no arrival from rank 2"))
      << outcomes[0].error;
  EXPECT_LT(outcomes[0].seconds, kTimeout + kSlack);
  for (int r : {1, 3}) {
    const auto& out = outcomes[static_cast<size_t>(r)];
    EXPECT_TRUE(contains(out.error, "aborted: rank 0: ")) << "rank " << r << ": " << out.error;
    EXPECT_TRUE(contains(out.error, "no arrival from rank 2")) << "rank " << r << ": " << out.error;
    EXPECT_LT(out.seconds, kTimeout + kSlack + 2) << "rank " << r;
  }
  for (int r : {0, 1, 3}) {
    EXPECT_TRUE(contains(later[static_cast<size_t>(r)], "failed earlier")) << later[static_cast<size_t>(r)];
  }
}

}  // namespace
}  // namespace pstrain
