#include "shared/wire/protocol.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <msgpack.hpp>
#include <string_view>

#include "shared/util/error.h"
#include "shared/util/modes.h"

namespace pstrain {
namespace {

// Keys of the header map. Short, stable, never reused for another meaning.
constexpr const char* kKeyMagic = "magic";
constexpr const char* kKeyVersion = "ver";
constexpr const char* kKeyOp = "op";
constexpr const char* kKeyRequest = "rid";
constexpr const char* kKeyRole = "role";
constexpr const char* kKeySender = "from";
constexpr const char* kKeyStep = "step";
constexpr const char* kKeyOffset = "off";
constexpr const char* kKeyLength = "len";
constexpr const char* kKeyTotal = "total";
constexpr const char* kKeyWorkers = "nw";
constexpr const char* kKeySamples = "n";
constexpr const char* kKeyLoss = "loss";
constexpr const char* kKeyCorrect = "correct";
constexpr const char* kKeyDtype = "dtype";
constexpr const char* kKeyMessage = "msg";
constexpr const char* kKeyChunk = "chunk";
constexpr const char* kKeyData = "t_data";
constexpr const char* kKeyCompute = "t_comp";
constexpr const char* kKeyPush = "t_push";
constexpr const char* kKeyWait = "t_wait";
constexpr const char* kKeyPull = "t_pull";
constexpr const char* kKeyEval = "t_eval";
constexpr const char* kKeySlowest = "slow";
constexpr const char* kKeySlowestTime = "slow_us";
constexpr const char* kKeyCheckpoint = "ckpt";
constexpr const char* kKeyStop = "stop";
constexpr const char* kKeyCheckpointTime = "t_ckpt";
constexpr const char* kKeyWriteTime = "ckpt_us";
constexpr const char* kKeyMode = "mode";
constexpr const char* kKeyBasedOn = "based";
constexpr const char* kKeyStaleSum = "stale";
constexpr const char* kKeyStaleCount = "stale_n";
constexpr const char* kKeyStaleMax = "stale_max";
constexpr const char* kKeyLead = "lead";
constexpr const char* kKeyDropped = "dropped";
constexpr const char* kKeyShm = "shm";
constexpr const char* kKeyEvalSamples = "e_n";
constexpr const char* kKeyEvalCorrect = "e_correct";
constexpr const char* kKeyEvalLoss = "e_loss";
constexpr const char* kKeyApplyTime = "t_apply";
constexpr const char* kKeyBytesIn = "b_in";
constexpr const char* kKeyBytesOut = "b_out";
constexpr const char* kKeyPart = "part";
constexpr const char* kKeyParts = "parts";
constexpr const char* kKeyDurable = "durable";
constexpr uint64_t kDtypeFloat32 = 0;
constexpr size_t kNumKeys = 46;  // every key encode_header writes

// A peer's bytes as they may appear in a log line: printable ASCII, the rest as \xNN, cut short.
std::string sanitize(const std::string& raw) {
  constexpr size_t kMaxShown = 64;
  std::string out;
  for (size_t i = 0; i < raw.size() && i < kMaxShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(raw[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (raw.size() > kMaxShown) out += "...";
  return out;
}

bool get_uint(const msgpack::object& v, uint64_t* out) {
  if (v.type != msgpack::type::POSITIVE_INTEGER) return false;
  *out = v.via.u64;
  return true;
}

// Every key a header may hold, in one table: a key's index is its bit in Decoder::seen.
constexpr std::string_view kAllKeys[] = {
    kKeyMagic,   kKeyVersion,     kKeyOp,         kKeyRequest,  kKeyRole,      kKeySender,     kKeyStep,
    kKeyOffset,  kKeyLength,      kKeyTotal,      kKeyWorkers,  kKeySamples,   kKeyCorrect,    kKeyDtype,
    kKeyChunk,   kKeyData,        kKeyCompute,    kKeyPush,     kKeyWait,      kKeyPull,       kKeyEval,
    kKeySlowest, kKeySlowestTime, kKeyCheckpoint, kKeyStop,     kKeyCheckpointTime, kKeyWriteTime, kKeyMode,
    kKeyBasedOn, kKeyStaleSum,    kKeyStaleCount, kKeyStaleMax, kKeyLead,      kKeyDropped,    kKeyShm,
    kKeyEvalSamples, kKeyEvalCorrect, kKeyApplyTime, kKeyBytesIn, kKeyBytesOut, kKeyPart, kKeyParts, kKeyDurable, kKeyLoss, kKeyEvalLoss,
    kKeyMessage};
constexpr int kNumAllKeys = static_cast<int>(sizeof kAllKeys / sizeof kAllKeys[0]);
static_assert(kNumAllKeys == static_cast<int>(kNumKeys) && kNumAllKeys <= 64, "every key, one bit each");
constexpr int kLossIndex = kNumAllKeys - 3;  // the two numbers, then kKeyMessage, the last

// The index of `key` in kAllKeys, or -1; `expected` is tried first (encode_header writes the keys
// in the table's order). Every message's header is decoded: no allocation, few comparisons.
int key_index(std::string_view key, int expected) {
  if (expected < kNumAllKeys && key == kAllKeys[expected]) return expected;
  for (int i = 0; i < kNumAllKeys; ++i) {
    if (key == kAllKeys[i]) return i;
  }
  return -1;
}

struct Decoder {
  Decoder(Header* header, std::string* error_out)
      : h(header),
        error(error_out),
        targets{&magic,
                &version,
                &op,
                &h->request_id,
                &role,
                &sender,
                &h->step,
                &h->offset,
                &h->length,
                &h->total,
                &workers,
                &h->samples,
                &h->correct,
                &dtype,
                &h->chunk,
                &h->times.data_us,
                &h->times.compute_us,
                &h->times.push_us,
                &h->times.wait_us,
                &h->times.pull_us,
                &h->times.eval_us,
                &slowest,
                &h->slowest_us,
                &h->checkpoint,
                &h->stop,
                &h->times.ckpt_us,
                &h->write_us,
                &h->mode,
                &h->based_on,
                &h->stale_sum,
                &h->stale_count,
                &h->stale_max,
                &h->lead_max,
                &h->dropped,
                &h->shm,
                &h->eval_samples,
                &h->eval_correct,
                &h->apply_us,
                &h->bytes_in,
                &h->bytes_out,
                &h->part,
                &h->parts,
                &h->durable} {}
  Header* h;
  std::string* error;
  uint64_t magic = 0, version = 0, op = 0, role = 0, sender = 0, workers = 0, dtype = 0, slowest = 0;
  uint64_t* targets[kLossIndex];  // the unsigned fields, by key index
  uint64_t seen = 0;              // bit i: kAllKeys[i] was read
  int next = 0;                   // the index the encoder writes next

  bool fail(const std::string& what) {
    *error = what;
    return false;
  }

  bool field(std::string_view key, const msgpack::object& v) {
    const int index = key_index(key, next);
    next = index + 1;
    if (index < 0) return fail("unknown header field '" + sanitize(std::string(key)) + "'");
    const uint64_t bit = uint64_t{1} << index;
    if (seen & bit) return fail("duplicate header field '" + std::string(key) + "'");
    seen |= bit;
    if (index < kLossIndex) {
      return get_uint(v, targets[index]) || fail("header field '" + std::string(key) + "' is not an unsigned integer");
    }
    if (index == kLossIndex || index == kLossIndex + 1) {
      double& number = index == kLossIndex ? h->loss_sum : h->eval_loss;
      // msgpack-cxx writes a double with an integral value as an integer.
      if (v.type == msgpack::type::FLOAT64 || v.type == msgpack::type::FLOAT32) {
        number = v.via.f64;
      } else if (v.type == msgpack::type::POSITIVE_INTEGER) {
        number = static_cast<double>(v.via.u64);
      } else if (v.type == msgpack::type::NEGATIVE_INTEGER) {
        number = static_cast<double>(v.via.i64);
      } else {
        return fail("header field '" + std::string(key) + "' is not a number");
      }
      return std::isfinite(number) || fail("header field '" + std::string(key) + "' is not finite");
    }
    if (v.type != msgpack::type::STR) return fail("header field 'msg' is not a string");
    h->message.assign(v.via.str.ptr, v.via.str.size);
    return true;
  }

  bool finish() {
    for (int i = 0; i <= 5; ++i) {  // magic, ver, op, rid, role, from
      if (!(seen & (uint64_t{1} << i))) return fail("header field '" + std::string(kAllKeys[i]) + "' is missing");
    }
    if (magic != kMagic) return fail("bad magic (not a pstrain message)");
    if (version != kProtocolVersion) {
      return fail("protocol version " + std::to_string(version) + " is not supported (expected " +
                  std::to_string(kProtocolVersion) + ")");
    }
    if (op < static_cast<uint64_t>(Op::kHello) || op > static_cast<uint64_t>(Op::kStatsSum)) {
      return fail("unknown op " + std::to_string(op));
    }
    if (role > static_cast<uint64_t>(SenderRole::kPs)) return fail("unknown role " + std::to_string(role));
    if (sender > UINT32_MAX) return fail("sender index out of range");
    if (workers > UINT32_MAX) return fail("nw out of range");
    if (slowest > UINT32_MAX) return fail("slow out of range");
    if (dtype != kDtypeFloat32) return fail("dtype " + std::to_string(dtype) + " is not float32");
    if (h->stop > 1) return fail("stop is not 0 or 1");
    const bool shm2 = op == static_cast<uint64_t>(Op::kWelcome) || op == static_cast<uint64_t>(Op::kPull);
    if (h->shm > (shm2 ? 2u : 1u)) return fail("shm is not 0 or 1 (or 2 in WELCOME and PULL)");
    if (h->mode > static_cast<uint64_t>(ModeCode::kSsp)) return fail("unknown mode " + std::to_string(h->mode));
    if (h->length > (uint64_t{1} << 40) || h->offset > (uint64_t{1} << 40) ||
        h->total > (uint64_t{1} << 40)) {
      return fail("slice fields out of range");
    }
    h->op = static_cast<Op>(op);
    h->role = static_cast<SenderRole>(role);
    h->sender = static_cast<uint32_t>(sender);
    h->num_workers = static_cast<uint32_t>(workers);
    h->slowest = static_cast<uint32_t>(slowest);
    return true;
  }
};

}  // namespace

ModeCode mode_code(Mode mode) {
  switch (mode) {
    case Mode::kSync: return ModeCode::kSync;
    case Mode::kAsync: return ModeCode::kAsync;
    case Mode::kSsp: return ModeCode::kSsp;
    case Mode::kAllreduce: break;
  }
  throw UsageError(std::string("mode '") + mode_name(mode) + "' is not served by a parameter server (sync, async, ssp)");
}

Mode mode_of_code(uint64_t code) {
  switch (static_cast<ModeCode>(code)) {
    case ModeCode::kSync: return Mode::kSync;
    case ModeCode::kAsync: return Mode::kAsync;
    case ModeCode::kSsp: return Mode::kSsp;
  }
  throw Error("unknown mode code " + std::to_string(code));
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kHello: return "HELLO";
    case Op::kWelcome: return "WELCOME";
    case Op::kInit: return "INIT";
    case Op::kPush: return "PUSH";
    case Op::kPull: return "PULL";
    case Op::kParams: return "PARAMS";
    case Op::kDone: return "DONE";
    case Op::kError: return "ERROR";
    case Op::kWaiting: return "WAITING";
    case Op::kSparsePull: return "SPARSE_PULL";
    case Op::kSparseRows: return "SPARSE_ROWS";
    case Op::kSparsePush: return "SPARSE_PUSH";
    case Op::kNorm: return "NORM";
    case Op::kClip: return "CLIP";
    case Op::kStats: return "STATS";
    case Op::kStatsSum: return "STATS_SUM";
  }
  return "?";
}

std::string encode_op_counts(const OpCounts& counts) {
  std::string text;
  for (size_t op = 0; op < counts.size(); ++op) {
    if (counts[op] == 0) continue;
    text += (text.empty() ? "" : " ") + std::to_string(op) + ":" + std::to_string(counts[op]);
  }
  return text;
}

bool decode_op_counts(const std::string& text, OpCounts* counts, std::string* error) {
  counts->fill(0);
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(' ', at), text.size());
    const std::string pair = text.substr(at, end - at);
    const size_t colon = pair.find(':');
    unsigned long long op = 0, count = 0;
    char rest = 0;
    if (colon == std::string::npos || std::sscanf(pair.c_str(), "%llu:%llu%c", &op, &count, &rest) != 2 ||
        op >= counts->size() || std::string(op_name(static_cast<Op>(op))) == "?") {
      *error = "DONE's message counts '" + pair + "' are not OP:COUNT of a known operation";
      return false;
    }
    (*counts)[op] = count;
    at = end + 1;
  }
  return true;
}

std::string missing_ops(const OpCounts& sent, const OpCounts& received) {
  std::string text;
  for (size_t op = 0; op < sent.size(); ++op) {
    if (received[op] >= sent[op]) continue;
    text += (text.empty() ? "" : ", ") + std::to_string(sent[op] - received[op]) + " " +
            op_name(static_cast<Op>(op)) + " (" + std::to_string(received[op]) + " of " + std::to_string(sent[op]) +
            " arrived)";
  }
  return text;
}

bool op_has_payload(Op op) {
  return op == Op::kInit || op == Op::kPush || op == Op::kParams || op == Op::kSparsePull || op == Op::kSparseRows ||
         op == Op::kSparsePush || op == Op::kNorm || op == Op::kClip ||
         op == Op::kStats || op == Op::kStatsSum;
}

bool payload_in_shared_memory(const Header& h) { return h.shm != 0 && (h.op == Op::kPush || h.op == Op::kParams); }

std::string encode_header(const Header& h) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_map(kNumKeys);
  auto put = [&pk](const char* key, uint64_t value) {
    pk.pack(key);
    pk.pack_uint64(value);
  };
  put(kKeyMagic, kMagic);
  put(kKeyVersion, kProtocolVersion);
  put(kKeyOp, static_cast<uint64_t>(h.op));
  put(kKeyRequest, h.request_id);
  put(kKeyRole, static_cast<uint64_t>(h.role));
  put(kKeySender, h.sender);
  put(kKeyStep, h.step);
  put(kKeyOffset, h.offset);
  put(kKeyLength, h.length);
  put(kKeyTotal, h.total);
  put(kKeyWorkers, h.num_workers);
  put(kKeySamples, h.samples);
  put(kKeyCorrect, h.correct);
  put(kKeyDtype, kDtypeFloat32);
  put(kKeyChunk, h.chunk);
  put(kKeyData, h.times.data_us);
  put(kKeyCompute, h.times.compute_us);
  put(kKeyPush, h.times.push_us);
  put(kKeyWait, h.times.wait_us);
  put(kKeyPull, h.times.pull_us);
  put(kKeyEval, h.times.eval_us);
  put(kKeySlowest, h.slowest);
  put(kKeySlowestTime, h.slowest_us);
  put(kKeyCheckpoint, h.checkpoint);
  put(kKeyStop, h.stop);
  put(kKeyCheckpointTime, h.times.ckpt_us);
  put(kKeyWriteTime, h.write_us);
  put(kKeyMode, h.mode);
  put(kKeyBasedOn, h.based_on);
  put(kKeyStaleSum, h.stale_sum);
  put(kKeyStaleCount, h.stale_count);
  put(kKeyStaleMax, h.stale_max);
  put(kKeyLead, h.lead_max);
  put(kKeyDropped, h.dropped);
  put(kKeyShm, h.shm);
  put(kKeyEvalSamples, h.eval_samples);
  put(kKeyEvalCorrect, h.eval_correct);
  put(kKeyApplyTime, h.apply_us);
  put(kKeyBytesIn, h.bytes_in);
  put(kKeyBytesOut, h.bytes_out);
  put(kKeyPart, h.part);
  put(kKeyParts, h.parts);
  put(kKeyDurable, h.durable);
  pk.pack(kKeyLoss);
  pk.pack_double(h.loss_sum);
  pk.pack(kKeyEvalLoss);
  pk.pack_double(h.eval_loss);
  pk.pack(kKeyMessage);
  pk.pack(h.message.size() > kMaxMessageChars ? h.message.substr(0, kMaxMessageChars) : h.message);
  return std::string(buffer.data(), buffer.size());
}

bool decode_header(const void* data, size_t size, Header* out, std::string* error) {
  *out = Header{};
  if (size == 0) return (*error = "empty header frame", false);
  if (size > kMaxHeaderBytes) {
    *error = "header frame of " + std::to_string(size) + " bytes exceeds " +
             std::to_string(kMaxHeaderBytes);
    return false;
  }
  msgpack::object_handle handle;
  try {
    // Limits keep a few hostile bytes from declaring huge containers.
    const msgpack::unpack_limit limit(/*array=*/0, /*map=*/2 * kNumKeys, /*str=*/kMaxMessageChars,
                                      /*bin=*/0, /*ext=*/0, /*depth=*/2);
    size_t consumed = 0;
    handle = msgpack::unpack(static_cast<const char*>(data), size, consumed, nullptr, nullptr, limit);
    if (consumed != size) return (*error = "trailing bytes after the header map", false);
  } catch (const std::exception& e) {
    *error = std::string("header is not valid MessagePack (") + e.what() + ")";
    return false;
  }
  const msgpack::object& root = handle.get();
  if (root.type != msgpack::type::MAP) return (*error = "header is not a MessagePack map", false);
  Decoder d{out, error};
  for (uint32_t i = 0; i < root.via.map.size; ++i) {
    const msgpack::object_kv& kv = root.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR) return (*error = "header key is not a string", false);
    if (!d.field(std::string_view(kv.key.via.str.ptr, kv.key.via.str.size), kv.val)) return false;
  }
  return d.finish();
}

bool check_frames(const Header& h, size_t num_frames, size_t payload_bytes, std::string* error) {
  const size_t want_frames = op_has_payload(h.op) && !payload_in_shared_memory(h) ? 2 : 1;
  if (num_frames != want_frames) {
    *error = std::string(op_name(h.op)) + " needs " + std::to_string(want_frames) +
             " frame(s), got " + std::to_string(num_frames);
    return false;
  }
  if (want_frames == 2 && payload_bytes != h.length * sizeof(float)) {
    *error = std::string(op_name(h.op)) + " payload is " + std::to_string(payload_bytes) +
             " bytes, header says " + std::to_string(h.length) + " float32 (" +
             std::to_string(h.length * sizeof(float)) + " bytes)";
    return false;
  }
  return true;
}

}  // namespace pstrain
