// The PS wire protocol (shared/wire/protocol.h, docs/wire_protocol.md): every field round-trips for
// every op, and malformed frames fail with the exact error the PS puts in its ERROR reply
// (leveldb's log_test.cc habit: truncate, flip and extend the bytes, then assert the message).
#include "shared/wire/protocol.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <msgpack.hpp>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace pstrain {
namespace {

constexpr uint64_t kSliceLimit = uint64_t{1} << 40;
constexpr const char* kTruncated = "header is not valid MessagePack (insufficient bytes)";

const std::vector<Op>& all_ops() {
  static const std::vector<Op> ops = {Op::kHello, Op::kWelcome, Op::kInit,  Op::kPush,  Op::kPull,
                                      Op::kParams, Op::kDone,    Op::kError, Op::kWaiting,
                                      Op::kSparsePull, Op::kSparseRows, Op::kSparsePush, Op::kNorm, Op::kClip,
                                      Op::kStats, Op::kStatsSum};
  return ops;
}

std::string describe(const Header& h) {
  std::ostringstream os;
  os << op_name(h.op) << " rid=" << h.request_id << " role=" << static_cast<uint32_t>(h.role)
     << " from=" << h.sender << " step=" << h.step << " off=" << h.offset << " len=" << h.length
     << " total=" << h.total << " nw=" << h.num_workers << " n=" << h.samples
     << " loss=" << h.loss_sum << " correct=" << h.correct << " msg='" << h.message << "'";
  return os.str();
}

// Field-by-field equality; the loss compares bit patterns so -0.0 and 0.0 count as different.
bool same(const Header& a, const Header& b) {
  return a.op == b.op && a.request_id == b.request_id && a.role == b.role && a.sender == b.sender &&
         a.step == b.step && a.offset == b.offset && a.length == b.length && a.total == b.total &&
         a.num_workers == b.num_workers && a.samples == b.samples &&
         std::memcmp(&a.loss_sum, &b.loss_sum, sizeof(double)) == 0 && a.correct == b.correct &&
         a.chunk == b.chunk && a.times.data_us == b.times.data_us && a.times.compute_us == b.times.compute_us &&
         a.times.push_us == b.times.push_us && a.times.wait_us == b.times.wait_us &&
         a.times.pull_us == b.times.pull_us && a.times.eval_us == b.times.eval_us && a.slowest == b.slowest && a.slowest_us == b.slowest_us &&
         a.message == b.message && a.checkpoint == b.checkpoint && a.stop == b.stop &&
         a.times.ckpt_us == b.times.ckpt_us && a.write_us == b.write_us && a.mode == b.mode &&
         a.based_on == b.based_on && a.stale_sum == b.stale_sum && a.stale_count == b.stale_count &&
         a.stale_max == b.stale_max && a.lead_max == b.lead_max && a.dropped == b.dropped &&
         a.shm == b.shm && a.eval_samples == b.eval_samples && a.eval_correct == b.eval_correct &&
         std::memcmp(&a.eval_loss, &b.eval_loss, sizeof(double)) == 0 && a.apply_us == b.apply_us &&
         a.bytes_in == b.bytes_in && a.bytes_out == b.bytes_out && a.part == b.part && a.parts == b.parts &&
         a.durable == b.durable;
}

// Every field set, with values that take each MessagePack integer width.
Header full_header(Op op) {
  Header h;
  h.op = op;
  h.request_id = (uint64_t{1} << 40) + 3;  // uint64
  h.role = op == Op::kWelcome || op == Op::kParams ? SenderRole::kPs : SenderRole::kWorker;
  h.sender = 70000;                        // uint32
  h.step = 300;                            // uint16
  h.offset = 200;                          // uint8
  h.length = 7;                            // fixint
  h.total = kSliceLimit;
  h.num_workers = 12;
  h.samples = 4096;
  h.loss_sum = -1234.5625;
  h.correct = 4000;
  h.chunk = 262144;
  h.times = StepTimes{1, 2000, 30, 400000, 5, 61000};
  h.slowest = 3;
  h.slowest_us = (uint64_t{1} << 33) + 1;
  h.message = "why \xe2\x9c\x97 it failed";
  h.checkpoint = 301;
  h.stop = 1;
  h.times.ckpt_us = 7777;
  h.write_us = 65536;
  h.mode = 2;
  h.based_on = 299;
  h.stale_sum = (uint64_t{1} << 35) + 9;
  h.stale_count = 70001;
  h.stale_max = 17;
  h.lead_max = 4;
  h.dropped = 250;
  h.shm = 1;
  h.eval_samples = 5000;
  h.eval_correct = 4321;
  h.eval_loss = 2345.0625;
  h.apply_us = (uint64_t{1} << 36) + 5;
  h.bytes_in = (uint64_t{1} << 45) + 11;
  h.bytes_out = (uint64_t{1} << 50) + 13;
  h.part = 6;
  h.parts = 17;
  h.durable = 300;
  return h;
}

Header decoded(const std::string& bytes) {
  Header h;
  std::string error;
  EXPECT_TRUE(decode_header(bytes.data(), bytes.size(), &h, &error)) << error;
  return h;
}

std::string decode_error(const std::string& bytes) {
  Header h;
  std::string error;
  if (decode_header(bytes.data(), bytes.size(), &h, &error)) return "(decoded: " + describe(h) + ")";
  return error;
}

// MessagePack bytes of one value.
template <typename Pack>
std::string packed(Pack pack) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pack(pk);
  return std::string(buffer.data(), buffer.size());
}
std::string packed_uint(uint64_t v) { return packed([v](auto& pk) { pk.pack_uint64(v); }); }
std::string packed_str(const std::string& s) { return packed([&s](auto& pk) { pk.pack(s); }); }
// A float64 written as such: msgpack-cxx's pack_double writes integral values as integers.
std::string packed_float64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  std::string out = "\xcb";
  for (int shift = 56; shift >= 0; shift -= 8) out += static_cast<char>(bits >> shift);
  return out;
}

// A header map written entry by entry, so a test can drop, repeat, retype or add entries.
// Starts as a valid PUSH with the same keys and values encode_header writes.
class MapBuilder {
 public:
  MapBuilder() {
    set_uint("magic", kMagic).set_uint("ver", kProtocolVersion).set_uint("op", 4);
    set_uint("rid", 9).set_uint("role", 0).set_uint("from", 1).set_uint("step", 2);
    set_uint("off", 0).set_uint("len", 3).set_uint("total", 3).set_uint("nw", 2).set_uint("n", 8);
    set_uint("correct", 5).set_uint("dtype", 0).set_uint("chunk", 0).set_uint("t_data", 0);
    set_uint("t_comp", 0).set_uint("t_push", 0).set_uint("t_wait", 0).set_uint("t_pull", 0);
    set_uint("t_eval", 0);
    set_uint("slow", 0).set_uint("slow_us", 0).set_uint("ckpt", 0).set_uint("stop", 0);
    set_uint("t_ckpt", 0).set_uint("ckpt_us", 0);
    set_uint("mode", 0).set_uint("based", 0).set_uint("stale", 0).set_uint("stale_n", 0);
    set_uint("stale_max", 0).set_uint("lead", 0).set_uint("dropped", 0).set_uint("shm", 0);
    set_uint("e_n", 0).set_uint("e_correct", 0).set_uint("t_apply", 0).set_uint("b_in", 0).set_uint("b_out", 0);
    set_uint("part", 0).set_uint("parts", 0);
    set_raw("loss", packed([](auto& pk) { pk.pack_double(2.5); }));
    set_raw("e_loss", packed([](auto& pk) { pk.pack_double(0.0); })).set_raw("msg", packed_str(""));
  }
  // Replaces the value of `key` (appends it if absent).
  MapBuilder& set_raw(const std::string& key, const std::string& value) {
    for (auto& entry : entries_) {
      if (entry.first == packed_str(key)) {
        entry.second = value;
        return *this;
      }
    }
    entries_.emplace_back(packed_str(key), value);
    return *this;
  }
  MapBuilder& set_uint(const std::string& key, uint64_t v) { return set_raw(key, packed_uint(v)); }
  MapBuilder& add_raw_key(const std::string& key_bytes, const std::string& value) {
    entries_.emplace_back(key_bytes, value);
    return *this;
  }
  MapBuilder& remove(const std::string& key) {
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].first == packed_str(key)) entries_.erase(entries_.begin() + static_cast<long>(i));
    }
    return *this;
  }
  std::string bytes() const {
    std::string out = packed([n = entries_.size()](auto& pk) { pk.pack_map(static_cast<uint32_t>(n)); });
    for (const auto& [key, value] : entries_) out += key + value;
    return out;
  }

 private:
  std::vector<std::pair<std::string, std::string>> entries_;  // packed key, packed value
};

TEST(ProtocolTest, OpNamesAndPayloadOps) {
  const std::vector<std::string> names = {"HELLO", "WELCOME", "INIT", "PUSH", "PULL", "PARAMS", "DONE", "ERROR",
                                          "WAITING", "SPARSE_PULL", "SPARSE_ROWS", "SPARSE_PUSH", "NORM", "CLIP",
                                          "STATS", "STATS_SUM"};
  for (size_t i = 0; i < all_ops().size(); ++i) EXPECT_EQ(op_name(all_ops()[i]), names[i]);
  for (Op op : all_ops()) {
    const bool sparse = op == Op::kSparsePull || op == Op::kSparseRows || op == Op::kSparsePush;
    const bool clipping = op == Op::kNorm || op == Op::kClip;
    const bool stats = op == Op::kStats || op == Op::kStatsSum;  // doubles as 4-byte words
    EXPECT_EQ(op_has_payload(op), op == Op::kInit || op == Op::kPush || op == Op::kParams || sparse || clipping || stats) << op_name(op);
  }
}

TEST(ProtocolTest, EveryFieldRoundTripsForEveryOp) {
  for (Op op : all_ops()) {
    Header zero;
    zero.op = op;
    Header widest = full_header(op);
    widest.request_id = widest.step = widest.samples = widest.correct = UINT64_MAX;
    widest.sender = widest.num_workers = UINT32_MAX;
    widest.offset = widest.length = widest.total = kSliceLimit;
    widest.loss_sum = widest.eval_loss = std::numeric_limits<double>::max();
    widest.eval_samples = widest.eval_correct = UINT64_MAX;
    widest.apply_us = widest.bytes_in = widest.bytes_out = UINT64_MAX;
    widest.part = widest.parts = UINT64_MAX;
    for (const Header& h : {zero, full_header(op), widest}) {
      const std::string bytes = encode_header(h);
      EXPECT_LE(bytes.size(), kMaxHeaderBytes);
      const Header back = decoded(bytes);
      EXPECT_TRUE(same(h, back)) << describe(h) << "\nbecame\n" << describe(back);
    }
  }
}

TEST(ProtocolTest, LossValuesRoundTripExactly) {
  for (double loss : {0.0, 1.0, -3.0, 0.1, 1e300, -1e-300, std::numeric_limits<double>::denorm_min(),
                      std::numeric_limits<double>::lowest()}) {
    Header h = full_header(Op::kPush);
    h.loss_sum = loss;
    EXPECT_TRUE(same(h, decoded(encode_header(h)))) << loss;
  }
  // -0.0 is written as the integer 0, so it comes back as +0.0 (equal, not bit-identical).
  Header h = full_header(Op::kPush);
  h.loss_sum = -0.0;
  EXPECT_EQ(decoded(encode_header(h)).loss_sum, 0.0);
}

// A peer may write the loss as any MessagePack number.
TEST(ProtocolTest, LossWrittenAsIntegerOrFloat32IsAccepted) {
  const std::vector<std::pair<std::string, double>> cases = {
      {packed([](auto& pk) { pk.pack_uint64(7); }), 7.0},
      {packed([](auto& pk) { pk.pack_int64(-3); }), -3.0},
      {packed([](auto& pk) { pk.pack_int64(-100000); }), -100000.0},
      {packed([](auto& pk) { pk.pack_float(1.5f); }), 1.5},
      {packed_float64(4.0), 4.0},
  };
  for (const auto& [value, want] : cases) {
    EXPECT_EQ(decoded(MapBuilder().set_raw("loss", value).bytes()).loss_sum, want);
  }
}

TEST(ProtocolTest, MessageIsCutAtTheLimit) {
  Header h = full_header(Op::kError);
  h.message = std::string(3 * kMaxMessageChars, 'x');
  const std::string bytes = encode_header(h);
  EXPECT_LE(bytes.size(), kMaxHeaderBytes);
  EXPECT_EQ(decoded(bytes).message, std::string(kMaxMessageChars, 'x'));
  // A peer that writes a longer message itself is rejected (see HugeDeclaredSizesFail).
  EXPECT_EQ(decoded(MapBuilder().set_raw("msg", packed_str(std::string(kMaxMessageChars, 'y'))).bytes()).message,
            std::string(kMaxMessageChars, 'y'));
}

TEST(ProtocolTest, OptionalFieldsDefaultToZero) {
  MapBuilder b;
  for (const char* key : {"step", "off", "len", "total", "nw", "n", "correct", "dtype", "chunk", "t_data", "t_comp", "t_push", "t_wait", "t_pull", "t_eval", "slow", "slow_us", "ckpt", "stop", "t_ckpt", "ckpt_us", "mode", "based", "stale", "stale_n", "stale_max", "lead", "dropped", "shm", "e_n", "e_correct", "t_apply", "b_in", "b_out", "part", "parts", "durable", "loss", "e_loss", "msg"}) b.remove(key);
  Header dirty = full_header(Op::kHello);
  std::string error;
  const std::string bytes = b.bytes();
  ASSERT_TRUE(decode_header(bytes.data(), bytes.size(), &dirty, &error)) << error;
  Header want;
  want.op = Op::kPush;
  want.request_id = 9;
  want.sender = 1;
  EXPECT_TRUE(same(want, dirty)) << describe(dirty);
}

TEST(ProtocolCorruptionTest, EmptyFrame) {
  Header h;
  std::string error;
  EXPECT_FALSE(decode_header(nullptr, 0, &h, &error));
  EXPECT_EQ(error, "empty header frame");
  EXPECT_EQ(decode_error(std::string()), "empty header frame");
}

TEST(ProtocolCorruptionTest, EveryTruncationFails) {
  for (Op op : all_ops()) {
    const std::string bytes = encode_header(full_header(op));
    EXPECT_EQ(decode_error(bytes.substr(0, 0)), "empty header frame");
    for (size_t n = 1; n < bytes.size(); ++n) {
      EXPECT_EQ(decode_error(bytes.substr(0, n)), kTruncated) << op_name(op) << " cut to " << n << " bytes";
    }
  }
}

// A single flipped bit must never crash and never go unnoticed: the header either fails to
// decode or decodes to different values (which the receiver then validates like any other).
TEST(ProtocolCorruptionTest, EveryBitFlipFailsOrChangesTheHeader) {
  for (Op op : all_ops()) {
    const Header original = full_header(op);
    const std::string bytes = encode_header(original);
    int failed = 0, changed = 0;
    for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
      std::string flipped = bytes;
      flipped[bit / 8] = static_cast<char>(flipped[bit / 8] ^ (1 << (bit % 8)));
      Header h;
      std::string error;
      if (decode_header(flipped.data(), flipped.size(), &h, &error)) {
        EXPECT_FALSE(same(original, h)) << op_name(op) << ": flipping bit " << bit << " went unnoticed";
        ++changed;
      } else {
        EXPECT_FALSE(error.empty()) << "bit " << bit;
        ++failed;
      }
    }
    EXPECT_GT(failed, 0);
    EXPECT_GT(changed, 0);
  }
}

TEST(ProtocolCorruptionTest, TrailingBytes) {
  const std::string bytes = encode_header(full_header(Op::kPull));
  EXPECT_EQ(decode_error(bytes + '\0'), "trailing bytes after the header map");
  EXPECT_EQ(decode_error(bytes + '\x01'), "trailing bytes after the header map");
  EXPECT_EQ(decode_error(bytes + bytes), "trailing bytes after the header map");
}

TEST(ProtocolCorruptionTest, WrongMagic) {
  EXPECT_EQ(decode_error(MapBuilder().set_uint("magic", kMagic ^ 1).bytes()), "bad magic (not a pstrain message)");
  EXPECT_EQ(decode_error(MapBuilder().set_uint("magic", 0).bytes()), "bad magic (not a pstrain message)");
}

TEST(ProtocolCorruptionTest, WrongVersion) {
  const std::string expected = " is not supported (expected " + std::to_string(kProtocolVersion) + ")";
  EXPECT_EQ(decode_error(MapBuilder().set_uint("ver", kProtocolVersion + 1).bytes()),
            "protocol version " + std::to_string(kProtocolVersion + 1) + expected);
  EXPECT_EQ(decode_error(MapBuilder().set_uint("ver", 1).bytes()), "protocol version 1" + expected);
  EXPECT_EQ(decode_error(MapBuilder().set_uint("ver", 0).bytes()), "protocol version 0" + expected);
  EXPECT_EQ(decode_error(MapBuilder().set_uint("ver", UINT64_MAX).bytes()),
            "protocol version 18446744073709551615" + expected);
}

TEST(ProtocolCorruptionTest, UnknownOpAndRole) {
  EXPECT_EQ(decode_error(MapBuilder().set_uint("op", 0).bytes()), "unknown op 0");
  EXPECT_EQ(decode_error(MapBuilder().set_uint("op", 17).bytes()), "unknown op 17");
  EXPECT_EQ(decode_error(MapBuilder().set_uint("op", uint64_t{1} << 32 | 4).bytes()), "unknown op 4294967300");
  EXPECT_EQ(decode_error(MapBuilder().set_uint("role", 2).bytes()), "unknown role 2");
}

TEST(ProtocolCorruptionTest, UnknownKey) {
  EXPECT_EQ(decode_error(MapBuilder().set_uint("bogus", 1).bytes()), "unknown header field 'bogus'");
  EXPECT_EQ(decode_error(MapBuilder().set_uint("", 1).bytes()), "unknown header field ''");
  EXPECT_EQ(decode_error(MapBuilder().set_uint("Op", 4).bytes()), "unknown header field 'Op'");
}

TEST(ProtocolCorruptionTest, DuplicateKey) {
  for (const char* key : {"magic", "ver", "op", "rid", "role", "from", "step", "off", "len", "total", "nw", "n",
                          "correct", "dtype", "chunk", "t_data", "t_comp", "t_push", "t_wait", "t_pull", "t_eval", "slow",
                          "slow_us", "shm", "e_n", "e_correct", "t_apply", "b_in", "b_out", "part", "parts", "loss", "e_loss", "msg"}) {
    const std::string bytes = MapBuilder().add_raw_key(packed_str(key), packed_uint(0)).bytes();
    EXPECT_EQ(decode_error(bytes), std::string("duplicate header field '") + key + "'");
  }
}

TEST(ProtocolCorruptionTest, WrongFieldType) {
  const std::vector<std::string> not_uint = {
      packed_str("4"),
      packed([](auto& pk) { pk.pack_int64(-1); }),
      packed_float64(4.0),
      std::string("\xca\x40\x80\x00\x00", 5),  // float32 4.0
      packed([](auto& pk) { pk.pack_nil(); }),
      packed([](auto& pk) { pk.pack_true(); }),
      packed([](auto& pk) { pk.pack_map(0); }),
      packed([](auto& pk) { pk.pack_array(0); }),
  };
  for (const char* key : {"magic", "ver", "op", "rid", "role", "from", "step", "off", "len", "total", "nw", "n",
                          "correct", "dtype", "chunk", "t_data", "t_comp", "t_push", "t_wait", "t_pull", "t_eval", "slow",
                          "slow_us", "shm", "e_n", "e_correct", "t_apply", "b_in", "b_out", "part", "parts"}) {
    for (const std::string& value : not_uint) {
      EXPECT_EQ(decode_error(MapBuilder().set_raw(key, value).bytes()),
                std::string("header field '") + key + "' is not an unsigned integer");
    }
  }
  for (const std::string& value : {packed_str("2.5"), packed([](auto& pk) { pk.pack_nil(); }),
                                   packed([](auto& pk) { pk.pack_false(); })}) {
    EXPECT_EQ(decode_error(MapBuilder().set_raw("loss", value).bytes()), "header field 'loss' is not a number");
    EXPECT_EQ(decode_error(MapBuilder().set_raw("e_loss", value).bytes()), "header field 'e_loss' is not a number");
  }
  for (const std::string& value : {packed_uint(1), packed([](auto& pk) { pk.pack_nil(); })}) {
    EXPECT_EQ(decode_error(MapBuilder().set_raw("msg", value).bytes()), "header field 'msg' is not a string");
  }
  EXPECT_EQ(decode_error(MapBuilder().add_raw_key(packed_uint(1), packed_uint(1)).bytes()),
            "header key is not a string");
  EXPECT_EQ(decode_error(packed_uint(5)), "header is not a MessagePack map");
  EXPECT_EQ(decode_error(packed_str("magic")), "header is not a MessagePack map");
  EXPECT_EQ(decode_error(packed([](auto& pk) { pk.pack_array(0); })), "header is not a MessagePack map");
  EXPECT_EQ(decode_error("\xc1"), "header is not valid MessagePack (parse error)");
}

TEST(ProtocolCorruptionTest, MissingRequiredField) {
  for (const char* key : {"magic", "ver", "op", "rid", "role", "from"}) {
    EXPECT_EQ(decode_error(MapBuilder().remove(key).bytes()), std::string("header field '") + key + "' is missing");
  }
}

TEST(ProtocolCorruptionTest, FieldOutOfRange) {
  EXPECT_EQ(decode_error(MapBuilder().set_uint("from", uint64_t{1} << 32).bytes()), "sender index out of range");
  EXPECT_EQ(decode_error(MapBuilder().set_uint("nw", uint64_t{1} << 32).bytes()), "nw out of range");
  EXPECT_EQ(decode_error(MapBuilder().set_uint("dtype", 1).bytes()), "dtype 1 is not float32");
  EXPECT_EQ(decode_error(MapBuilder().set_uint("mode", 3).bytes()), "unknown mode 3");
  EXPECT_EQ(decoded(MapBuilder().set_uint("mode", 2).bytes()).mode, 2u);
  // shm 2 is WELCOME's "the values live in the PS's parameter area" and PULL's "I read them
  // there"; anywhere else it is out of range.
  EXPECT_EQ(decode_error(MapBuilder().set_uint("shm", 2).bytes()), "shm is not 0 or 1 (or 2 in WELCOME and PULL)");
  EXPECT_EQ(decoded(MapBuilder().set_uint("shm", 1).bytes()).shm, 1u);
  EXPECT_EQ(decoded(MapBuilder().set_uint("op", 2).set_uint("shm", 2).bytes()).shm, 2u);
  EXPECT_EQ(decoded(MapBuilder().set_uint("op", 5).set_uint("shm", 2).bytes()).shm, 2u);
  EXPECT_EQ(decode_error(MapBuilder().set_uint("op", 6).set_uint("shm", 2).bytes()),
            "shm is not 0 or 1 (or 2 in WELCOME and PULL)");
  EXPECT_EQ(decode_error(MapBuilder().set_uint("op", 2).set_uint("shm", 3).bytes()), "shm is not 0 or 1 (or 2 in WELCOME and PULL)");
  for (const char* key : {"off", "len", "total"}) {
    EXPECT_EQ(decode_error(MapBuilder().set_uint(key, kSliceLimit + 1).bytes()), "slice fields out of range") << key;
    EXPECT_EQ(decoded(MapBuilder().set_uint(key, kSliceLimit).bytes()).op, Op::kPush) << key;
  }
}

TEST(ProtocolCorruptionTest, OversizedHeader) {
  EXPECT_EQ(decode_error(std::string(kMaxHeaderBytes + 1, '\x80')), "header frame of 1025 bytes exceeds 1024");
  EXPECT_EQ(decode_error(std::string(1 << 20, '\0')), "header frame of 1048576 bytes exceeds 1024");
  // A frame of exactly the limit is parsed (and fails for what it contains, not its size).
  std::string at_limit = MapBuilder().bytes();
  at_limit.resize(kMaxHeaderBytes, '\0');
  EXPECT_EQ(decode_error(at_limit), "trailing bytes after the header map");
}

// (input, exact error): a few bytes that declare containers or strings far larger than the
// frame. The decoder's limits must reject them before anything of that size is allocated.
std::vector<std::pair<std::string, std::string>> huge_declarations() {
  const std::string head = "header is not valid MessagePack (";
  const std::string op_key = packed_str("op");
  return {
      {std::string("\xdd\xff\xff\xff\xff", 5), head + "array size overflow)"},
      {std::string("\xdf\xff\xff\xff\xff", 5), head + "map size overflow)"},
      {std::string("\xde\xff\xff", 3), head + "map size overflow)"},
      {std::string("\xde\x00\x5d", 3), head + "map size overflow)"},  // 93 > 2 * 46 entries
      {std::string("\xde\x00\x27", 3), kTruncated},                   // 39 entries are allowed
      {std::string("\xdb\xff\xff\xff\xff", 5), kTruncated},           // str32 of 4 GiB, 0 bytes present
      {std::string("\xc6\xff\xff\xff\xff", 5), kTruncated},           // bin32
      {std::string("\xc9\xff\xff\xff\xff\x01", 6), kTruncated},       // ext32
      {"\x81" + op_key + std::string("\xdd\xff\xff\xff\xff", 5), head + "array size overflow)"},
      {"\x81" + op_key + std::string("\xdf\xff\xff\xff\xff", 5), head + "map size overflow)"},
      {"\x81" + op_key + std::string("\x91\x01", 2), head + "array size overflow)"},
      {"\x81" + op_key + std::string("\xc4\x01x", 3), head + "bin size overflow)"},
      {"\x81" + op_key + std::string("\xd4\x01x", 3), head + "ext size overflow)"},
      {"\x81" + op_key + "\x81" + packed_str("a") + "\x81" + packed_str("b") + packed_uint(1),
       head + "depth size overflow)"},
      {MapBuilder().set_raw("msg", packed_str(std::string(kMaxMessageChars + 1, 'm'))).bytes(),
       head + "str size overflow)"},
  };
}

TEST(ProtocolCorruptionTest, HugeDeclaredSizesFail) {
  for (const auto& [input, want] : huge_declarations()) {
    EXPECT_EQ(decode_error(input), want) << "input of " << input.size() << " bytes";
  }
}

size_t virtual_memory_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  statm >> pages;
  return pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Exits 0 if every huge declaration fails with its error while the address space may grow by
// 256 MiB at most; a decoder that sized an allocation by the declared count would not.
[[noreturn]] void decode_huge_declarations_with_capped_memory() {
  const rlimit cap{virtual_memory_bytes() + (size_t{256} << 20), RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &cap) != 0) _exit(2);
  for (const auto& [input, want] : huge_declarations()) {
    if (decode_error(input) != want) _exit(1);
  }
  _exit(0);
}

TEST(ProtocolCorruptionTest, HugeDeclaredSizesFailWithoutAllocating) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "an address-space limit does not work under AddressSanitizer";
#endif
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the test binary may hold ZeroMQ threads
  EXPECT_EXIT(decode_huge_declarations_with_capped_memory(), ::testing::ExitedWithCode(0), "");
  GTEST_FLAG_SET(death_test_style, style);
}

TEST(ProtocolCorruptionTest, WrongFrameCount) {
  for (Op op : all_ops()) {
    Header h;
    h.op = op;
    const size_t want = op_has_payload(op) ? 2 : 1;
    std::string error;
    EXPECT_TRUE(check_frames(h, want, 0, &error)) << op_name(op) << ": " << error;
    for (size_t frames : {size_t{0}, 3 - want, size_t{3}}) {
      EXPECT_FALSE(check_frames(h, frames, 0, &error));
      EXPECT_EQ(error, std::string(op_name(op)) + " needs " + std::to_string(want) + " frame(s), got " +
                           std::to_string(frames));
    }
  }
}

TEST(ProtocolCorruptionTest, PayloadSizeMismatch) {
  for (Op op : {Op::kInit, Op::kPush, Op::kParams, Op::kSparsePull, Op::kSparseRows, Op::kSparsePush}) {
    Header h;
    h.op = op;
    h.length = 5;
    std::string error;
    EXPECT_TRUE(check_frames(h, 2, 20, &error)) << error;
    for (size_t bytes : {0, 4, 19, 21, 24, 1 << 20}) {
      EXPECT_FALSE(check_frames(h, 2, bytes, &error));
      EXPECT_EQ(error, std::string(op_name(op)) + " payload is " + std::to_string(bytes) +
                           " bytes, header says 5 float32 (20 bytes)");
    }
    h.length = 0;
    EXPECT_TRUE(check_frames(h, 2, 0, &error)) << error;
  }
}

TEST(ProtocolCorruptionTest, NonFiniteLoss) {
  for (double loss : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    Header h = full_header(Op::kPush);
    h.loss_sum = loss;
    EXPECT_EQ(decode_error(encode_header(h)), "header field 'loss' is not finite") << loss;
  }
  const std::string nan32 = packed([](auto& pk) { pk.pack_float(std::numeric_limits<float>::quiet_NaN()); });
  EXPECT_EQ(decode_error(MapBuilder().set_raw("loss", nan32).bytes()), "header field 'loss' is not finite");
  // The test set's summed loss of a worker's evaluation, the same checks.
  Header h = full_header(Op::kPush);
  h.eval_loss = std::numeric_limits<double>::infinity();
  EXPECT_EQ(decode_error(encode_header(h)), "header field 'e_loss' is not finite");
  EXPECT_EQ(decode_error(MapBuilder().set_raw("e_loss", nan32).bytes()), "header field 'e_loss' is not finite");
  EXPECT_EQ(decode_error(MapBuilder().set_raw("e_loss", packed_str("1")).bytes()), "header field 'e_loss' is not a number");
  EXPECT_EQ(decoded(MapBuilder().set_raw("e_loss", packed([](auto& pk) { pk.pack_int64(-3); })).bytes()).eval_loss, -3.0);
}

// Arbitrary bytes, and valid headers with several bytes overwritten, never crash the decoder.
TEST(ProtocolCorruptionTest, RandomInputNeverCrashes) {
  std::mt19937_64 rng(20240607);
  const std::string valid = encode_header(full_header(Op::kPush));
  int decoded_ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string input;
    if (i % 2 == 0) {
      input.resize(rng() % 64);
      for (char& c : input) c = static_cast<char>(rng());
      if (i % 4 == 0 && !input.empty()) input[0] = static_cast<char>(0x80 | (rng() % 16));  // a fixmap
    } else {
      input = valid;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) input[rng() % input.size()] = static_cast<char>(rng());
    }
    Header h;
    std::string error;
    if (decode_header(input.data(), input.size(), &h, &error)) {
      ++decoded_ok;
    } else {
      EXPECT_FALSE(error.empty());
    }
  }
  EXPECT_LT(decoded_ok, 20000);
}

}  // namespace
}  // namespace pstrain
