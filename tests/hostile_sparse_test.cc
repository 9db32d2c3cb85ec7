// A live CTR job under hostile sparse traffic (docs/sparse.md, "Hostile input"): two PS shards,
// two real workers and the test's raw ZeroMQ peer, which registers as worker 2 and trains along
// (zero dense gradients, a fixed sparse push a step), so that every check behind registration is
// reachable and the sparse barrier's state is known exactly when it misbehaves. Every hostile
// SPARSE_PULL / SPARSE_PUSH gets an ERROR naming the problem and a "rejected" line in the PS log,
// and the job's dense parameters and table rows equal, bit for bit, those of the same job whose
// raw peer sends only its valid messages.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "shared/train/sparse_ids.h"
#include "shared/wire/protocol.h"
#include "shared/wire/sparse_wire.h"
#include "test_util/ctr_data.h"
#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"
#include "test_util/zmq_frames.h"

namespace pstrain::test {
namespace {

using test::Frames;

constexpr double kReplySeconds = 10;  // deadline of every reply the test waits for
constexpr int kShards = 2;
constexpr int kWorkers = 3;           // workers 0 and 1 are real; 2 is the raw peer
constexpr uint32_t kRaw = 2;
constexpr uint64_t kBatch = 8;        // every worker's share: a global batch of 24
constexpr uint64_t kSteps = 12;       // 240 records: 10 steps an epoch, so the chief evaluates at step 10 too
constexpr int kRecords = 240;
constexpr uint32_t kDim = 4;
constexpr uint64_t kHostileStep = 5;
// "dense 16, relu, dense 2" on 13 dense features and 26 rows of kDim floats.
constexpr uint64_t kModelFloats = (13 + 26 * kDim + 1) * 16 + (16 + 1) * 2;
constexpr const char* kRejectedLine = "rejected a message from peer 0x";

Header request(Op op, uint64_t rid, uint64_t step, uint32_t sender = kRaw) {
  Header h;
  h.op = op;
  h.request_id = rid;
  h.sender = sender;
  h.step = step;
  h.samples = op == Op::kPush || op == Op::kSparsePush ? kBatch : 0;
  return h;
}

// A sparse message: `h` with frame 1 `body` (a whole number of words: `len` counts them).
Frames with_body(Header h, const std::string& body) {
  h.length = body.size() / 4;
  return {encode_header(h), body};
}

// A body built by hand (the encoder refuses what these tests need): the 8-byte head with
// `sections` and `reserved`, then each section's bytes as encode_sparse_body writes them.
std::string hand_body(Op op, uint32_t sections, uint32_t reserved, const std::vector<SparseSection>& each) {
  std::string body(8, '\0');
  std::memcpy(&body[0], &sections, 4);
  std::memcpy(&body[4], &reserved, 4);
  for (const SparseSection& s : each) body += encode_sparse_body(op, {s}).substr(8);
  return body;
}

SparseSection section(uint32_t table, uint32_t dim, std::vector<uint64_t> ids, std::vector<float> values = {}) {
  SparseSection s;
  s.table = table;
  s.dim = dim;
  s.ids = std::move(ids);
  s.values = std::move(values);
  return s;
}

// The first `n` IDs from 1 up that shard `shard` of kShards holds.
std::vector<uint64_t> ids_of_shard(int shard, size_t n) {
  std::vector<uint64_t> ids;
  for (uint64_t id = 1; ids.size() < n; ++id) {
    if (shard_of(id, kShards) == shard) ids.push_back(id);
  }
  return ids;
}

// The raw peer's gradient rows for `count` IDs at `step`: exactly representable, never zero.
std::vector<float> raw_gradient(size_t count, uint64_t step) {
  std::vector<float> g(count * kDim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.125f * static_cast<float>(i % 5 + 1) * (step % 2 == 0 ? 1.0f : -0.5f);
  return g;
}

// Worker 2 of the job, over one DEALER socket per shard. Replies are matched to requests by
// request id (a shard may answer a PULL and a SPARSE_PULL in either order); WAITING is skipped.
class RawWorker {
 public:
  RawWorker(zmq::context_t& context, const std::vector<std::string>& addresses) {
    for (const std::string& address : addresses) {
      sockets_.emplace_back(context, zmq::socket_type::dealer);
      sockets_.back().set(zmq::sockopt::linger, 0);
      sockets_.back().set(zmq::sockopt::sndtimeo, static_cast<int>(kReplySeconds * 1000));
      sockets_.back().connect("tcp://" + address);
    }
    held_.resize(addresses.size());
    slices_.resize(addresses.size());
  }

  uint64_t rid() { return next_rid_++; }
  bool broken() const { return broken_; }
  std::vector<uint64_t> ids(int shard) const { return ids_of_shard(shard, 3); }

  void send(int shard, const Frames& frames) {
    zmq::socket_t& socket = sockets_[static_cast<size_t>(shard)];
    for (size_t i = 0; i < frames.size(); ++i) {
      const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (!socket.send(zmq::message_t(frames[i].data(), frames[i].size()), flags)) broken_ = true;
    }
  }

  // The reply of shard `shard` to request `rid`; op 0 if none came within kReplySeconds (after
  // which every wait fails at once, so a silent PS fails the test quickly; as does one that
  // keeps sending other replies, WAITING for a request it parked instead of refusing it, say).
  Header reply(int shard, uint64_t rid, const std::string& what) {
    auto& held = held_[static_cast<size_t>(shard)];
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(kReplySeconds * 1000));
    while (held.count(rid) == 0 && !broken_) {
      if (std::chrono::steady_clock::now() < deadline) {
        receive(shard);
      } else {
        broken_ = true;
      }
    }
    if (held.count(rid) == 0) {
      ADD_FAILURE() << what << ": no reply from ps" << shard << " within " << kReplySeconds << " s";
      return Header{};
    }
    const auto first = held.lower_bound(rid);  // the earliest of the replies held for `rid`
    const Header h = first->second;
    held.erase(first);
    return h;
  }

  void expect_reply(int shard, uint64_t rid, Op op, const std::string& what) {
    const Header h = reply(shard, rid, what);
    EXPECT_EQ(h.op, op) << what << ": " << op_name(h.op) << " " << h.message;
  }

  void hello() {
    for (int s = 0; s < kShards; ++s) {
      Header h = request(Op::kHello, rid(), kSteps);
      h.samples = kWorkers * kBatch;
      h.num_workers = kWorkers;
      h.total = kModelFloats;
      h.mode = static_cast<uint64_t>(ModeCode::kSync);
      send(s, {encode_header(h)});
      const Header welcome = reply(s, h.request_id, "WELCOME");
      ASSERT_EQ(welcome.op, Op::kWelcome) << welcome.message;
      ASSERT_EQ(welcome.step, 0u);
      ASSERT_LE(welcome.length, welcome.chunk) << "the test pushes a shard's slice as one chunk";
      slices_[static_cast<size_t>(s)] = {welcome.offset, welcome.length};
    }
  }
  void pull(uint64_t version) {
    for (int s = 0; s < kShards; ++s) send(s, {encode_header(pull_header(s, version))});
  }
  void sparse_pull(uint64_t version) {
    for (int s = 0; s < kShards; ++s) {
      Header h = request(Op::kSparsePull, rid(), version);
      sparse_pulls_[s] = h.request_id;
      send(s, with_body(h, encode_sparse_body(Op::kSparsePull, {section(0, 0, ids(s))})));
    }
  }
  void await_params(uint64_t version) {
    for (int s = 0; s < kShards; ++s) {
      const Header h = reply(s, pulls_[s], "PARAMS of version " + std::to_string(version));
      EXPECT_EQ(h.op, Op::kParams) << h.message;
      EXPECT_EQ(h.step, version);
    }
  }
  void await_rows(uint64_t version) {
    for (int s = 0; s < kShards; ++s) {
      const Header h = reply(s, sparse_pulls_[s], "SPARSE_ROWS of version " + std::to_string(version));
      EXPECT_EQ(h.op, Op::kSparseRows) << h.message;
      EXPECT_EQ(h.step, version);
    }
  }
  // Zero gradients of `step` for every shard's slice (accepted: no reply).
  void push(uint64_t step) {
    for (int s = 0; s < kShards; ++s) {
      Header h = request(Op::kPush, rid(), step);
      h.based_on = step;
      h.offset = slices_[static_cast<size_t>(s)].first;
      h.length = slices_[static_cast<size_t>(s)].second;
      send(s, {encode_header(h), std::string(h.length * sizeof(float), '\0')});
    }
  }
  // This worker's valid SPARSE_PUSH of `step` to shard `s` (its IDs there, raw_gradient).
  Frames sparse_push_message(int s, uint64_t step, uint64_t rid_value) const {
    const std::vector<uint64_t> mine = ids(s);
    return with_body(request(Op::kSparsePush, rid_value, step),
                     encode_sparse_body(Op::kSparsePush, {section(0, kDim, mine, raw_gradient(mine.size(), step))}));
  }
  void sparse_push(uint64_t step) {
    for (int s = 0; s < kShards; ++s) send(s, sparse_push_message(s, step, rid()));
  }
  void done() {
    for (int s = 0; s < kShards; ++s) {
      const Header h = request(Op::kDone, rid(), 0);
      send(s, {encode_header(h)});
      expect_reply(s, h.request_id, Op::kDone, "DONE");
    }
  }
  // A request whose answer comes only once the step being collected is applied: claimed by
  // await_later().
  void expect_later(int shard, uint64_t rid, Op op) { later_.push_back({shard, rid, op}); }
  void await_later() {
    for (const Later& l : later_) expect_reply(l.shard, l.rid, l.op, "a parked request's answer");
    later_.clear();
  }
  // Replies nobody asked for (a hostile request answered after all): none may be left.
  size_t unclaimed() const {
    size_t n = 0;
    for (const auto& held : held_) n += held.size();
    return n;
  }

 private:
  Header pull_header(int s, uint64_t version) {
    const Header h = request(Op::kPull, rid(), version);
    pulls_[s] = h.request_id;
    return h;
  }

  void receive(int shard) {
    zmq::socket_t& socket = sockets_[static_cast<size_t>(shard)];
    const Frames frames =
        test::receive_frames(socket, std::chrono::milliseconds(static_cast<long>(kReplySeconds * 1000)));
    if (frames.empty()) {
      broken_ = true;
      return;
    }
    Header h;
    std::string error;
    if (frames.empty() || !decode_header(frames[0].data(), frames[0].size(), &h, &error)) {
      ADD_FAILURE() << "ps" << shard << " sent a message that does not decode: " << error;
      return;
    }
    EXPECT_EQ(h.role, SenderRole::kPs);
    EXPECT_EQ(h.sender, static_cast<uint32_t>(shard));
    if (h.op != Op::kWaiting) held_[static_cast<size_t>(shard)].emplace(h.request_id, h);
  }

  struct Later {
    int shard;
    uint64_t rid;
    Op op;
  };
  std::vector<Later> later_;
  std::vector<zmq::socket_t> sockets_;
  // Per shard, the replies not yet asked for, by request id: several for one id where a pull in
  // parts is answered part by part (a multimap keeps them in arrival order), which can all come
  // while the test waits for another reply.
  std::vector<std::multimap<uint64_t, Header>> held_;
  std::vector<std::pair<uint64_t, uint64_t>> slices_;  // each shard's (offset, length)
  std::map<int, uint64_t> pulls_, sparse_pulls_;       // the request ids of the latest ones, by shard
  uint64_t next_rid_ = 1;
  bool broken_ = false;
};

// Sends hostile messages to one shard and checks that each is answered with ERROR `why`.
class Hostile {
 public:
  Hostile(RawWorker& raw, int shard) : raw_(raw), shard_(shard) {}

  void expect_rejected(const Frames& frames, const std::string& why, const std::string& what) {
    Header sent;
    std::string error;
    ASSERT_TRUE(decode_header(frames[0].data(), frames[0].size(), &sent, &error)) << what << ": " << error;
    raw_.send(shard_, frames);
    const Header reply = raw_.reply(shard_, sent.request_id, what);
    EXPECT_EQ(reply.op, Op::kError) << what;
    EXPECT_EQ(reply.message, why.substr(0, kMaxMessageChars)) << what;
    ++rejected_;
  }
  int rejected() const { return rejected_; }
  void count(int more) { rejected_ += more; }

 private:
  RawWorker& raw_;
  const int shard_;
  int rejected_ = 0;
};

// Requests of a registered worker whose body does not decode, at the frame check or in
// decode_sparse_body: refused before the tables are asked anything.
void send_undecodable(RawWorker& raw, Hostile& hostile, uint64_t step) {
  const std::vector<uint64_t> ids = raw.ids(0);
  const SparseSection valid = section(0, kDim, ids, raw_gradient(ids.size(), step));
  const std::string body = encode_sparse_body(Op::kSparsePush, {valid});  // 96 bytes
  const std::string pull = encode_sparse_body(Op::kSparsePull, {section(0, 0, ids)});  // 48 bytes
  const auto push_of = [&](const std::string& b) { return with_body(request(Op::kSparsePush, raw.rid(), step), b); };
  const auto pull_of = [&](const std::string& b) { return with_body(request(Op::kSparsePull, raw.rid(), step), b); };

  hostile.expect_rejected({encode_header(request(Op::kSparsePush, raw.rid(), step))}, "SPARSE_PUSH needs 2 frame(s), got 1",
                          "SPARSE_PUSH without a body");
  Header longer = request(Op::kSparsePush, raw.rid(), step);
  longer.length = body.size() / 4 + 1;
  hostile.expect_rejected({encode_header(longer), body},
                          "SPARSE_PUSH payload is 96 bytes, header says 25 float32 (100 bytes)", "len one word too many");
  hostile.expect_rejected(push_of(body.substr(0, body.size() - 4)),
                          "SPARSE_PUSH section 0 (table 0): 3 gradients of 4 floats need 48 bytes, 44 left",
                          "body cut by a word");
  hostile.expect_rejected(push_of(body.substr(0, 4)), "SPARSE_PUSH body of 4 bytes is shorter than its 8-byte head",
                          "body cut to 4 bytes");
  hostile.expect_rejected(push_of(body + std::string(8, '\0')), "SPARSE_PUSH body has 8 bytes after its 1 sections",
                          "8 bytes after the sections");
  hostile.expect_rejected(push_of(hand_body(Op::kSparsePush, 1, 7, {valid})), "SPARSE_PUSH reserved word is 7, not 0",
                          "reserved word 7");
  hostile.expect_rejected(push_of(hand_body(Op::kSparsePush, 2, 0, {valid, valid})),
                          "SPARSE_PUSH section 1 (table 0): table 0 is also section 0", "table twice in a push");
  hostile.expect_rejected(pull_of(hand_body(Op::kSparsePull, 2, 0, {section(0, 0, ids), section(0, 0, {9})})),
                          "SPARSE_PULL section 1 (table 0): table 0 is also section 0", "table twice in a pull");
  hostile.expect_rejected(pull_of(hand_body(Op::kSparsePull, 1, 1, {section(0, 0, ids)})),
                          "SPARSE_PULL reserved word is 1, not 0", "reserved word 1 in a pull");
  hostile.expect_rejected(pull_of(pull.substr(0, 36)), "SPARSE_PULL section 0 (table 0): 3 ids need 24 bytes, 12 left",
                          "pull body cut");
  std::string pull_dim = pull;  // a pull section with a row's dim
  const uint32_t dim = kDim;
  std::memcpy(&pull_dim[12], &dim, 4);
  hostile.expect_rejected(pull_of(pull_dim), "SPARSE_PULL section 0 (table 0): dim is 4, not 0", "pull of dim 4");
}

// Requests that decode but that the tables refuse, and requests out of step, while shard 0
// collects `step` and nobody has pushed it yet. Then the raw peer's valid push of `step`.
void send_refused_then_push(RawWorker& raw, Hostile& hostile, uint64_t step) {
  const std::string at = "SPARSE_PUSH of step " + std::to_string(step) + ": ";
  const std::vector<uint64_t> ids = raw.ids(0);
  const std::vector<float> g = raw_gradient(ids.size(), step);
  const auto push = [&](const std::vector<SparseSection>& sections, uint64_t push_step = 0) {
    return with_body(request(Op::kSparsePush, raw.rid(), push_step == 0 ? step : push_step),
                     encode_sparse_body(Op::kSparsePush, sections));
  };
  const auto pull = [&](const std::vector<SparseSection>& sections, uint64_t version) {
    return with_body(request(Op::kSparsePull, raw.rid(), version), encode_sparse_body(Op::kSparsePull, sections));
  };
  const uint64_t elsewhere = ids_of_shard(1, 1)[0];

  hostile.expect_rejected(push({section(3, kDim, ids, g)}), at + "unknown embedding table 3", "push to table 3");
  hostile.expect_rejected(push({section(0, kDim, ids, g), section(9, kDim, {ids[0]}, {1, 2, 3, 4})}),
                          at + "unknown embedding table 9", "a second section for table 9");
  hostile.expect_rejected(push({section(0, kDim, {ids[0], ids[1], ids[0]}, g)}),
                          at + "embedding table 'ids': ID " + std::to_string(ids[0]) + " appears twice (IDs must be unique)",
                          "an ID twice in a push");
  hostile.expect_rejected(push({section(0, kDim, {ids[0], elsewhere, ids[2]}, g)}),
                          at + "embedding table 'ids': ID " + std::to_string(elsewhere) + " is not held by shard 0 of 2",
                          "an ID of shard 1");
  std::vector<float> bad = g;
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  hostile.expect_rejected(push({section(0, kDim, ids, bad)}), at + "embedding table 'ids': a gradient is NaN or infinite",
                          "a NaN gradient");
  bad[5] = -std::numeric_limits<float>::infinity();
  hostile.expect_rejected(push({section(0, kDim, ids, bad)}), at + "embedding table 'ids': a gradient is NaN or infinite",
                          "an infinite gradient");
  // Rows of 3 floats for a table of 4: the body is consistent, the length is not the table's.
  hostile.expect_rejected(push({section(0, 3, {ids[0], ids[1]}, {1, 2, 3, 4, 5, 6})}),
                          at + "embedding table 'ids': 6 gradient floats for 2 IDs of dim 4", "gradients of dim 3");
  hostile.expect_rejected(push({section(0, 5, {ids[0]}, {1, 2, 3, 4, 5})}),
                          at + "embedding table 'ids': 5 gradient floats for 1 IDs of dim 4", "gradients of dim 5");
  Header no_samples = request(Op::kSparsePush, raw.rid(), step);
  no_samples.samples = 0;
  hostile.expect_rejected(with_body(no_samples, encode_sparse_body(Op::kSparsePush, {section(0, kDim, ids, g)})),
                          "SPARSE_PUSH with zero samples", "a push of zero samples");
  const std::string collecting = ", but the tables are collecting step " + std::to_string(step);
  hostile.expect_rejected(push({section(0, kDim, ids, raw_gradient(ids.size(), step - 1))}, step - 1),
                          "SPARSE_PUSH of step " + std::to_string(step - 1) + collecting, "a push of the step applied last");
  hostile.expect_rejected(push({section(0, kDim, ids, g)}, 1000), "SPARSE_PUSH of step 1000" + collecting,
                          "a push far ahead");
  hostile.expect_rejected(push({section(0, kDim, ids, g)}, step + 1), "SPARSE_PUSH of step " + std::to_string(step + 1) + collecting,
                          "a push one step ahead");
  // As another worker: the route is worker 2's.
  hostile.expect_rejected(with_body(request(Op::kSparsePush, raw.rid(), step, 0),
                                    encode_sparse_body(Op::kSparsePush, {section(0, kDim, ids, g)})),
                          "sender 0 does not match registered worker 2", "a push as worker 0");

  const std::string ahead = ", but the tables are at " + std::to_string(step);
  hostile.expect_rejected(pull({section(0, 0, ids)}, step + 2), "SPARSE_PULL of version " + std::to_string(step + 2) + ahead,
                          "a pull two versions ahead");
  hostile.expect_rejected(pull({section(0, 0, ids)}, 1u << 30), "SPARSE_PULL of version 1073741824" + ahead,
                          "a pull far ahead");
  hostile.expect_rejected(pull({section(0, 0, ids), section(5, 0, {ids[0]})}, step), "SPARSE_PULL: unknown embedding table 5",
                          "a pull of table 5");
  hostile.expect_rejected(pull({section(0, 0, {ids[1], ids[0], ids[1]})}, step),
                          "SPARSE_PULL: embedding table 'ids': ID " + std::to_string(ids[1]) + " appears twice (IDs must be unique)",
                          "an ID twice in a pull");
  hostile.expect_rejected(pull({section(0, 0, {elsewhere})}, step),
                          "SPARSE_PULL: embedding table 'ids': ID " + std::to_string(elsewhere) + " is not held by shard 0 of 2",
                          "a pull of an ID of shard 1");
  hostile.expect_rejected(with_body(request(Op::kSparseRows, raw.rid(), step),
                                    encode_sparse_body(Op::kSparseRows, {section(0, kDim, {}, g)})),
                          "SPARSE_ROWS is not a request", "SPARSE_ROWS to the PS");

  raw.sparse_push(step);  // the valid one, on every shard: shard 0 now holds this worker's push alone
  hostile.expect_rejected(raw.sparse_push_message(0, step, raw.rid()), "SPARSE_PUSH of step " + std::to_string(step) + " twice",
                          "the same push again");
  hostile.expect_rejected(push({section(0, kDim, {ids[0]}, {0.5f, 0.5f, 0.5f, 0.5f})}),
                          "SPARSE_PUSH of step " + std::to_string(step) + " twice", "another push of the same step");
}

// A socket that never said HELLO: its sparse requests fail at registration, whatever they say.
void send_unregistered(zmq::context_t& context, const std::string& address, Hostile& hostile, uint64_t step) {
  RawWorker stranger(context, {address});
  Hostile from_stranger(stranger, 0);
  const std::vector<uint64_t> ids = ids_of_shard(0, 3);
  std::vector<float> nan = raw_gradient(ids.size(), step);
  nan[0] = std::numeric_limits<float>::quiet_NaN();
  const std::string never = " from a peer that never said HELLO";
  for (uint32_t as : {0u, 1u, kRaw, 7u}) {
    from_stranger.expect_rejected(with_body(request(Op::kSparsePush, stranger.rid(), step, as),
                                            encode_sparse_body(Op::kSparsePush, {section(0, kDim, ids, nan)})),
                                  "SPARSE_PUSH" + never, "a stranger's push as worker " + std::to_string(as));
    from_stranger.expect_rejected(with_body(request(Op::kSparsePull, stranger.rid(), step, as),
                                            encode_sparse_body(Op::kSparsePull, {section(0, 0, ids)})),
                                  "SPARSE_PULL" + never, "a stranger's pull as worker " + std::to_string(as));
  }
  from_stranger.expect_rejected(with_body(request(Op::kSparsePush, stranger.rid(), step), std::string("\x01\0\0\0\x07\0\0\0", 8)),
                                "SPARSE_PUSH" + never, "a stranger's undecodable push");
  from_stranger.expect_rejected({encode_header(request(Op::kSparsePull, stranger.rid(), step))},
                                "SPARSE_PULL needs 2 frame(s), got 1", "a stranger's pull without a body");
  hostile.count(from_stranger.rejected());
}

// A push in parts at shard 0 while it collects `step`: each part checked against the worker's
// earlier parts (docs/wire_protocol.md, "Sparse tables"), the bad ones refused, and the valid
// parts (one ID each) put together into the raw peer's push of `step`, the same as its whole
// push (shard 1 gets that). Then parts that come after it, and pulls of parts that do not exist.
void send_parts(RawWorker& raw, Hostile& hostile, zmq::context_t&, const std::string&, uint64_t step) {
  const std::vector<uint64_t> ids = raw.ids(0);
  const std::vector<float> g = raw_gradient(ids.size(), step);
  const auto part = [&](uint64_t k, uint64_t parts, std::vector<uint64_t> which, uint64_t push_step = UINT64_MAX) {
    Header h = request(Op::kSparsePush, raw.rid(), push_step == UINT64_MAX ? step : push_step);
    h.part = k;
    h.parts = parts;
    std::vector<float> values;
    for (uint64_t id : which) {
      const size_t i = static_cast<size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin());
      values.insert(values.end(), g.begin() + static_cast<long>(i * kDim), g.begin() + static_cast<long>((i + 1) * kDim));
    }
    return with_body(h, encode_sparse_body(Op::kSparsePush, {section(0, kDim, which, values)}));
  };
  const auto at = [&](uint64_t k, uint64_t parts) {
    return "SPARSE_PUSH of step " + std::to_string(step) + " part " + std::to_string(k) + " of " + std::to_string(parts);
  };
  hostile.expect_rejected(part(3, 3, {ids[0]}), at(3, 3) + ": no such part", "part 3 of 3");
  hostile.expect_rejected(part(0, kMaxSparseParts + 1, {ids[0]}),
                          at(0, kMaxSparseParts + 1) + ": more than 1048576 parts", "more parts than the bound");
  hostile.expect_rejected(part(1, 3, {ids[1]}), at(1, 3) + ": its part 0 has not come", "part 1 before part 0");
  raw.send(0, part(0, 3, {ids[0]}));  // accepted: no answer
  hostile.expect_rejected(part(0, 3, {ids[1]}), at(0, 3) + ": that part came already", "part 0 again");
  hostile.expect_rejected(part(2, 3, {ids[2]}), at(2, 3) + ": part 1 has not come", "part 2 before part 1");
  hostile.expect_rejected(part(1, 4, {ids[1]}), at(1, 4) + ": its earlier parts said 3", "another part count");
  hostile.expect_rejected(part(1, 3, {ids[0]}),
                          at(1, 3) + ": ID " + std::to_string(ids[0]) + " of table 0 came in an earlier part (IDs must be unique)",
                          "an ID of part 0 again in part 1");
  Frames more_samples = part(1, 3, {ids[1]});
  Header h;
  std::string error;
  ASSERT_TRUE(decode_header(more_samples[0].data(), more_samples[0].size(), &h, &error));
  h.samples = 2 * kBatch;
  more_samples[0] = encode_header(h);
  hostile.expect_rejected(more_samples, at(1, 3) + ": its earlier parts said 8 samples", "other samples in part 1");
  Frames nan = part(1, 3, {ids[1]});
  nan[1][nan[1].size() - 4 * kDim + 6] = '\xc0';  // the row's second float: 0x7fc0.... is a quiet NaN
  nan[1][nan[1].size() - 4 * kDim + 7] = '\x7f';
  hostile.expect_rejected(nan, at(1, 3) + ": embedding table 'ids': a gradient is NaN or infinite", "a NaN in part 1");
  const std::string collecting = ", but the tables are collecting step " + std::to_string(step);
  hostile.expect_rejected(part(1, 3, {ids[1]}, step - 1),
                          "SPARSE_PUSH of step " + std::to_string(step - 1) + " part 1 of 3" + collecting,
                          "a part of the step applied last");
  hostile.expect_rejected(part(1, 3, {ids[1]}, step + 1),
                          "SPARSE_PUSH of step " + std::to_string(step + 1) + " part 1 of 3" + collecting,
                          "a part of the next step");
  raw.send(0, part(1, 3, {ids[1]}));
  raw.send(0, part(2, 3, {ids[2]}));  // the push is whole: shard 0 holds it
  raw.send(1, raw.sparse_push_message(1, step, raw.rid()));
  hostile.expect_rejected(part(0, 3, {ids[0]}), at(0, 3) + " twice", "part 0 after the whole push");
  hostile.expect_rejected(part(1, 2, {ids[2]}), at(1, 2) + " twice", "a part after the whole push");

  const auto pull = [&](uint64_t k, uint64_t parts) {
    Header p = request(Op::kSparsePull, raw.rid(), step);
    p.part = k;
    p.parts = parts;
    return with_body(p, encode_sparse_body(Op::kSparsePull, {section(0, 0, ids)}));
  };
  hostile.expect_rejected(pull(2, 2), "SPARSE_PULL part 2 of 2: no such part", "pull part 2 of 2");
  hostile.expect_rejected(pull(0, kMaxSparseParts + 1), "SPARSE_PULL part 0 of 1048577: more than 1048576 parts",
                          "a pull of more parts than the bound");

  // Pulls of the next version wait (the step is not applied): a part of a waiting pull again,
  // and a third pull while two wait, are refused; the two are answered once the step is applied.
  const auto next_pull = [&](uint64_t rid, uint64_t k, uint64_t parts) {
    Header p = request(Op::kSparsePull, rid, step + 1);
    p.part = k;
    p.parts = parts;
    return with_body(p, encode_sparse_body(Op::kSparsePull, {section(0, 0, {ids[k]})}));
  };
  const uint64_t first = raw.rid(), second = raw.rid(), third = raw.rid();
  raw.send(0, next_pull(first, 0, 2));  // parked: its answer comes with the next version
  hostile.expect_rejected(next_pull(first, 0, 2), "SPARSE_PULL " + std::to_string(first) + ": part 0 came already",
                          "a waiting pull's part again");
  raw.send(0, next_pull(first, 1, 2));
  raw.send(0, next_pull(second, 0, 1));
  hostile.expect_rejected(next_pull(third, 0, 1), "SPARSE_PULL: 2 of this worker's are waiting already",
                          "a third waiting pull");
  raw.expect_later(0, first, Op::kSparseRows);  // (both parts answer with `first`'s request id)
  raw.expect_later(0, first, Op::kSparseRows);
  raw.expect_later(0, second, Op::kSparseRows);
}

// Pulls whose body or answer would pass a part's bound (docs/wire_protocol.md, "Sparse tables":
// the job's chunk, here --chunk-kib 4), while shard 0 collects `step`: each refused before the
// shard decodes it or looks up a row, a pull at the bound answered; then the raw peer's push.
constexpr int kSmallChunkKib = 4;
void send_oversized_pulls(RawWorker& raw, Hostile& hostile, zmq::context_t&, const std::string&,
                          uint64_t step) {
  const size_t limit = kSmallChunkKib * 1024;
  const auto pull = [&](size_t ids, uint64_t version, uint64_t part = 0, uint64_t parts = 0,
                        uint64_t rid = 0) {
    Header h = request(Op::kSparsePull, rid != 0 ? rid : raw.rid(), version);
    h.part = part;
    h.parts = parts;
    return with_body(h, encode_sparse_body(Op::kSparsePull, {section(0, 0, ids_of_shard(0, ids))}));
  };
  const std::string bound =
      ", more than a part's " + std::to_string(limit) + " (the job's chunk, --chunk-kib)";
  // 8 + 16 + 8 x 509 = 4096 bytes of body: its answer is too large; one ID more, the body too.
  hostile.expect_rejected(pull(510, step), "SPARSE_PULL: a body of 4104 bytes" + bound,
                          "a body past the chunk");
  hostile.expect_rejected(pull(510, step, 1, 3), "SPARSE_PULL part 1 of 3: a body of 4104 bytes" + bound,
                          "a part's body past the chunk");
  hostile.expect_rejected(pull(100000, step), "SPARSE_PULL: a body of 800024 bytes" + bound,
                          "a body of 100000 IDs");
  // Rows of 4 floats: 8 + 16 + 16 x 254 = 4088 bytes of answer fit, 255 rows (4104 bytes) do not.
  const std::string rows_bound = bound + ": cut the pull into parts";
  hostile.expect_rejected(pull(255, step),
                          "SPARSE_PULL: an answer of 255 rows would take 4104 bytes" + rows_bound,
                          "an answer past the chunk");
  hostile.expect_rejected(pull(509, step),
                          "SPARSE_PULL: an answer of 509 rows would take 8168 bytes" + rows_bound,
                          "the largest body's answer");
  hostile.expect_rejected(pull(255, step + 1),
                          "SPARSE_PULL: an answer of 255 rows would take 4104 bytes" + rows_bound,
                          "a parked pull's answer past the chunk");
  const uint64_t fits = raw.rid();
  raw.send(0, pull(254, step, 0, 0, fits));
  raw.expect_reply(0, fits, Op::kSparseRows, "a pull whose answer is the chunk's bytes at most");
  raw.sparse_push(step);
}

struct CtrRun {
  bool ok = false;
  SavedParams dense;
  std::vector<std::string> table_files;  // ids.shard<s>-of-2, as saved
  size_t table_rows = 0;
  std::vector<float> rows;               // the training data's keys' rows, then the raw peer's IDs'
  int rejected = 0;
  std::string ps_logs[kShards];
  std::string logs;
};

class HostileSparseTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir("hostile-sparse-data");
    write_criteo(data_->path + "/train.tsv", kRecords, 0);
    write_criteo(data_->path + "/test.tsv", 40, 100000);
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }

  // What the raw peer sends at kHostileStep instead of its push: hostile messages, then its push.
  using Misbehave = void (*)(RawWorker& raw, Hostile& hostile, zmq::context_t& context, const std::string& ps0,
                             uint64_t step);
  static void misbehave(RawWorker& raw, Hostile& hostile, zmq::context_t& context, const std::string& ps0,
                        uint64_t step) {
    send_undecodable(raw, hostile, step);
    send_unregistered(context, ps0, hostile, step);
    send_refused_then_push(raw, hostile, step);
  }

  // The job, with the raw peer as worker 2; with `hostile`, it misbehaves at kHostileStep.
  static CtrRun train(Misbehave hostile, const std::vector<std::string>& extra = {}) {
    const TempDir dir(hostile != nullptr ? "hostile-sparse" : "hostile-sparse-ref");
    Job job;
    job.num_ps = kShards;
    job.num_workers = kWorkers;
    job.dir = dir.path;
    job.args = {"--train-data", data_->path + "/train.tsv", "--test-data", data_->path + "/test.tsv", "--cache-dir",
                dir.path, "--embedding-dim", std::to_string(kDim), "--embedding-optimizer", "adagrad",
                "--embedding-lr", "0.1", "--model", "dense 16, relu, dense 2", "--optimizer", "sgd", "--lr", "0.1",
                "--batch-size", std::to_string(kBatch), "--steps", std::to_string(kSteps), "--epochs", "5",
                "--seed", "7", "--log-every", "5", "--timeout", "30", "--save-params", dir.path + "/params"};
    job.args.insert(job.args.end(), extra.begin(), extra.end());
    Children processes;
    std::vector<pid_t> servers;
    const std::vector<std::string> addresses = start_servers(job, &servers);
    for (pid_t pid : servers) processes.add(pid);
    const std::string hosts = addresses[0] + "," + addresses[1];
    std::vector<pid_t> workers;
    for (int i = 0; i < 2; ++i) {
      workers.push_back(processes.add(
          spawn(worker_argv(job, i, {"--ps-hosts", hosts}), dir.path + "/w" + std::to_string(i) + ".log")));
    }

    // The real workers register first: the job's shape is theirs, which the raw peer's HELLO must match.
    for (int s = 0; s < kShards; ++s) {
      const std::string log = dir.path + "/ps" + std::to_string(s) + ".log";
      EXPECT_TRUE(wait_for_text(log, "worker 0 registered", 30) && wait_for_text(log, "worker 1 registered", 30))
          << read_file(log);
    }
    CtrRun run;
    zmq::context_t context(1);
    RawWorker raw(context, addresses);
    Hostile misbehaving(raw, 0);
    run_raw_worker(raw, hostile, misbehaving, context, addresses[0]);

    bool ok = !raw.broken();
    for (pid_t pid : workers) ok = processes.wait(pid, 60).ok() && ok;
    for (pid_t pid : servers) ok = processes.wait(pid, 10).ok() && ok;
    for (int s = 0; s < kShards; ++s) run.ps_logs[s] = read_file(dir.path + "/ps" + std::to_string(s) + ".log");
    run.logs = run.ps_logs[0] + run.ps_logs[1] + read_file(dir.path + "/w0.log") + read_file(dir.path + "/w1.log");
    EXPECT_EQ(raw.unclaimed(), 0u) << "a hostile request was answered after all";
    EXPECT_TRUE(ok) << run.logs;
    run.rejected = misbehaving.rejected();
    if (!ok) return run;
    run.ok = true;
    run.dense = load_saved_params(dir.path + "/params");
    for (int s = 0; s < kShards; ++s) {
      run.table_files.push_back(read_file(dir.path + "/params/embeddings/ids.shard" + std::to_string(s) + "-of-2"));
    }
    const auto tables = load_tables(dir.path + "/params", "adagrad", {"ids"}, kDim);
    const EmbeddingTable& table = *tables.at("ids");
    run.table_rows = table.stats().rows;
    std::vector<uint64_t> keys;
    for (int r = 0; r < kRecords; ++r) {
      for (int f = 0; f < 26; ++f) keys.push_back(ctr_key(r, f, false));
    }
    for (int s = 0; s < kShards; ++s) {
      for (uint64_t id : raw.ids(s)) keys.push_back(id);
    }
    run.rows.resize(keys.size() * kDim);
    table.lookup(keys.data(), keys.size(), run.rows.data());
    return run;
  }

  // Worker 2's steps. Before step kHostileStep it pushes its rows of step kHostileStep - 1 and
  // waits until every shard has applied that step, but holds back its dense push of it: the real
  // workers cannot start kHostileStep, so shard 0 collects kHostileStep with no push yet while
  // the hostile messages arrive, then with only this worker's.
  static void run_raw_worker(RawWorker& raw, Misbehave hostile, Hostile& misbehaving, zmq::context_t& context,
                             const std::string& ps0) {
    raw.hello();
    if (HasFatalFailure()) return;
    raw.pull(0);  // as a worker starts: answered once the chief's INIT is there
    raw.sparse_pull(0);
    for (uint64_t t = 0; t < kSteps && !raw.broken(); ++t) {
      raw.await_params(t);
      raw.await_rows(t);
      if (t + 1 == kHostileStep) {
        raw.sparse_push(t);
        raw.sparse_pull(t + 1);
        raw.await_rows(t + 1);
        if (hostile != nullptr) {
          hostile(raw, misbehaving, context, ps0, t + 1);
        } else {
          raw.sparse_push(t + 1);
        }
        raw.push(t);
        raw.pull(t + 1);
        raw.await_params(t + 1);
        raw.push(t + 1);
        raw.await_later();  // the hostile peer's parked pulls, answered as the step is applied
        raw.pull(t + 2);
        raw.sparse_pull(t + 2);
        ++t;
        continue;
      }
      raw.push(t);
      raw.sparse_push(t);
      raw.pull(t + 1);
      if (t + 1 < kSteps) raw.sparse_pull(t + 1);
    }
    raw.await_params(kSteps);
    raw.done();
  }

  static TempDir* data_;
};
TempDir* HostileSparseTest::data_ = nullptr;

TEST_F(HostileSparseTest, HostileSparseTrafficDuringTrainingIsRefusedAndChangesNothing) {
  const auto start = std::chrono::steady_clock::now();
  const CtrRun want = train(nullptr);
  ASSERT_TRUE(want.ok);
  for (int s = 0; s < kShards; ++s) EXPECT_EQ(count_of(want.ps_logs[s], kRejectedLine), 0u) << want.ps_logs[s];

  const CtrRun got = train(misbehave);
  ASSERT_TRUE(got.ok);
  // One "rejected" line for every hostile message, all at shard 0; none for the real traffic.
  EXPECT_GE(got.rejected, 40);
  EXPECT_EQ(count_of(got.ps_logs[0], kRejectedLine), static_cast<size_t>(got.rejected)) << got.ps_logs[0];
  EXPECT_EQ(count_of(got.ps_logs[1], kRejectedLine), 0u) << got.ps_logs[1];

  EXPECT_TRUE(bit_identical(want.dense, got.dense)) << "hostile traffic changed the dense parameters ("
                                                    << relative_difference(want.dense, got.dense) << ")";
  ASSERT_EQ(want.table_files.size(), got.table_files.size());
  for (int s = 0; s < kShards; ++s) {
    EXPECT_FALSE(want.table_files[s].empty());
    EXPECT_TRUE(want.table_files[s] == got.table_files[s]) << "shard " << s << "'s saved table differs";
  }
  EXPECT_GT(want.table_rows, 26u * 4);
  EXPECT_EQ(want.table_rows, got.table_rows);
  ASSERT_EQ(want.rows.size(), got.rows.size());
  EXPECT_EQ(std::memcmp(want.rows.data(), got.rows.data(), want.rows.size() * sizeof(float)), 0)
      << "hostile traffic changed the rows";
  std::printf("%d hostile sparse messages refused during training; dense and %zu rows bit-identical (%.1f s)\n",
              got.rejected, got.table_rows,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// The raw peer's push of kHostileStep to shard 0 in three parts, amid parts that break the rules
// (docs/wire_protocol.md, "Sparse tables"): each of those is refused naming the part, and the
// parts put together train exactly what its whole push trains.
TEST_F(HostileSparseTest, PartsOfAPushAreCheckedAgainstEachOtherAndPutTogether) {
  const CtrRun want = train(nullptr);
  ASSERT_TRUE(want.ok);
  const CtrRun got = train(send_parts);
  ASSERT_TRUE(got.ok);
  EXPECT_EQ(got.rejected, 17);
  EXPECT_EQ(count_of(got.ps_logs[0], kRejectedLine), static_cast<size_t>(got.rejected)) << got.ps_logs[0];
  EXPECT_EQ(count_of(got.ps_logs[1], kRejectedLine), 0u) << got.ps_logs[1];
  EXPECT_NE(got.ps_logs[0].find("sparse pushes in parts: 1 (3 parts)"), std::string::npos) << got.ps_logs[0];
  EXPECT_TRUE(bit_identical(want.dense, got.dense)) << relative_difference(want.dense, got.dense);
  for (int s = 0; s < kShards; ++s) EXPECT_TRUE(want.table_files[s] == got.table_files[s]) << "shard " << s;
  ASSERT_EQ(want.rows.size(), got.rows.size());
  EXPECT_EQ(std::memcmp(want.rows.data(), got.rows.data(), want.rows.size() * sizeof(float)), 0);
}

// A SPARSE_PULL's answer is bounded before it is built (issue 50: one pull of 34M IDs killed the
// PS building a SPARSE_ROWS past 1 GiB): pulls whose body or answer passes a part's bound, the
// job's chunk, are refused with ERROR naming the sizes and the bound; the PS stays up, answers
// the raw peer's next pulls and the real workers', and the job trains what it trains without them.
TEST_F(HostileSparseTest, PullsWhoseAnswerPassesTheChunkAreRefusedBeforeItIsBuilt) {
  const std::vector<std::string> chunk = {"--chunk-kib", std::to_string(kSmallChunkKib)};
  const CtrRun want = train(nullptr, chunk);
  ASSERT_TRUE(want.ok);
  const CtrRun got = train(send_oversized_pulls, chunk);
  ASSERT_TRUE(got.ok);
  EXPECT_EQ(got.rejected, 6);
  EXPECT_EQ(count_of(got.ps_logs[0], kRejectedLine), static_cast<size_t>(got.rejected)) << got.ps_logs[0];
  EXPECT_EQ(count_of(got.ps_logs[1], kRejectedLine), 0u) << got.ps_logs[1];
  EXPECT_TRUE(bit_identical(want.dense, got.dense)) << relative_difference(want.dense, got.dense);
  for (int s = 0; s < kShards; ++s) EXPECT_TRUE(want.table_files[s] == got.table_files[s]) << "shard " << s;
  ASSERT_EQ(want.rows.size(), got.rows.size());
  EXPECT_EQ(std::memcmp(want.rows.data(), got.rows.data(), want.rows.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace pstrain::test
