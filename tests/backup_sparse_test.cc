// --backup-workers with embedding tables (docs/sparse.md, "Backup workers"): a PS shard applies a
// step with the first N - b workers whose whole step arrived there (every chunk of its slice and
// its SPARSE_PUSH, in any order), for the dense chunks and the tables alike, scaled by those
// workers' samples; every other push of the step is dropped and counted. Three raw workers drive
// one real PS (3 chunks) in an order the test chooses: each step one worker sends only part of
// its step (only its rows, only its dense chunks, or its rows and all chunks but one) until the
// step is applied, then the rest. The dense values and rows must equal those computed from the
// two other workers' gradients alone, and both counters must count one late push a step.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <map>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "shared/wire/protocol.h"
#include "shared/wire/sparse_wire.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"
#include "test_util/zmq_frames.h"

namespace pstrain::test {
namespace {

using test::Frames;

constexpr int kWorkers = 3;
constexpr uint64_t kFloats = 600;  // --chunk-kib 1: chunks of 256, 256 and 88 floats
constexpr uint64_t kBatch = 8;     // each worker's samples: a step of two workers is scaled by 1/16
constexpr uint64_t kSteps = 6;
constexpr uint32_t kDim = 4;
constexpr float kLr = 0.5f;
constexpr double kReplySeconds = 10;
const std::vector<uint64_t> kIds = {3, 17, 99, 1000, 123456789};

// Exactly representable gradients (multiples of 1/8), different for every worker and step: the
// dense sums stay exact, so a wrong set of workers cannot go unseen.
std::vector<float> dense_gradient(int worker, uint64_t step) {
  std::vector<float> g(kFloats);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(static_cast<int>((i + 3 * worker + 5 * step) % 7) - 3) / 8;
  return g;
}
std::vector<float> row_gradient(int worker, uint64_t step) {
  std::vector<float> g(kIds.size() * kDim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(static_cast<int>((i + 2 * worker + 3 * step) % 5) - 2) / 8;
  return g;
}

// One worker of the job over a DEALER socket; replies are kept by request id.
class RawPeer {
 public:
  RawPeer(zmq::context_t& context, const std::string& address, int index) : socket_(context, zmq::socket_type::dealer), index_(index) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndtimeo, static_cast<int>(kReplySeconds * 1000));
    socket_.connect("tcp://" + address);
  }

  Header request(Op op, uint64_t step) {
    Header h;
    h.op = op;
    h.role = SenderRole::kWorker;
    h.request_id = next_rid_++;
    h.sender = static_cast<uint32_t>(index_);
    h.step = step;
    return h;
  }
  void send(const Header& h, const std::string& payload = std::string()) {
    const std::string header = encode_header(h);
    socket_.send(zmq::message_t(header.data(), header.size()), payload.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore);
    if (!payload.empty()) socket_.send(zmq::message_t(payload.data(), payload.size()), zmq::send_flags::none);
  }
  // The next `n` replies to request `rid` (WAITING skipped); fewer if the PS went silent.
  std::vector<Frames> replies(uint64_t rid, size_t n) {
    auto& held = held_[rid];
    while (held.size() < n) {
      Frames frames =
          test::receive_frames(socket_, std::chrono::milliseconds(static_cast<long>(kReplySeconds * 1000)));
      if (frames.empty()) break;
      const Header h = header_of(frames);
      if (h.op != Op::kWaiting) held_[h.request_id].push_back(std::move(frames));
    }
    std::vector<Frames> out = std::move(held);
    held_.erase(rid);
    return out;
  }
  static Header header_of(const Frames& frames) {
    Header h;
    std::string error;
    EXPECT_TRUE(!frames.empty() && decode_header(frames[0].data(), frames[0].size(), &h, &error)) << error;
    return h;
  }

  // HELLO: the chunk length of the shard's slice [0, kFloats).
  uint64_t hello() {
    Header h = request(Op::kHello, kSteps);
    h.samples = kWorkers * kBatch;
    h.num_workers = kWorkers;
    h.total = kFloats;
    h.mode = static_cast<uint64_t>(ModeCode::kSync);
    send(h);
    const auto r = replies(h.request_id, 1);
    if (r.empty()) return 0;
    const Header welcome = header_of(r[0]);
    EXPECT_EQ(welcome.op, Op::kWelcome) << welcome.message;
    EXPECT_EQ(welcome.length, kFloats);
    return welcome.chunk;
  }
  void init(const std::vector<float>& values, uint64_t chunk) {
    for (uint64_t at = 0; at < kFloats; at += chunk) {
      Header h = request(Op::kInit, 0);
      h.offset = at;
      h.length = std::min(chunk, kFloats - at);
      send(h, std::string(reinterpret_cast<const char*>(values.data() + at), h.length * sizeof(float)));
    }
  }
  // The chunks [first, last) of this worker's gradient of `step`.
  void push(uint64_t step, uint64_t chunk, uint64_t first, uint64_t last) {
    const std::vector<float> g = dense_gradient(index_, step);
    for (uint64_t c = first; c < last; ++c) {
      Header h = request(Op::kPush, step);
      h.based_on = step;
      h.samples = kBatch;
      h.offset = c * chunk;
      h.length = std::min(chunk, kFloats - h.offset);
      send(h, std::string(reinterpret_cast<const char*>(g.data() + h.offset), h.length * sizeof(float)));
    }
  }
  void sparse_push(uint64_t step) {
    SparseSection s;
    s.table = 0;
    s.dim = kDim;
    s.ids = kIds;
    s.values = row_gradient(index_, step);
    Header h = request(Op::kSparsePush, step);
    h.samples = kBatch;
    const std::string body = encode_sparse_body(Op::kSparsePush, {s});
    h.length = body.size() / 4;
    send(h, body);
  }
  // The parameters of version `version` (every chunk's PARAMS at exactly that version).
  std::vector<float> pull(uint64_t version, size_t chunks) {
    const Header h = request(Op::kPull, version);
    send(h);
    std::vector<float> values(kFloats, NAN);
    const auto r = replies(h.request_id, chunks);
    EXPECT_EQ(r.size(), chunks) << "PARAMS of version " << version;
    for (const Frames& f : r) {
      const Header p = header_of(f);
      EXPECT_EQ(p.op, Op::kParams) << p.message;
      EXPECT_EQ(p.step, version);
      if (p.op != Op::kParams || f.size() != 2 || f[1].size() != p.length * sizeof(float)) continue;
      std::memcpy(values.data() + p.offset, f[1].data(), f[1].size());
    }
    return values;
  }
  std::vector<float> rows(uint64_t version) {
    SparseSection s;
    s.table = 0;
    s.ids = kIds;
    Header h = request(Op::kSparsePull, version);
    const std::string body = encode_sparse_body(Op::kSparsePull, {s});
    h.length = body.size() / 4;
    send(h, body);
    const auto r = replies(h.request_id, 1);
    std::vector<SparseSection> got;
    std::string error;
    if (r.empty() || r[0].size() != 2 ||
        !decode_sparse_body(Op::kSparseRows, r[0][1].data(), r[0][1].size(), &got, &error) || got.size() != 1) {
      ADD_FAILURE() << "no SPARSE_ROWS of version " << version << ": " << error;
      return {};
    }
    return got[0].values;
  }
  void done() {
    const Header h = request(Op::kDone, 0);
    send(h);
    EXPECT_EQ(replies(h.request_id, 1).size(), 1u);
  }

 private:
  zmq::socket_t socket_;
  const int index_;
  uint64_t next_rid_ = 1;
  std::map<uint64_t, std::vector<Frames>> held_;
};

// How the step's late worker sends its step before the others' make it (the rest after).
enum class Partial { kRowsOnly, kDenseOnly, kAllButOneChunk };

TEST(BackupSparseTest, AStepTakesTheSameWorkersForItsChunksAndItsTables) {
  const TempDir dir("backup-sparse");
  Job job;
  job.num_workers = kWorkers;
  job.dir = dir.path;
  job.args = {"--backup-workers", "1", "--embedding-dim", std::to_string(kDim), "--embedding-optimizer", "sgd",
              "--optimizer", "sgd", "--lr", "0.5", "--chunk-kib", "1", "--timeout", "30"};
  Children processes;
  std::vector<pid_t> servers;
  const std::string address = start_servers(job, &servers).at(0);
  processes.add(servers.at(0));

  zmq::context_t context(1);
  std::vector<std::unique_ptr<RawPeer>> peers;
  for (int w = 0; w < kWorkers; ++w) peers.push_back(std::make_unique<RawPeer>(context, address, w));
  uint64_t chunk = 0;
  for (auto& p : peers) chunk = p->hello();
  ASSERT_EQ(chunk, 256u);
  const size_t chunks = 3;
  std::vector<float> dense(kFloats);
  for (size_t i = 0; i < kFloats; ++i) dense[i] = static_cast<float>(static_cast<int>(i % 17) - 8) / 256;
  peers[0]->init(dense, chunk);
  std::vector<float> rows = peers[0]->rows(0);  // as each row will be made (pulls change nothing)
  ASSERT_EQ(rows.size(), kIds.size() * kDim);

  for (uint64_t t = 0; t < kSteps; ++t) {
    const int late = static_cast<int>(t % kWorkers);
    const auto partial = static_cast<Partial>((t / kWorkers + t) % 3);
    RawPeer& x = *peers[static_cast<size_t>(late)];
    if (partial != Partial::kDenseOnly) x.sparse_push(t);
    if (partial == Partial::kDenseOnly) x.push(t, chunk, 0, chunks);
    if (partial == Partial::kAllButOneChunk) x.push(t, chunk, 1, chunks);
    std::vector<int> members;
    for (int w = 0; w < kWorkers; ++w) {
      if (w != late) members.push_back(w);
    }
    peers[static_cast<size_t>(members[0])]->sparse_push(t);  // its rows first, then its chunks
    peers[static_cast<size_t>(members[0])]->push(t, chunk, 0, chunks);
    peers[static_cast<size_t>(members[1])]->push(t, chunk, 0, chunks);
    peers[static_cast<size_t>(members[1])]->sparse_push(t);
    const std::vector<float> got = peers[static_cast<size_t>(members[0])]->pull(t + 1, chunks);
    // The rest of the late worker's step: dropped.
    if (partial == Partial::kRowsOnly) x.push(t, chunk, 0, chunks);
    if (partial == Partial::kDenseOnly) x.sparse_push(t);
    if (partial == Partial::kAllButOneChunk) x.push(t, chunk, 0, 1);

    // The step of the two members alone: sums in worker order, scaled by their 16 samples.
    const float scale = 1.0f / static_cast<float>(2 * kBatch);
    const std::vector<float> g0 = dense_gradient(members[0], t), g1 = dense_gradient(members[1], t);
    for (size_t i = 0; i < kFloats; ++i) dense[i] -= kLr * scale * (g0[i] + g1[i]);
    const std::vector<float> r0 = row_gradient(members[0], t), r1 = row_gradient(members[1], t);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] -= kLr * (scale * (r0[i] + r1[i]));
    size_t wrong = 0;
    for (size_t i = 0; i < kFloats; ++i) wrong += got[i] != dense[i] ? 1 : 0;
    EXPECT_EQ(wrong, 0u) << "step " << t << ": dense values other than workers " << members[0] << " and "
                         << members[1] << "'s step";
  }
  const std::vector<float> final_rows = peers[0]->rows(kSteps);
  ASSERT_EQ(final_rows.size(), rows.size());
  double max_diff = 0;
  for (size_t i = 0; i < rows.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::fabs(final_rows[i] - rows[i])));
  EXPECT_LE(max_diff, 1e-6) << "the rows are not those of the dense steps' workers";
  std::printf("backup workers with tables: %llu steps, dense exact, rows within %.3g of the reference\n",
              static_cast<unsigned long long>(kSteps), max_diff);
  for (auto& p : peers) p->done();
  EXPECT_TRUE(processes.wait(servers[0], 10).ok());
  const std::string log = read_file(dir.path + "/ps0.log");
  // One late worker a step: its first chunk and its rows, each dropped once (at the apply or after).
  EXPECT_NE(log.find("late pushes dropped: " + std::to_string(kSteps) + ";"), std::string::npos) << log;
  EXPECT_NE(log.find("tables at version " + std::to_string(kSteps)), std::string::npos) << log;
  EXPECT_NE(log.find("late sparse pushes dropped: " + std::to_string(kSteps) + ";"), std::string::npos) << log;
}

}  // namespace
}  // namespace pstrain::test
