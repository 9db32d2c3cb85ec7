// A live pstrain-ps under hostile traffic: a raw ZeroMQ DEALER in the test sends truncated,
// bit-flipped, oversized and out-of-protocol messages while real workers train. Every such
// message gets an ERROR reply naming the problem and a "rejected" line in the PS log, and the
// trained parameters equal those of the same job without the hostile traffic.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "shared/net/local_channel.h"
#include "worker/data/npy_format.h"
#include "shared/wire/protocol.h"
#include "shared/net/shared_memory.h"
#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"
#include "test_util/zmq_frames.h"

namespace pstrain::test {
namespace {

using test::Frames;
using SteadyClock = std::chrono::steady_clock;

constexpr double kReplySeconds = 10;  // deadline of every reply the test waits for
constexpr int kSteps = 30;
// --hidden 16,8 on 8x8 images and 10 classes: (64+1)*16 + (16+1)*8 + (8+1)*10 floats.
constexpr uint64_t kModelFloats = (64 + 1) * 16 + (16 + 1) * 8 + (8 + 1) * 10;
constexpr const char* kRejectedLine = "rejected a message from peer 0x";
constexpr const char* kTruncated = "header is not valid MessagePack (insufficient bytes)";

std::string bytes_of(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

std::vector<float> floats_of(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

Frames message(const Header& h, const std::vector<float>* payload = nullptr) {
  Frames frames = {encode_header(h)};
  if (payload != nullptr) frames.push_back(bytes_of(*payload));
  return frames;
}

// A raw DEALER socket: speaks, or abuses, the wire protocol directly.
class RawPeer {
 public:
  RawPeer(zmq::context_t& context, const std::string& address) : socket_(context, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::sndtimeo, static_cast<int>(kReplySeconds * 1000));
    socket_.connect("tcp://" + address);
  }

  void send(const Frames& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (!socket_.send(zmq::message_t(frames[i].data(), frames[i].size()), flags)) return;
    }
  }

  // The next message; empty if none arrived within kReplySeconds. After one such timeout (the
  // PS died or went silent) it returns at once, so a broken PS fails the test quickly.
  Frames receive() {
    const auto wait = std::chrono::milliseconds(timed_out_ ? 0 : static_cast<long>(kReplySeconds * 1000));
    Frames frames = test::receive_frames(socket_, wait);
    if (frames.empty()) timed_out_ = true;
    return frames;
  }

  // Receives one reply, which must be a single well-formed frame from PS `ps_index`.
  Header receive_header(int ps_index, const std::string& context) {
    const Frames reply = receive();
    Header h;
    std::string error;
    EXPECT_FALSE(reply.empty()) << context << ": no reply within " << kReplySeconds << " s";
    if (reply.empty()) return h;
    EXPECT_TRUE(decode_header(reply[0].data(), reply[0].size(), &h, &error)) << context << ": " << error;
    EXPECT_TRUE(check_frames(h, reply.size(), reply.size() > 1 ? reply[1].size() : 0, &error)) << context << ": " << error;
    EXPECT_EQ(h.role, SenderRole::kPs) << context;
    EXPECT_EQ(h.sender, static_cast<uint32_t>(ps_index)) << context;
    last_payload_ = reply.size() > 1 ? reply[1] : std::string();
    return h;
  }
  const std::string& last_payload() const { return last_payload_; }
  bool timed_out() const { return timed_out_; }

 private:
  zmq::socket_t socket_;
  std::string last_payload_;
  bool timed_out_ = false;
};

// Sends hostile messages and checks each ERROR reply; counts them for the PS log check.
class Hostile {
 public:
  explicit Hostile(int ps_index) : ps_index_(ps_index) {}

  // `frames` must be answered with ERROR `why` (cut to kMaxMessageChars, as on the wire), for
  // the request id of frame 0 if it decodes and 0 otherwise.
  void expect_rejected(RawPeer& peer, const Frames& frames, const std::string& why, const std::string& what) {
    Header sent;
    std::string error;
    const bool decodes = !frames.empty() && decode_header(frames[0].data(), frames[0].size(), &sent, &error);
    if (peer.timed_out()) return;  // already reported; the PS log count check fails too
    peer.send(frames);
    const Header reply = peer.receive_header(ps_index_, what);
    EXPECT_EQ(reply.op, Op::kError) << what;
    EXPECT_EQ(reply.request_id, decodes ? sent.request_id : 0) << what;
    EXPECT_EQ(reply.message, why.substr(0, kMaxMessageChars)) << what;
    ++rejected_;
  }
  int rejected() const { return rejected_; }

 private:
  const int ps_index_;
  int rejected_ = 0;
};

// The answer of the PS to a peer that never said HELLO (ps/server.cc handle()): the decode or
// frame error, the role error, or "<OP> from a peer that never said HELLO". Used for generated
// inputs (bit flips, random garbage); hand-written inputs spell their expected text out.
std::string unregistered_reason(const Frames& frames) {
  Header h;
  std::string error;
  if (!decode_header(frames[0].data(), frames[0].size(), &h, &error)) return error;
  if (!check_frames(h, frames.size(), frames.size() > 1 ? frames[1].size() : 0, &error)) return error;
  if (h.role != SenderRole::kWorker) return "only workers talk to a PS";
  if (h.op == Op::kHello) throw std::logic_error("generated input decodes to a HELLO; pick another seed");
  return std::string(op_name(h.op)) + " from a peer that never said HELLO";
}

// Frame 0 of `frames` with the byte after `marker` replaced.
Frames patched(Frames frames, const std::string& marker, size_t skip, char value) {
  const size_t at = frames[0].find(marker);
  if (at == std::string::npos) throw std::logic_error("marker not in header");
  frames[0][at + marker.size() + skip] = value;
  return frames;
}


class HostileTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_dir_ = new TempDir("hostile-data");
    // 300 records, batch 8, 2 workers: an epoch is 18 steps, so 30 steps cross an epoch.
    write_synthetic_mnist(data_dir_->path, "train", 300, 8, 8, 21, false);
    write_synthetic_mnist(data_dir_->path, "t10k", 100, 8, 8, 22, false);
  }
  static void TearDownTestSuite() {
    delete data_dir_;
    data_dir_ = nullptr;
  }

  static Job job(const std::string& dir, int num_workers) {
    Job j;
    j.num_workers = num_workers;
    j.dir = dir;
    j.args = {"--data-dir", data_dir_->path, "--cache-dir", dir, "--hidden", "16,8", "--batch-size", "8",
              "--steps", std::to_string(kSteps), "--epochs", "5", "--optimizer", "adam", "--lr", "0.01",
              "--seed", "7", "--log-every", "10", "--timeout", "30", "--stall-report", "0.05",
              "--save-params", dir + "/params"};
    return j;
  }

  static std::vector<std::string> worker_argv(const Job& j, int index, const std::string& address) {
    std::vector<std::string> argv = {PSTRAIN_WORKER_BIN, "--index", std::to_string(index), "--num-ps", "1",
                                     "--num-workers", std::to_string(j.num_workers), "--ps-hosts", address};
    argv.insert(argv.end(), j.args.begin(), j.args.end());
    return argv;
  }

  static TempDir* data_dir_;
};
TempDir* HostileTest::data_dir_ = nullptr;

// A valid PUSH of the whole model for step 0 by worker `sender`.
Header push_header(uint32_t sender, uint64_t rid) {
  Header h;
  h.op = Op::kPush;
  h.request_id = rid;
  h.sender = sender;
  h.length = kModelFloats;
  h.samples = 8;
  h.loss_sum = 18.5;
  h.correct = 3;
  return h;
}

// A PULL of parameter version `version` by worker `sender`.
Header pull_header(uint32_t sender, uint64_t rid, uint64_t version) {
  Header h;
  h.op = Op::kPull;
  h.request_id = rid;
  h.sender = sender;
  h.step = version;
  return h;
}

// The real job's global batch is 2 x 8.
Header hello_header(uint32_t sender, uint64_t rid, uint32_t num_workers, uint64_t total, uint64_t steps,
                    uint64_t global_batch = 16, ModeCode mode = ModeCode::kSync) {
  Header h;
  h.op = Op::kHello;
  h.samples = global_batch;
  h.mode = static_cast<uint64_t>(mode);
  h.request_id = rid;
  h.sender = sender;
  h.num_workers = num_workers;
  h.total = total;
  h.step = steps;
  return h;
}

// Messages from a socket that never registers: each fails at the first check it reaches.
void send_unregistered_traffic(RawPeer& peer, Hostile& hostile) {
  const std::vector<float> grad(kModelFloats, 0.01f);
  const Frames push = message(push_header(0, 100), &grad);
  const std::string& header = push[0];

  for (size_t n = 0; n < header.size(); ++n) {  // every truncation of the header
    hostile.expect_rejected(peer, {header.substr(0, n), push[1]}, n == 0 ? "empty header frame" : kTruncated,
                            "header cut to " + std::to_string(n) + " bytes");
  }
  for (size_t bit = 0; bit < header.size() * 8; ++bit) {  // every single-bit flip of the header
    Frames flipped = push;
    flipped[0][bit / 8] = static_cast<char>(flipped[0][bit / 8] ^ (1 << (bit % 8)));
    hostile.expect_rejected(peer, flipped, unregistered_reason(flipped), "bit " + std::to_string(bit) + " flipped");
  }

  const uint32_t wrong = kProtocolVersion + 2;  // a positive fixint, one byte like the right one
  hostile.expect_rejected(peer, patched(push, "\xa3ver", 0, static_cast<char>(wrong)),
                          "protocol version " + std::to_string(wrong) + " is not supported (expected " +
                              std::to_string(kProtocolVersion) + ")",
                          "wrong version");
  hostile.expect_rejected(peer, patched(push, "\xa5magic", 4, '\x00'), "bad magic (not a pstrain message)",
                          "wrong magic");
  hostile.expect_rejected(peer, {header + '\0', push[1]}, "trailing bytes after the header map", "trailing byte");
  hostile.expect_rejected(peer, {std::string(2000, '\x81'), push[1]}, "header frame of 2000 bytes exceeds 1024",
                          "oversized header frame");
  hostile.expect_rejected(peer, {header}, "PUSH needs 2 frame(s), got 1", "payload frame missing");
  hostile.expect_rejected(peer, {header, push[1], push[1]}, "PUSH needs 2 frame(s), got 3", "extra frame");
  hostile.expect_rejected(peer, {header, push[1].substr(4)},
                          "PUSH payload is 5060 bytes, header says 1266 float32 (5064 bytes)", "payload cut short");
  hostile.expect_rejected(peer, {header, push[1] + "abcd"},
                          "PUSH payload is 5068 bytes, header says 1266 float32 (5064 bytes)", "one float too many");
  hostile.expect_rejected(peer, {header, std::string(size_t{4} << 20, '\0')},
                          "PUSH payload is 4194304 bytes, header says 1266 float32 (5064 bytes)", "4 MiB payload");

  // Well-formed requests: the sender never said HELLO, whatever the request says.
  const std::string never = " from a peer that never said HELLO";
  Header h = push_header(0, 101);
  h.length = kModelFloats + 34;  // more floats than the slice, consistently
  const std::vector<float> bigger(h.length, 0.5f);
  hostile.expect_rejected(peer, message(h, &bigger), "PUSH" + never, "slice longer than the shard's");
  h = push_header(0, 102);
  h.offset = 5;  // not this shard's slice
  hostile.expect_rejected(peer, message(h, &grad), "PUSH" + never, "wrong slice");
  h = push_header(0, 103);
  h.step = 7;  // not the barrier's step
  hostile.expect_rejected(peer, message(h, &grad), "PUSH" + never, "wrong step");
  std::vector<float> nan_grad = grad;
  nan_grad[17] = std::numeric_limits<float>::quiet_NaN();
  hostile.expect_rejected(peer, message(push_header(1, 104), &nan_grad), "PUSH" + never, "NaN gradient");
  hostile.expect_rejected(peer, message(push_header(1, 105), &grad), "PUSH" + never, "push for the current step");
  h = push_header(0, 106);
  h.op = Op::kInit;  // would overwrite the parameters if accepted
  hostile.expect_rejected(peer, message(h, &grad), "INIT" + never, "INIT");
  for (Op op : {Op::kPull, Op::kDone, Op::kWelcome, Op::kError}) {
    h = push_header(0, 107);
    h.op = op;
    h.step = 1;
    hostile.expect_rejected(peer, message(h), op_name(op) + never, op_name(op));
  }
  h = push_header(0, 108);
  h.op = Op::kParams;
  hostile.expect_rejected(peer, message(h, &grad), "PARAMS" + never, "PARAMS");
  h = push_header(0, 109);
  h.role = SenderRole::kPs;
  hostile.expect_rejected(peer, message(h, &grad), "only workers talk to a PS", "role PS");
  h = push_header(0, 110);
  h.loss_sum = std::numeric_limits<double>::infinity();
  hostile.expect_rejected(peer, message(h, &grad), "header field 'loss' is not finite", "infinite loss");

  std::mt19937_64 rng(4242);  // random garbage: 1 to 3 frames of random bytes
  for (int i = 0; i < 300; ++i) {
    Frames garbage(1 + rng() % 3);
    for (std::string& frame : garbage) {
      frame.resize(i % 50 == 0 ? 1025 + rng() % 100 : rng() % 48);
      for (char& c : frame) c = static_cast<char>(rng());
      if (i % 3 == 0 && !frame.empty()) frame[0] = static_cast<char>(0x80 | (rng() % 16));  // a small map
    }
    hostile.expect_rejected(peer, garbage, unregistered_reason(garbage), "garbage " + std::to_string(i));
  }
}

// HELLOs that claim what the real workers hold or get the job wrong, then requests from that
// socket, which stays unregistered. Worker 1 is not running yet: a HELLO claiming index 1 would
// take its slot (see SquatterTakesAFreeSlotAndTheRealWorkerFailsLoudly), so none is sent.
void send_false_hellos(RawPeer& peer, Hostile& hostile) {
  hostile.expect_rejected(peer, message(hello_header(0, 200, 2, kModelFloats, kSteps)),
                          "worker 0 is already registered from another peer", "HELLO claiming worker 0");
  hostile.expect_rejected(peer, message(hello_header(2, 201, 2, kModelFloats, kSteps)), "worker index out of range",
                          "HELLO as a new worker 2");
  hostile.expect_rejected(peer, message(hello_header(2, 202, 3, kModelFloats, kSteps)),
                          "worker thinks there are 3 workers; this PS has 2", "HELLO for a job of 3 workers");
  hostile.expect_rejected(peer, message(hello_header(0, 203, 2, kModelFloats + 1, kSteps)),
                          "model of 1267 parameters does not match 1266", "HELLO with another model");
  hostile.expect_rejected(peer, message(hello_header(0, 204, 2, kModelFloats, kSteps + 1)),
                          "job of 31 steps does not match the other workers' 30", "HELLO with another step count");
  hostile.expect_rejected(peer, message(hello_header(0, 205, 2, kModelFloats, kSteps, 24)),
                          "worker's global batch of 24 samples does not match the other workers' 16 (are --batch-size, "
                          "--accum-steps, --worker-batch and --global-batch the same everywhere?)",
                          "HELLO with another global batch");
  hostile.expect_rejected(peer, message(hello_header(0, 206, 2, kModelFloats, kSteps, 16, ModeCode::kAsync)),
                          "worker runs --mode async; this PS runs --mode sync", "HELLO of another mode");
  std::vector<float> nan_grad(kModelFloats, 0.01f);
  nan_grad[0] = std::numeric_limits<float>::quiet_NaN();
  const std::string never = " from a peer that never said HELLO";
  hostile.expect_rejected(peer, message(push_header(2, 205), &nan_grad), "PUSH" + never, "NaN push as worker 2");
  hostile.expect_rejected(peer, message(push_header(0, 206), &nan_grad), "PUSH" + never, "NaN push as worker 0");
  Header done = push_header(0, 207);
  done.op = Op::kDone;
  hostile.expect_rejected(peer, message(done), "DONE" + never, "DONE as worker 0");
}

TEST_F(HostileTest, HostileTrafficDuringTrainingIsRejectedAndChangesNothing) {
  const TempDir ref_dir("hostile-ref");
  const JobResult ref = run_job(job(ref_dir.path, 2));
  ASSERT_TRUE(ref.ok()) << ref.logs;
  EXPECT_EQ(count_of(ref.logs, kRejectedLine), 0u) << ref.logs;
  const SavedParams want = load_saved_params(ref_dir.path + "/params");

  const TempDir dir("hostile");
  const Job j = job(dir.path, 2);
  const std::string ps_log = dir.path + "/ps0.log";
  Children children;
  pid_t ps = -1;
  const std::string address = children.start_ps(j, &ps);
  const pid_t w0 = children.add(spawn(worker_argv(j, 0, address), dir.path + "/w0.log"));
  // Worker 1 is not started yet, so the barrier of step 0 cannot complete. Once the PS reports
  // it stalled, worker 0 has registered, initialised the parameters and pushed step 0: training
  // is in progress, with a half-filled barrier, and stays so until worker 1 starts.
  ASSERT_TRUE(wait_for_text(ps_log, "stall: barrier of step 0 has waited", 30)) << read_file(ps_log);
  ASSERT_NE(read_file(ps_log).find("model has " + std::to_string(kModelFloats) + " parameters"), std::string::npos);

  zmq::context_t context(1);
  Hostile hostile(0);
  {
    RawPeer never_registered(context, address);
    send_unregistered_traffic(never_registered, hostile);
    RawPeer claimant(context, address);
    send_false_hellos(claimant, hostile);
  }
  const std::string log_during = read_file(ps_log);
  EXPECT_EQ(count_of(log_during, kRejectedLine), static_cast<size_t>(hostile.rejected()));
  EXPECT_EQ(log_during.find("worker 1 registered"), std::string::npos) << "training finished too early";

  const pid_t w1 = children.add(spawn(worker_argv(j, 1, address), dir.path + "/w1.log"));
  const ExitStatus s0 = children.wait(w0, 60), s1 = children.wait(w1, 60), sp = children.wait(ps, 10);
  const std::string logs = read_file(ps_log) + read_file(dir.path + "/w0.log") + read_file(dir.path + "/w1.log");
  ASSERT_TRUE(s0.ok() && s1.ok() && sp.ok()) << logs;
  // Every hostile message left one "rejected" line; the real workers' traffic left none.
  EXPECT_EQ(count_of(read_file(ps_log), kRejectedLine), static_cast<size_t>(hostile.rejected())) << logs;
  EXPECT_NE(read_file(dir.path + "/w0.log").find("(global 30)"), std::string::npos) << logs;
  const double rel = relative_difference(want, load_saved_params(dir.path + "/params"));
  EXPECT_LE(rel, 1e-6) << "hostile traffic changed the trained parameters";
  std::printf("%d hostile messages rejected during training; max |difference| / max |parameter| = %.3g\n",
              hostile.rejected(), rel);
}

// --- Registered peers that misbehave --------------------------------------------------------
// The test plays both workers of a 2-worker job (raw sockets that registered with HELLO) against
// PS shard 1 of 2, so every validation behind registration is reachable and the barrier's state
// is known exactly. The hostile script must end with the same parameters as the clean one.

constexpr uint64_t kFakeTotal = 10;  // shard 1 of 2 holds [5, 10)
constexpr uint64_t kFakeSteps = 2;
constexpr uint64_t kShardOffset = 5, kShardLength = 5;

struct FakeJobResult {
  std::vector<std::vector<float>> versions;  // parameters of version 0 .. kFakeSteps
  std::vector<Header> params_headers;        // PARAMS headers of versions 1 .. kFakeSteps
  int rejected = 0;                          // hostile messages sent (and rejected)
  std::string ps_log;
  ExitStatus ps;
};

class FakeWorkers {
 public:
  FakeWorkers(zmq::context_t& context, const std::string& address, Hostile& hostile)
      : w_{RawPeer(context, address), RawPeer(context, address)}, hostile_(hostile) {}

  RawPeer& peer(uint32_t worker) { return w_[worker]; }

  Header request(Op op, uint32_t worker, uint64_t step) {
    Header h;
    h.op = op;
    h.request_id = next_rid_++;
    h.sender = worker;
    h.step = step;
    h.offset = kShardOffset;
    h.length = kShardLength;
    return h;
  }
  Header push(uint32_t worker, uint64_t step, uint64_t samples) {
    Header h = request(Op::kPush, worker, step);
    h.samples = samples;
    h.loss_sum = worker == 0 ? 1.25 : 0.75;
    h.correct = worker == 0 ? 2 : 1;
    return h;
  }
  // Sends and expects no reply (a successful PUSH, INIT or DONE, or a parked PULL).
  void send(uint32_t worker, const Frames& frames) { w_[worker].send(frames); }
  void reject(uint32_t worker, const Frames& frames, const std::string& why, const std::string& what) {
    hostile_.expect_rejected(w_[worker], frames, why, "w" + std::to_string(worker) + " " + what);
  }
  // Receives PARAMS of `version` for request `rid`; returns the header, payload in *values.
  Header params(uint32_t worker, uint64_t rid, uint64_t version, std::vector<float>* values) {
    const std::string what = "w" + std::to_string(worker) + " PARAMS " + std::to_string(version);
    const Header h = w_[worker].receive_header(1, what);
    EXPECT_EQ(h.op, Op::kParams) << what << ": " << h.message;
    EXPECT_EQ(h.request_id, rid) << what;
    EXPECT_EQ(h.step, version) << what;
    EXPECT_EQ(h.offset, kShardOffset) << what;
    EXPECT_EQ(h.length, kShardLength) << what;
    *values = floats_of(w_[worker].last_payload());
    return h;
  }

 private:
  RawPeer w_[2];
  Hostile& hostile_;
  uint64_t next_rid_ = 1;
};

std::vector<float> fake_gradient(uint32_t worker, uint64_t step) {
  std::vector<float> g(kShardLength);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f * static_cast<float>(i + 1) * (worker == 0 ? 1.0f : -0.3f) + 0.05f * step;
  return g;
}
const std::vector<float> kFakeInit = {0.5f, -1.0f, 2.0f, 3.25f, -4.0f};

// Before INIT: pushes and a second chief are refused; a pull waits for the first INIT.
void misbehave_before_init(FakeWorkers& f) {
  const std::vector<float> nan_init = {0.5f, std::nanf(""), 2.0f, 3.25f, -4.0f};
  const std::vector<float> g = fake_gradient(0, 0);
  f.reject(0, message(f.push(0, 0, 3), &g), "push before the parameters were initialised", "early push");
  f.reject(1, message(f.request(Op::kInit, 1, 0), &kFakeInit), "only the chief (worker 0) initialises parameters",
           "INIT by worker 1");
  f.reject(0, message(f.request(Op::kInit, 0, 0), &nan_init), "initial values are not all finite", "NaN INIT");
  Header wrong = f.request(Op::kInit, 0, 0);
  wrong.offset = 0;
  f.reject(0, message(wrong, &kFakeInit), "slice [0, +5) is not a chunk of this shard's [5, +5) (chunks of 262144)", "INIT of shard 0's slice");
  f.reject(1, message(hello_header(0, 99, 2, kFakeTotal, kFakeSteps)),
           "worker 0 is already registered from another peer", "HELLO claiming worker 0");
}

// While the barrier of `step` holds worker 0's push and waits for worker 1.
void misbehave_in_barrier(FakeWorkers& f, uint64_t step) {
  const std::string at = std::to_string(step);
  const std::vector<float> g = fake_gradient(1, step);
  f.reject(1, message(f.push(1, step + 1, 2), &g),
           "push for step " + std::to_string(step + 1) + " but the barrier is at step " + at, "push ahead");
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    std::vector<float> poisoned = g;
    poisoned[2] = bad;
    f.reject(1, message(f.push(1, step, 2), &poisoned), "gradient is not all finite", "non-finite gradient");
  }
  f.reject(1, message(f.push(1, step, 0), &g), "push with zero samples", "zero samples");
  // Shared memory: worker 1 offered no segment, so its payloads must come as frames.
  Header shm = f.push(1, step, 2);
  shm.shm = 1;
  f.reject(1, message(shm), "push from shared memory, but this worker's segment is not mapped here", "shm push");
  f.reject(1, message(shm, &g), "PUSH needs 1 frame(s), got 2", "shm push with a payload");
  f.reject(1, patched(message(shm), "\xa3shm", 0, 2), "shm is not 0 or 1 (or 2 in WELCOME and PULL)", "shm 2");
  shm = f.request(Op::kPull, 1, step + 1);
  shm.shm = 1;
  f.reject(1, message(shm), "pull into shared memory, but this worker's segment is not mapped here", "shm pull");
  shm.shm = 2;  // "I read your parameter area": decodes in a PULL, refused without a segment
  f.reject(1, message(shm), "pull into shared memory, but this worker's segment is not mapped here", "area pull");
  Header h = f.push(1, step, 2);
  h.offset = 0;
  f.reject(1, message(h, &g), "slice [0, +5) is not a chunk of this shard's [5, +5) (chunks of 262144)", "shard 0's slice");
  h = f.push(1, step, 2);
  h.length = kShardLength + 1;
  const std::vector<float> longer(kShardLength + 1, 0.25f);
  f.reject(1, message(h, &longer), "slice [5, +6) is not a chunk of this shard's [5, +5) (chunks of 262144)", "slice longer than the shard's");
  f.reject(1, {encode_header(f.push(1, step, 2)), bytes_of(longer)},
           "PUSH payload is 24 bytes, header says 5 float32 (20 bytes)", "more floats than the header says");
  h = f.push(1, step, 2);
  h.sender = 0;
  f.reject(1, message(h, &g), "sender 0 does not match registered worker 1", "push in worker 0's name");
  h = f.push(1, step, 2);
  h.role = SenderRole::kPs;
  f.reject(1, message(h, &g), "only workers talk to a PS", "role PS");
  h = f.push(1, step, 2);
  h.loss_sum = std::nan("");
  f.reject(1, message(h, &g), "header field 'loss' is not finite", "NaN loss");
  f.reject(1, patched(message(f.push(1, step, 2), &g), "\xa3ver", 0, static_cast<char>(kProtocolVersion ^ 4)),
           "protocol version " + std::to_string(kProtocolVersion ^ 4) + " is not supported (expected " +
               std::to_string(kProtocolVersion) + ")",
           "version bit flipped");
  f.reject(1, {encode_header(f.push(1, step, 2)).substr(0, 40), bytes_of(g)}, kTruncated, "truncated header");
  // CLIP belongs to --clip-norm jobs of several shards (this one has neither); NORM is the PS's.
  Header clip = f.request(Op::kClip, 1, step);
  clip.length = kNormWords;
  const std::vector<float> squares(kNormWords, 0.0f);
  f.reject(1, message(clip, &squares),
           "CLIP, but this shard does not wait for other shards' norms (--clip-norm with several shards, sync)", "CLIP");
  clip.length = 3;
  f.reject(1, message(clip, &kFakeInit), "CLIP payload is 20 bytes, header says 3 float32 (12 bytes)", "short CLIP");
  Header norm = f.request(Op::kNorm, 1, step);
  norm.length = kNormWords;
  f.reject(1, message(norm, &squares), "NORM is not a request", "NORM");
  for (Op op : {Op::kWelcome, Op::kError, Op::kWaiting}) {
    f.reject(1, message(f.request(op, 1, step)), std::string(op_name(op)) + " is not a request", op_name(op));
  }
  f.reject(1, message(f.request(Op::kParams, 1, step), &g), "PARAMS is not a request", "PARAMS");
  const std::vector<float> w0_grad = fake_gradient(0, step);
  f.reject(0, message(f.push(0, step, 3), &w0_grad), "worker 0 already pushed step " + at, "second push");
  f.reject(0, message(f.request(Op::kPull, 0, step + 2)),
           "pull for version " + std::to_string(step + 2) + " while at version " + at, "pull two versions ahead");
  f.reject(0, message(f.request(Op::kInit, 0, 0), &kFakeInit), "parameters are already initialised", "second INIT");
}

FakeJobResult run_fake_job(bool hostile_traffic) {
  const TempDir dir(hostile_traffic ? "hostile-fake" : "hostile-fake-ref");
  Children children;
  const pid_t ps = children.add(spawn({PSTRAIN_PS_BIN, "--index", "1", "--num-ps", "2", "--num-workers", "2",
                                       "--port-file", dir.path + "/ps1.addr", "--optimizer", "sgd", "--lr", "0.5",
                                       "--timeout", "10"},
                                      dir.path + "/ps1.log"));
  const std::string address = wait_for_file(dir.path + "/ps1.addr", 30);
  zmq::context_t context(1);
  Hostile hostile(1);
  FakeWorkers f(context, address, hostile);
  FakeJobResult result;

  for (uint32_t w : {0u, 1u}) {
    const Header hello = hello_header(w, 1000 + w, 2, kFakeTotal, kFakeSteps);
    f.send(w, message(hello));
    const Header welcome = f.peer(w).receive_header(1, "WELCOME");
    EXPECT_EQ(welcome.op, Op::kWelcome) << welcome.message;
    EXPECT_EQ(welcome.request_id, hello.request_id);
    EXPECT_EQ(welcome.step, 0u);
    EXPECT_EQ(welcome.offset, kShardOffset);
    EXPECT_EQ(welcome.length, kShardLength);
    EXPECT_EQ(welcome.total, kFakeTotal);
  }
  if (hostile_traffic) misbehave_before_init(f);
  const Header pull0 = f.request(Op::kPull, 1, 0);
  f.send(1, message(pull0));  // parked until the INIT below
  f.send(0, message(f.request(Op::kInit, 0, 0), &kFakeInit));
  result.versions.emplace_back();
  f.params(1, pull0.request_id, 0, &result.versions.back());

  for (uint64_t step = 0; step < kFakeSteps; ++step) {
    const std::vector<float> g0 = fake_gradient(0, step), g1 = fake_gradient(1, step);
    f.send(0, message(f.push(0, step, 3), &g0));
    if (hostile_traffic) misbehave_in_barrier(f, step);
    const Header pull = f.request(Op::kPull, 0, step + 1);
    f.send(0, message(pull));  // parked until worker 1's push completes the barrier
    f.send(1, message(f.push(1, step, 2), &g1));
    result.versions.emplace_back();
    result.params_headers.push_back(f.params(0, pull.request_id, step + 1, &result.versions.back()));
    if (hostile_traffic) {
      f.reject(1, message(f.push(1, step, 2), &g1),
               "push for step " + std::to_string(step) + " but the barrier is at step " + std::to_string(step + 1),
               "replayed push");
    }
  }
  f.send(0, message(f.request(Op::kDone, 0, 0)));
  f.send(1, message(f.request(Op::kDone, 1, 0)));
  result.ps = children.wait(ps, 10);
  result.rejected = hostile.rejected();
  result.ps_log = read_file(dir.path + "/ps1.log");
  return result;
}

TEST_F(HostileTest, RegisteredPeersCannotCorruptTheBarrier) {
  const FakeJobResult clean = run_fake_job(false);
  const FakeJobResult dirty = run_fake_job(true);
  ASSERT_TRUE(clean.ps.ok()) << clean.ps_log;
  ASSERT_TRUE(dirty.ps.ok()) << dirty.ps_log;
  EXPECT_EQ(count_of(clean.ps_log, kRejectedLine), 0u) << clean.ps_log;
  EXPECT_GT(dirty.rejected, 0);
  EXPECT_EQ(count_of(dirty.ps_log, kRejectedLine), static_cast<size_t>(dirty.rejected)) << dirty.ps_log;

  // The parameters and metrics are bit-identical to the clean run's...
  ASSERT_EQ(clean.versions.size(), kFakeSteps + 1);
  ASSERT_EQ(dirty.versions.size(), kFakeSteps + 1);
  for (size_t v = 0; v < clean.versions.size(); ++v) EXPECT_EQ(clean.versions[v], dirty.versions[v]) << "version " << v;
  // ...and they are what the two good pushes alone give: SGD on the mean over 3 + 2 samples.
  EXPECT_EQ(dirty.versions[0], kFakeInit);
  for (uint64_t step = 0; step < kFakeSteps; ++step) {
    const Header& h = dirty.params_headers[step];
    EXPECT_EQ(h.samples, 5u);
    EXPECT_EQ(h.loss_sum, 2.0);
    EXPECT_EQ(h.correct, 3u);
    const std::vector<float> g0 = fake_gradient(0, step), g1 = fake_gradient(1, step);
    for (size_t i = 0; i < kShardLength; ++i) {
      const float want = dirty.versions[step][i] - 0.5f * ((g0[i] + g1[i]) / 5.0f);
      EXPECT_NEAR(dirty.versions[step + 1][i], want, 1e-6f * std::max(1.0f, std::fabs(want)))
          << "version " << step + 1 << " element " << i;
    }
  }
}

// async: every push is one update, weighted by its samples against the mean share G / N (here
// 16 / 2 = 8), so a push of 4 samples moves the parameters half as far as its mean gradient
// would and one of 12 one and a half times as far; each is applied as it arrives.
TEST_F(HostileTest, AsyncAppliesEachPushWeightedByItsSamples) {
  const TempDir dir("async-weights");
  Children children;
  const pid_t ps = children.add(spawn({PSTRAIN_PS_BIN, "--index", "1", "--num-ps", "2", "--num-workers", "2",
                                       "--mode", "async", "--port-file", dir.path + "/ps1.addr", "--optimizer",
                                       "sgd", "--lr", "0.5", "--timeout", "10"},
                                      dir.path + "/ps1.log"));
  const std::string address = wait_for_file(dir.path + "/ps1.addr", 30);
  zmq::context_t context(1);
  Hostile hostile(1);
  FakeWorkers f(context, address, hostile);
  for (uint32_t w : {0u, 1u}) {
    f.send(w, message(hello_header(w, 1000 + w, 2, kFakeTotal, kFakeSteps, 16, ModeCode::kAsync)));
    const Header welcome = f.peer(w).receive_header(1, "WELCOME");
    ASSERT_EQ(welcome.op, Op::kWelcome) << welcome.message;
  }
  f.send(0, message(f.request(Op::kInit, 0, 0), &kFakeInit));
  // INIT and worker 1's push travel on different connections: worker 0's pull, answered once the
  // PS holds the initial values, puts worker 1's push after them.
  const Header pull0 = f.request(Op::kPull, 0, 0);
  f.send(0, message(pull0));
  std::vector<float> v0;
  f.params(0, pull0.request_id, 0, &v0);
  EXPECT_EQ(v0, kFakeInit);
  const std::vector<float> g1 = fake_gradient(1, 0), g0 = fake_gradient(0, 0);
  std::vector<float> v1, v2;
  // async pulls ask for the newest version (0 = any); one peer's messages arrive in order, so
  // each pull follows its own push: worker 1's is applied at once (no barrier), then worker 0's.
  f.send(1, message(f.push(1, 0, 4), &g1));
  const Header pull1 = f.request(Op::kPull, 1, 0);
  f.send(1, message(pull1));
  f.params(1, pull1.request_id, 1, &v1);
  f.send(0, message(f.push(0, 0, 12), &g0));
  const Header pull2 = f.request(Op::kPull, 0, 0);
  f.send(0, message(pull2));
  f.params(0, pull2.request_id, 2, &v2);
  for (size_t i = 0; i < kShardLength; ++i) {
    const float want1 = kFakeInit[i] - 0.5f * g1[i] * (2.0f / 16.0f);
    const float want2 = want1 - 0.5f * g0[i] * (2.0f / 16.0f);
    EXPECT_NEAR(v1[i], want1, 1e-6f * std::max(1.0f, std::fabs(want1))) << "element " << i;
    EXPECT_NEAR(v2[i], want2, 1e-6f * std::max(1.0f, std::fabs(want2))) << "element " << i;
  }
  f.send(0, message(f.request(Op::kDone, 0, 0)));
  f.send(1, message(f.request(Op::kDone, 1, 0)));
  EXPECT_TRUE(children.wait(ps, 10).ok()) << read_file(dir.path + "/ps1.log");
  // Worker 0's gradient was computed on version 0 and landed on version 1: staleness 1.
  const std::string log = read_file(dir.path + "/ps1.log");
  EXPECT_NE(log.find("all 2 workers done at version 2; async: staleness mean 0.5 max 1 over 2 updates"),
            std::string::npos)
      << log;
}

// The PS has N fixed slots, taken first-come by HELLO, with no credential: a peer that says
// HELLO as worker i before the real worker i does holds the slot. What must hold is that the
// real worker then fails at once with a message naming the problem, rather than training
// against a barrier that a stranger controls.
TEST_F(HostileTest, SquatterTakesAFreeSlotAndTheRealWorkerFailsLoudly) {
  const TempDir dir("hostile-squat");
  const Job j = job(dir.path, 1);
  Children children;
  pid_t ps = -1;
  const std::string address = children.start_ps(j, &ps);

  zmq::context_t context(1);
  RawPeer squatter(context, address);
  squatter.send(message(hello_header(0, 1, 1, kModelFloats, kSteps, 8)));  // a global batch of 1 x 8
  const Header welcome = squatter.receive_header(0, "squatter's WELCOME");
  ASSERT_EQ(welcome.op, Op::kWelcome) << welcome.message;

  const ExitStatus worker = wait_for(spawn(worker_argv(j, 0, address), dir.path + "/w0.log"), 60);
  const std::string w_log = read_file(dir.path + "/w0.log");
  EXPECT_FALSE(worker.timed_out);
  EXPECT_EQ(worker.code, 1) << w_log;
  EXPECT_NE(w_log.find("ps0 rejected HELLO: worker 0 is already registered from another peer"), std::string::npos)
      << w_log;

  Header done = hello_header(0, 2, 1, 0, 0);
  done.op = Op::kDone;
  squatter.send(message(done));  // the squatter holds slot 0, so its DONE ends the job
  const ExitStatus ps_status = children.wait(ps, 10);
  const std::string ps_log = read_file(dir.path + "/ps0.log");
  EXPECT_TRUE(ps_status.ok()) << ps_log;
  EXPECT_EQ(count_of(ps_log, kRejectedLine), 1u) << ps_log;
  EXPECT_NE(ps_log.find(": worker 0 is already registered from another peer"), std::string::npos) << ps_log;
}

// One HELLO decides how much the shard allocates: a model larger than --max-shard-mib (default:
// the shard's share of its host) is refused before anything is allocated, and the PS goes on
// serving. Found by tests/fuzz/ps_fuzz.cc (a HELLO of 2^40 floats made the PS run out of memory).
TEST_F(HostileTest, HelloOfAHugeModelIsRefusedBeforeAllocating) {
  const TempDir dir("hostile-huge");
  Job j = job(dir.path, 1);
  j.args.insert(j.args.end(), {"--max-shard-mib", "1"});
  Children children;
  pid_t ps = -1;
  const std::string address = children.start_ps(j, &ps);

  zmq::context_t context(1);
  RawPeer peer(context, address);
  Hostile hostile(0);
  hostile.expect_rejected(peer, message(hello_header(0, 1, 1, uint64_t{1000000000000}, kSteps)),
                          "model of 1000000000000 parameters needs about 15258790 MiB on this shard, more than "
                          "its limit of 1 MiB (--max-shard-mib)",
                          "HELLO of 10^12 parameters");
  peer.send(message(hello_header(0, 2, 1, kModelFloats, kSteps)));
  const Header welcome = peer.receive_header(0, "WELCOME after the refused HELLO");
  EXPECT_EQ(welcome.op, Op::kWelcome) << welcome.message;
  EXPECT_EQ(welcome.length, kModelFloats);
  Header done = hello_header(0, 3, 1, 0, 0);
  done.op = Op::kDone;
  peer.send(message(done));
  const ExitStatus ps_status = children.wait(ps, 10);
  EXPECT_TRUE(ps_status.ok()) << read_file(dir.path + "/ps0.log");
}

// VmHWM of process `pid` in KiB (its peak resident memory); 0 where /proc has none.
long peak_rss_kib_of(pid_t pid) {
  const std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
  const size_t at = status.find("VmHWM:");
  return at == std::string::npos ? 0 : std::stol(status.substr(at + 6));
}

// A frame past the PS's frame bound (docs/wire_protocol.md, "Frame bound": here the 1 MiB chunk
// and 4 KiB, with --batchnorm-stats local) is never received: ZeroMQ disconnects its sender, the PS's peak
// memory grows by less than the bound, it logs the disconnection naming the bound, and it goes on
// answering a registered worker. Issue 50: a 2.7 GB SPARSE_PULL was received whole before the PS
// refused it. PSTRAIN_HOSTILE_FRAME_MIB sets the frame's size (32 MiB) for a run by hand.
TEST_F(HostileTest, AFrameOverTheBoundDisconnectsItsSenderAndThePsStaysUp) {
  const TempDir dir("hostile-frame");
  Job j = job(dir.path, 1);
  j.args.insert(j.args.end(), {"--batchnorm-stats", "local"});
  Children children;
  pid_t ps = -1;
  const std::string address = children.start_ps(j, &ps);
  const std::string log = dir.path + "/ps0.log";
  constexpr long kBoundBytes = (1 << 20) + 4096;
  ASSERT_TRUE(wait_for_text(log, "ps0: a peer sending a frame over " + std::to_string(kBoundBytes) +
                                     " bytes is disconnected (the chunk of --chunk-kib 1024, and 4096 bytes for "
                                     "CURVE's box)",
                            10))
      << read_file(log);

  zmq::context_t context(1);
  RawPeer peer(context, address);
  peer.send(message(hello_header(0, 1, 1, kModelFloats, kSteps)));
  const Header welcome = peer.receive_header(0, "WELCOME");
  ASSERT_EQ(welcome.op, Op::kWelcome) << welcome.message;
  const long before_kib = peak_rss_kib_of(ps);
  ASSERT_GT(before_kib, 0);

  const char* mib_text = std::getenv("PSTRAIN_HOSTILE_FRAME_MIB");
  const size_t frame_bytes = (mib_text != nullptr ? std::stoul(mib_text) : 32) << 20;
  {
    zmq::socket_t hostile(context, zmq::socket_type::dealer);
    hostile.set(zmq::sockopt::linger, 0);
    hostile.connect("tcp://" + address);
    Header h = push_header(0, 2);
    h.length = frame_bytes / 4;  // a header that agrees with its frame
    const std::string header = encode_header(h);
    ASSERT_TRUE(hostile.send(zmq::message_t(header.data(), header.size()), zmq::send_flags::sndmore));
    // Its bytes are never written: pages of zeros the kernel maps on reading, none of this
    // process's memory, however large the frame.
    ASSERT_TRUE(hostile.send(zmq::message_t(frame_bytes), zmq::send_flags::none));
    EXPECT_TRUE(wait_for_text(log, "ps0: a peer's connection to tcp://", 30)) << read_file(log);
  }
  const long grown_kib = peak_rss_kib_of(ps) - before_kib;
  std::printf("a frame of %zu MiB: the PS's peak RSS grew by %ld KiB (from %ld KiB)\n", frame_bytes >> 20,
              grown_kib, before_kib);
  EXPECT_LT(grown_kib * 1024, kBoundBytes) << "the PS received the frame";

  const std::vector<float> init(kModelFloats, 0.25f);
  Header h = push_header(0, 3);
  h.op = Op::kInit;
  h.samples = h.correct = 0;
  h.loss_sum = 0;
  peer.send(message(h, &init));
  peer.send(message(pull_header(0, 4, 0)));
  const Header params = peer.receive_header(0, "PARAMS after the disconnection");
  EXPECT_EQ(params.op, Op::kParams) << params.message;
  EXPECT_EQ(floats_of(peer.last_payload()), init);
  Header done = hello_header(0, 5, 1, 0, 0);
  done.op = Op::kDone;
  peer.send(message(done));
  const ExitStatus ps_status = children.wait(ps, 10);
  const std::string ps_log = read_file(log);
  EXPECT_TRUE(ps_status.ok()) << ps_log;
  EXPECT_EQ(count_of(ps_log, kRejectedLine), 0u) << "the frame was received: " << ps_log;
  EXPECT_NE(ps_log.find(" bytes, this server's bound, and was disconnected before the frame was received"),
            std::string::npos)
      << ps_log;
}

// A PULL that says "I read your parameter area" (shm 2) where the PS keeps no area (not plain
// sync: here async) is refused, though the peer's segment is mapped; a PULL into that segment is
// answered, and the PS ends normally.
TEST_F(HostileTest, AreaPullToAPsWithoutAnAreaIsRefused) {
  const TempDir dir("hostile-area");
  Job j = job(dir.path, 1);
  j.args.insert(j.args.end(), {"--mode", "async"});
  Children children;
  pid_t ps = -1;
  const std::string address = children.start_ps(j, &ps);

  SharedMemory segment;
  std::string why;
  ASSERT_TRUE(SharedMemory::create("pstrain-hostile", shm_segment_bytes(kModelFloats), &segment, &why)) << why;
  zmq::context_t context(1);
  RawPeer peer(context, address);
  Header hello = hello_header(0, 1, 1, kModelFloats, kSteps, 8, ModeCode::kAsync);
  hello.shm = 1;
  hello.message = segment.name();
  peer.send(message(hello));
  const Header welcome = peer.receive_header(0, "WELCOME");
  ASSERT_EQ(welcome.op, Op::kWelcome) << welcome.message;
  EXPECT_EQ(welcome.shm, 1u);  // the segment is mapped there, and there is no area to offer

  Header pull = pull_header(0, 2, 0);
  pull.shm = 2;
  Hostile hostile(0);
  hostile.expect_rejected(peer, message(pull), "pull from the parameter area, but this PS has none", "area pull");
  const std::vector<float> init(kModelFloats, 0.25f);
  Header h = push_header(0, 3);
  h.op = Op::kInit;
  h.samples = h.correct = 0;
  h.loss_sum = 0;
  peer.send(message(h, &init));
  pull.request_id = 4;
  pull.shm = 1;
  peer.send(message(pull));
  const Header params = peer.receive_header(0, "PARAMS into the segment");  // INIT has no answer
  ASSERT_EQ(params.op, Op::kParams) << params.message;
  EXPECT_EQ(params.shm, 1u);
  const float* values = static_cast<const float*>(segment.data()) + shm_area_floats(kModelFloats);
  EXPECT_EQ(std::vector<float>(values, values + kModelFloats), init);

  Header done = hello_header(0, 5, 1, 0, 0);
  done.op = Op::kDone;
  peer.send(message(done));
  const ExitStatus ps_status = children.wait(ps, 10);
  const std::string ps_log = read_file(dir.path + "/ps0.log");
  EXPECT_TRUE(ps_status.ok()) << ps_log;
  EXPECT_EQ(count_of(ps_log, kRejectedLine), 1u) << ps_log;
}

// The chief reports a shared evaluation only when it covers the whole test set. Here worker 1 is
// a raw peer that trains along (zero gradients) and, with its first push after epoch 1's end,
// claims 49 of its 50 test records (a replacement that lost its share would claim none): the
// chief warns and prints no figures for epoch 1, and still evaluates the job's last step alone.
TEST_F(HostileTest, ASharedEvaluationShortOfTheTestSetIsAWarningNotFigures) {
  const TempDir dir("hostile-eval");
  const Job j = job(dir.path, 2);
  Children children;
  pid_t ps = -1;
  const std::string address = children.start_ps(j, &ps);
  const pid_t w0 = children.add(spawn(worker_argv(j, 0, address), dir.path + "/w0.log"));
  zmq::context_t context(1);
  RawPeer w1(context, address);
  w1.send(message(hello_header(1, 1, 2, kModelFloats, kSteps)));
  const Header welcome = w1.receive_header(0, "WELCOME");
  ASSERT_EQ(welcome.op, Op::kWelcome) << welcome.message;
  ASSERT_EQ(welcome.step, 0u);
  const std::vector<float> zero(kModelFloats, 0.0f);
  constexpr uint64_t kStepsPerEpoch = 18;  // 300 records, 2 x 8 a step
  uint64_t rid = 2;
  w1.send(message(pull_header(1, rid++, 0)));  // as a worker starts: the chief's initial values
  const Header initial = w1.receive_header(0, "PARAMS of version 0");
  ASSERT_EQ(initial.op, Op::kParams) << initial.message;
  for (uint64_t step = 0; step < kSteps; ++step) {
    Header push = push_header(1, rid++);
    push.step = push.based_on = step;
    if (step == kStepsPerEpoch) {
      push.eval_samples = 49;
      push.eval_correct = 10;
      push.eval_loss = 20.0;
    }
    w1.send(message(push, &zero));
    w1.send(message(pull_header(1, rid++, step + 1)));
    const Header params = w1.receive_header(0, "PARAMS of version " + std::to_string(step + 1));
    ASSERT_EQ(params.op, Op::kParams) << params.message;
  }
  Header done = hello_header(1, rid, 2, 0, 0);
  done.op = Op::kDone;
  w1.send(message(done));
  const ExitStatus chief = children.wait(w0, 60);
  const std::string log = read_file(dir.path + "/w0.log");
  EXPECT_TRUE(chief.ok()) << log;
  EXPECT_TRUE(children.wait(ps, 30).ok()) << read_file(dir.path + "/ps0.log");
  EXPECT_NE(log.find("epoch 1: the workers' evaluations came back for 99 of 100 test records"), std::string::npos)
      << log;
  EXPECT_EQ(log.find("epoch 1 done:"), std::string::npos) << log;
  EXPECT_NE(log.find("epoch 2 done:"), std::string::npos) << log;  // the last step's: the chief's own
}

// The same-host local channel (shared/net/local_channel.h) reaches the same checks as ZeroMQ: a peer
// that connects to it and names itself gets an ERROR over it for garbage and for requests before
// HELLO, may register like any peer, and the PS logs each rejection.
TEST_F(HostileTest, LocalChannelTrafficMeetsTheSameChecks) {
  const TempDir dir("hostile-local");
  Job j = job(dir.path, 1);
  j.ipc = true;
  Children children;
  pid_t ps = -1;
  const std::string address = children.start_ps(j, &ps);
  ASSERT_EQ(address.rfind("ipc://@", 0), 0u) << address;

  LocalSocket peer;
  std::string why;
  ASSERT_TRUE(connect_local(address.substr(7) + ".local", &peer, &why)) << why;
  const std::string route = "\x81local-intruder";
  ASSERT_TRUE(send_packet(peer, route.data(), route.size(), &why)) << why;
  const auto exchange = [&](const std::string& header, const std::string& what) {
    // Sequenced as a client's: it sends nothing through ZeroMQ, so 0 before each.
    const std::string packet = sequenced_packet(0, header.data(), header.size());
    EXPECT_TRUE(send_packet(peer, packet.data(), packet.size(), &why)) << what << ": " << why;
    pollfd p{peer.fd(), POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, static_cast<int>(kReplySeconds * 1000)), 1) << what << ": no reply";
    std::string reply;
    EXPECT_EQ(receive_packet(peer, &reply), PacketResult::kPacket) << what;
    Header h;
    EXPECT_TRUE(decode_header(reply.data(), reply.size(), &h, &why)) << what << ": " << why;
    return h;
  };
  int rejected = 0;
  for (const Frames& bad : {Frames{"not msgpack at all"}, message(hello_header(0, 5, 1, 0, 0)),
                            Frames{encode_header(hello_header(0, 6, 1, kModelFloats, kSteps)).substr(0, 20)}}) {
    Header sent;
    const bool decodes = decode_header(bad[0].data(), bad[0].size(), &sent, &why);
    const Header reply = exchange(bad[0], "bad packet " + std::to_string(rejected));
    EXPECT_EQ(reply.op, Op::kError);
    EXPECT_EQ(reply.request_id, decodes ? sent.request_id : 0);
    EXPECT_FALSE(reply.message.empty());
    ++rejected;
  }
  Header push = hello_header(0, 7, 1, 0, 0);
  push.op = Op::kPush;
  push.shm = 1;
  const Header refused = exchange(encode_header(push), "PUSH before HELLO");
  EXPECT_EQ(refused.op, Op::kError);
  EXPECT_EQ(refused.message, "PUSH from a peer that never said HELLO");
  ++rejected;

  const Header welcome = exchange(encode_header(hello_header(0, 8, 1, kModelFloats, kSteps)), "HELLO");
  EXPECT_EQ(welcome.op, Op::kWelcome) << welcome.message;
  Header done = hello_header(0, 9, 1, 0, 0);
  done.op = Op::kDone;
  EXPECT_EQ(exchange(encode_header(done), "DONE").op, Op::kDone);
  const ExitStatus ps_status = children.wait(ps, 10);
  const std::string log = read_file(dir.path + "/ps0.log");
  EXPECT_TRUE(ps_status.ok()) << log;
  EXPECT_EQ(count_of(log, kRejectedLine), static_cast<size_t>(rejected)) << log;
}

}  // namespace
}  // namespace pstrain::test
