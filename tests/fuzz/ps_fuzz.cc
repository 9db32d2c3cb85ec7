// libFuzzer target: a whole parameter server (ps/server.h) fed a sequence of messages from the
// fuzzer through an in-memory Endpoint, as if from several peers. Nothing a peer sends may crash
// the PS, make it read out of bounds or allocate without bound (docs/wire_protocol.md).
//
// Input: messages one after another, each starting with a kind byte:
//   even: a well-formed header built from the next bytes (op, route, sender, step, offset,
//         length, total, samples, num_workers) with a payload of `length` floats taken from the
//         input, so the fuzzer reaches deep states (registered, initialised, mid-barrier);
//   odd:  raw frames: route byte, frame count, then per frame a 2-byte length and its bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>

#include "ps/server.h"
#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/wire/protocol.h"
#include "shared/net/transport.h"

namespace {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool empty() const { return p_ == end_; }
  uint64_t take(size_t bytes) {
    uint64_t v = 0;
    for (size_t i = 0; i < bytes && p_ < end_; ++i) v = (v << 8) | *p_++;
    return v;
  }
  std::string bytes(size_t n) {
    n = std::min<size_t>(n, static_cast<size_t>(end_ - p_));
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

struct Exhausted {};

// Hands the PS the fuzzer's messages; replies are counted and dropped.
class FuzzEndpoint final : public pstrain::Endpoint {
 public:
  std::deque<pstrain::Message> inbox;
  bool send(pstrain::Message&& msg, pstrain::Clock::time_point, std::string*) override {
    if (msg.frames.empty()) std::abort();  // every reply has a header
    return true;
  }
  bool recv(pstrain::Message* msg, pstrain::Clock::time_point) override {
    if (inbox.empty()) throw Exhausted{};
    *msg = std::move(inbox.front());
    inbox.pop_front();
    return true;
  }
  std::string address(int) const override { return "fuzz:0"; }
  void close(pstrain::Clock::time_point) override {}
};

pstrain::Message structured(Input& in) {
  pstrain::Header h;
  h.op = static_cast<pstrain::Op>(1 + in.take(1) % 16);  // every op; bytes 0..7 as before (HELLO..DONE)
  const std::string route(1, static_cast<char>('a' + in.take(1) % 4));
  h.request_id = in.take(1);
  h.sender = static_cast<uint32_t>(in.take(1) % 4);
  h.step = in.take(1) % 8;
  h.offset = in.take(2) % 1024;
  h.length = in.take(2) % 1024;
  h.total = in.take(1) % 2 ? 700 : in.take(4);
  h.num_workers = static_cast<uint32_t>(in.take(1) % 4);
  h.samples = in.take(1);
  pstrain::Message msg;
  msg.route = route;
  const std::string header = pstrain::encode_header(h);
  msg.frames.emplace_back(header.data(), header.size());
  if (pstrain::op_has_payload(h.op)) {
    std::string payload(h.length * sizeof(float), '\0');
    const std::string given = in.bytes(payload.size());
    std::memcpy(payload.data(), given.data(), given.size());
    msg.frames.emplace_back(payload.data(), payload.size());
  }
  return msg;
}

pstrain::Message raw(Input& in) {
  pstrain::Message msg;
  msg.route = std::string(1, static_cast<char>('a' + in.take(1) % 4));
  const size_t frames = in.take(1) % 4;
  for (size_t i = 0; i < frames; ++i) {
    const std::string bytes = in.bytes(in.take(2) % 4096);
    msg.frames.emplace_back(bytes.data(), bytes.size());
  }
  return msg;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("PSTRAIN_LOG_LEVEL", "error", 0);  // every rejection is logged: too slow to fuzz
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pstrain::ServerOptions o;
  o.num_workers = 2;
  o.num_ps = 2;
  o.index = 1;
  o.chunk_kib = 1;  // 256 floats a chunk: several chunks in a small model
  o.optimizer.kind = pstrain::OptimizerKind::kAdam;
  o.stall_report_s = 1e9;
  o.max_shard_mib = 64;
  o.allow_rejoin = size % 2 == 1;  // both ways of handling a second HELLO for a worker
  o.optimizer.clip_norm = size % 4 >= 2 ? 1.0 : 0.0;  // half with --clip-norm: steps wait for a CLIP
  FuzzEndpoint endpoint;
  Input in(data, size);
  while (!in.empty()) endpoint.inbox.push_back(in.take(1) % 2 == 0 ? structured(in) : raw(in));
  pstrain::ParameterServer server(o, endpoint);
  try {
    server.serve();
  } catch (const Exhausted&) {
  } catch (const pstrain::Error&) {
    // A fatal, reported failure is allowed; a crash or a sanitizer report is not.
  }
  return 0;
}
