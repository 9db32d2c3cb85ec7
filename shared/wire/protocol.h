// pstrain wire protocol, version 14 (docs/wire_protocol.md). A message is a ZeroMQ multipart
// message: frame 0 is a MessagePack map (the header); INIT, PUSH and PARAMS carry one more
// frame with `length` little-endian float32 values, the sparse ops one more frame of `length`
// 4-byte words (shared/wire/sparse_wire.h), NORM and CLIP one of ExactSquares' u64 limbs, STATS
// and STATS_SUM one of doubles (`length` counting 4-byte words). Every field is validated on
// receipt.
#pragma once

#include <cstddef>
#include <array>
#include <cstdint>
#include <string>

namespace pstrain {

constexpr uint32_t kMagic = 0x50535452;  // "PSTR"
constexpr uint32_t kProtocolVersion = 15;
constexpr size_t kMaxHeaderBytes = 1024;
constexpr size_t kMaxMessageChars = 512;
// The most doubles one STATS carries (2 x channels + 1 per batchnorm layer): 32 MiB.
constexpr size_t kMaxStatsValues = size_t{1} << 22;

enum class Op : uint32_t {
  kHello = 1,    // worker -> PS: register as worker `sender` of `num_workers`, model of `total`
                 // floats, job of `step` updates
  kWelcome = 2,  // PS -> worker: registered; offset/length = the PS's slice, step = the worker's first
                 // step (the PS's version; for a replacement, the step its predecessor left)
  kInit = 3,     // chief -> PS: initial values of one chunk (payload)
  kPush = 4,     // worker -> PS: gradient sum of one chunk for `step` over `samples` samples
  kPull = 5,     // worker -> PS: send every chunk of the slice once it reaches version `step`
  kParams = 6,   // PS -> worker: one chunk at version `step` (payload) + metrics of step-1
  kDone = 7,     // worker -> PS: this worker has finished training; PS -> worker: acknowledged
  kError = 8,    // PS -> worker: request `request_id` failed; `message` says why
  kWaiting = 9,  // PS -> worker: PULL `request_id` still waits for step `step`, whose missing pushes
                 // `message` names (sent once a second while a barrier waits; keeps the worker's
                 // deadline from expiring while its PS is reachable)
  // Sparse tables (shared/wire/sparse_wire.h: frame 1 is a sparse body, `length` its 4-byte words):
  kSparsePull = 10,  // worker -> PS: rows of these IDs as they are at version `step`
  kSparseRows = 11,  // PS -> worker: the rows of SPARSE_PULL `request_id`, at version `step`
  kSparsePush = 12,  // worker -> PS: this worker's summed gradients per ID for `step` over `samples`
  // Gradient clipping by global norm (--clip-norm with several shards, sync): frame 1 holds an
  // ExactSquares sum (shared/train/clip_norm.h), `length` = kNormWords 4-byte words.
  kNorm = 13,  // PS -> worker: PULL `request_id` waits for step `step`'s clipping: the squares of this
               // shard's part of the summed gradient
  kClip = 14,  // worker -> PS: the squares of the whole summed gradient of step `step` (every shard's)
  // Batch norm's global statistics (shard 0 only; frame 1 is `length` / 2 little-endian doubles):
  kStats = 15,     // worker -> PS: this worker's sums of call `offset` of `step` (docs/models.md)
  kStatsSum = 16,  // PS -> worker: every worker's sums of that call added, in worker order
};
constexpr uint64_t kNormWords = 20;  // ExactSquares::kLimbs 64-bit limbs
const char* op_name(Op op);

// DONE's `message` (since 14): how many messages of each operation the worker sent the shard
// since its HELLO (HELLO included, DONE not), as "OP:COUNT" pairs of op codes separated by spaces
// ("1:1 5:20 12:20"). The PS acknowledges DONE once it has received that many of each
// (docs/wire_protocol.md, "Operations"). Indexed by op code.
using OpCounts = std::array<uint64_t, 17>;
std::string encode_op_counts(const OpCounts& counts);
// False, with *error, for text that is not such pairs of known ops (empty text: all zero).
bool decode_op_counts(const std::string& text, OpCounts* counts, std::string* error);
// What `sent` has more of than `received`: "1 SPARSE_PUSH (39 of 40 arrived)", joined by ", ";
// "" when nothing.
std::string missing_ops(const OpCounts& sent, const OpCounts& received);

enum class SenderRole : uint32_t { kWorker = 0, kPs = 1 };

// Where one step of a worker went, in microseconds (the parts add up to the step's wall time).
struct StepTimes {
  uint64_t data_us = 0;     // waiting for the prefetch queue
  uint64_t compute_us = 0;  // forward + backward, less the push calls made during backward
  uint64_t push_us = 0;     // sending gradient chunks
  uint64_t wait_us = 0;     // from the last push until the first parameter chunk arrived
  uint64_t pull_us = 0;     // receiving and storing the rest of the parameter chunks
  uint64_t eval_us = 0;     // evaluating the test set (or its share) after the step, at an epoch's end
  uint64_t ckpt_us = 0;     // checkpoints: the PS shards' write (out of wait) and the chief's manifest
  uint64_t busy_us() const { return data_us + compute_us + push_us; }
  uint64_t total_us() const { return busy_us() + wait_us + pull_us + eval_us + ckpt_us; }
  StepTimes& operator+=(const StepTimes& o) {
    data_us += o.data_us;
    compute_us += o.compute_us;
    push_us += o.push_us;
    wait_us += o.wait_us;
    pull_us += o.pull_us;
    eval_us += o.eval_us;
    ckpt_us += o.ckpt_us;
    return *this;
  }
};

struct Header {
  Op op = Op::kError;
  uint64_t request_id = 0;
  SenderRole role = SenderRole::kWorker;
  uint32_t sender = 0;        // index of the sender within its role
  uint64_t step = 0;          // PUSH: step; PULL, PARAMS, WELCOME: parameter version; HELLO: the job's steps
  uint64_t offset = 0;        // slice, in float32 elements of the flat vector
  uint64_t length = 0;
  uint64_t total = 0;         // HELLO: elements of the whole flat vector
  uint32_t num_workers = 0;   // HELLO: N as the worker knows it
  uint64_t samples = 0;       // PUSH: samples summed in the gradient; PARAMS: of step-1, all workers
  double loss_sum = 0;        // PUSH/PARAMS: summed loss over those samples
  uint64_t correct = 0;       // PUSH/PARAMS: correctly classified samples among them
  uint64_t chunk = 0;         // WELCOME: elements per chunk of the slice (messages carry one chunk)
  StepTimes times;            // PUSH: this worker's previous step; PARAMS: summed over workers
  uint32_t slowest = 0;       // PARAMS: the worker with the largest busy time in that step
  uint64_t slowest_us = 0;    // PARAMS: its busy time
  std::string message;        // ERROR: why; HELLO, WELCOME: a shared-memory segment's name (shm)
  uint64_t checkpoint = 0;    // PUSH from the chief: checkpoint version step+1 (0 = no)
  uint64_t write_us = 0;      // PARAMS: this shard's checkpoint of this version stalled it this long
  uint64_t durable = 0;       // PARAMS: the last checkpoint version this shard has written durably
  uint64_t stop = 0;          // PUSH from the chief: the job stops at version step+1 (final
                              // checkpoint); PARAMS: 1 = this version is the last, stop after it
  uint64_t mode = 0;          // HELLO: the worker's --mode (ModeCode), checked against the PS's
  uint64_t based_on = 0;      // PUSH: the version of this chunk the gradient was computed on
  // PARAMS (async, ssp: of the updates applied since this worker's last PARAMS of this chunk):
  uint64_t stale_sum = 0, stale_count = 0, stale_max = 0;  // staleness of those updates
  uint64_t lead_max = 0;      // ssp: the largest lead of a pushing worker over the slowest
  uint64_t dropped = 0;       // backup workers: late pushes dropped since the last step
  // Same-host shared memory (docs/wire_protocol.md, "Shared memory"). HELLO: `message` names the
  // worker's segment for this shard; WELCOME: 1 = the PS mapped it, 2 = and the shard's values
  // live in the parameter area `message` names. PUSH: 1 = the gradient is in the segment, no
  // payload frame; PULL: 1 = put the parameters there, 2 = the worker reads them in the parameter
  // area; PARAMS: 1 = they are there.
  uint64_t shm = 0;
  // PUSH: this worker's share of the test set, evaluated after its previous step (an epoch's end,
  // when the workers share the evaluation): records, summed loss, correct; PARAMS: summed over
  // the workers (docs/operations.md, "Reading the progress lines").
  uint64_t eval_samples = 0, eval_correct = 0;
  double eval_loss = 0;
  // PARAMS: the shard's own figures since it started (cumulative; docs/operations.md, "Metrics
  // file"): time spent applying updates to its dense slice, and message frame bytes received and
  // sent on its sockets (ZeroMQ and the local channel; payloads in shared memory are not counted).
  uint64_t apply_us = 0, bytes_in = 0, bytes_out = 0;
  // SPARSE_PULL, SPARSE_ROWS, SPARSE_PUSH: this message is part `part` (from 0) of `parts` of one
  // pull, its answer or one push (0 or 1: the whole message; docs/wire_protocol.md, "Sparse tables").
  uint64_t part = 0, parts = 0;
};

enum class Mode;  // --mode (shared/util/modes.h)

// HELLO's `mode` field: the wire's code of a Mode that a PS serves. Only the wire uses it; the
// PS and the worker speak of Mode (shared/util/modes.h).
enum class ModeCode : uint64_t { kSync = 0, kAsync = 1, kSsp = 2 };
// The code of --mode sync, async or ssp; throws pstrain::UsageError for allreduce (it has no PS).
ModeCode mode_code(Mode mode);
// The Mode of a HELLO's code (decode_header has checked it is one).
Mode mode_of_code(uint64_t code);

// A same-host worker's shared-memory segment for one shard whose slice holds `slice_length`
// floats: the worker's gradient of the slice from float 0, the PS's parameters of it from float
// shm_area_floats(slice_length) (docs/wire_protocol.md, "Shared memory").
inline uint64_t shm_area_floats(uint64_t slice_length) { return (slice_length + 15) / 16 * 16; }
inline size_t shm_segment_bytes(uint64_t slice_length) { return 2 * shm_area_floats(slice_length) * sizeof(float); }

// Whether an op carries the float32 payload frame (unless payload_in_shared_memory).
bool op_has_payload(Op op);
// A PUSH or PARAMS whose float32 values are in the worker's shared-memory segment, not a frame.
bool payload_in_shared_memory(const Header& h);

std::string encode_header(const Header& header);

// Decodes and validates frame 0. On failure returns false and sets *error to a message that
// names the offending field; *out is then unspecified.
bool decode_header(const void* data, size_t size, Header* out, std::string* error);

// Checks the frame count and payload size against the header (after decode_header).
bool check_frames(const Header& header, size_t num_frames, size_t payload_bytes,
                  std::string* error);

}  // namespace pstrain
