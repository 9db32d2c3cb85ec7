// The worker's side of the PS protocol: registers with every shard, pushes each shard its slice
// of the gradient chunk by chunk (as soon as backward has produced a chunk), and receives the
// parameter chunks of the next version as each shard finishes them. The calling thread owns the
// transport (docs/threading.md). A shard on the same host gets the payloads through a
// shared-memory segment instead of the socket (docs/wire_protocol.md). Every wait has the job's --timeout deadline, except HELLO's,
// which waits up to --start-timeout for shards that are still starting.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "shared/train/clip_norm.h"
#include "shared/train/layout.h"
#include "shared/wire/protocol.h"
#include "shared/wire/sparse_wire.h"
#include "shared/net/shared_memory.h"
#include "shared/net/transport.h"
#include "shared/util/clock.h"
#include "worker/ps_client_options.h"
#include "worker/step_metrics.h"
#include "worker/sparse/row_source.h"

namespace pstrain {

class PsClient final : public RowSource {
 public:
  // `total` = floats of the flat parameter vector. `endpoint` has one peer per shard.
  PsClient(const PsClientOptions& options, uint64_t total, Endpoint& endpoint);

  // Registers with every shard, logging "waiting for ps<s> at host:port" while one has not
  // answered (after 1 s, then every 5 s), up to --start-timeout. `total_steps` is the length of
  // the job (the PS's learning-rate schedule). Returns the step this worker runs first: the
  // version the shards are at, or for a replaced worker the step its predecessor left undone.
  uint64_t hello(uint64_t total_steps);
  void init(const float* params);  // chief only: initial values of every chunk

  // Asks every shard for the parameters of `version` (at least `version`, and the newest, in
  // async, ssp and with backup workers); chunks are sent as they become ready.
  void request_params(uint64_t version);
  // Pushes, for `step`, every chunk not pushed yet that lies inside [ready_from, total) of grad.
  // Sends without copying: grad must not change until receive_params() has returned.
  void push_ready(uint64_t step, const float* grad, size_t ready_from, const PushInfo& info);
  // Receives every chunk of the requested version into params. Sets *wait_us (until the first
  // chunk arrived) and *pull_us (the rest).
  StepMetrics receive_params(float* params, uint64_t* wait_us, uint64_t* pull_us);
  // request_params + receive_params.
  StepMetrics pull(uint64_t version, float* params);

  // Embedding tables (docs/sparse.md). Asks each shard s for the rows of requests[s]'s IDs (none:
  // an empty pull, which still waits for the version) as they are at `version` (SPARSE_PULL; sync: once every step before it was
  // applied) and returns at once: a ticket for receive_rows. The answers are taken whenever they
  // arrive, also while receive_params waits (a step's rows may be asked for before the
  // parameters it is computed on).
  uint64_t request_rows(uint64_t version, const std::vector<const std::vector<SparseSection>*>& requests) override;
  // Waits for the answers to `ticket`: shard s's SPARSE_ROWS sections.
  // Throws pstrain::Error when a shard refuses or does not answer in time (its WAITING, while its
  // barrier waits, restarts the wait).
  std::vector<std::vector<SparseSection>> receive_rows(uint64_t ticket) override;
  // This worker's summed gradients per ID for `step` over `samples` samples, sections[s] to
  // shard s (SPARSE_PUSH): every shard gets one, empty or not, since a sync step is applied once
  // every worker pushed to it.
  void push_rows(uint64_t step, uint64_t samples, const std::vector<std::vector<SparseSection>>& sections) override;
  // Hybrid mode, the chief: its SPARSE_PUSHes of `step` carry the version to checkpoint (the
  // shards write their tables once they reach it), as its dense PUSHes do in sync.
  void mark_rows(uint64_t step, uint64_t checkpoint) {
    marked_step_ = step;
    marked_checkpoint_ = checkpoint;
  }
  // Batch norm's global statistics (sync): this worker's sums of call `call` of `step` to ps0,
  // replaced by every worker's added (STATS, STATS_SUM). Waits up to --timeout for the others.
  void combine_stats(uint64_t step, uint64_t call, std::vector<double>& sums);
  // DONE to every shard, `stopped` when the job stopped before its end (the PS then keeps
  // --save-params' directory as it is); waits for every acknowledgement.
  void done(bool stopped = false);

  // With one shard, on this host (after hello): its segment's gradient area, the whole gradient;
  // a gradient computed there is pushed without a copy. Else nullptr.
  float* gradient_area() const;
  // With one shard that keeps its values in a shared parameter area (WELCOME shm 2: plain sync,
  // on this host), after hello: that area, mapped read-only. The PS writes it only while every
  // worker waits for PARAMS, so forward and backward may read the parameters there. Else nullptr.
  const float* params_area() const;
  const std::vector<Slice>& slices() const { return slices_; }
  size_t num_chunks() const { return chunks_.size(); }

 private:
  struct ChunkRef {
    int shard;
    Slice range;
  };

  Header request(Op op, uint64_t step, int shard) const;
  void send(int shard, const Header& h, Frame* payload);
  // Receives the one reply to request_id from each shard marked pending.
  std::vector<Message> await(const std::vector<bool>& pending, uint64_t request_id, Op want, const char* what);
  Header decode(const Message& msg) const;
  // hello's parts: HELLO to shard s, offering it a shared-memory segment for its payloads
  // (--shared-memory auto); shard s's WELCOME: its slice checked, the segment kept or dropped as
  // the PS decided, its parameter area mapped (shm 2), its chunks appended; then the headers of
  // the shards on this host moved to the local channel.
  void send_hello(int s, uint64_t rid, uint64_t total_steps);
  void welcome(int s, const Header& h);
  void use_local_channels();
  // While receive_params waits: when each shard was last heard from (any message, WAITING
  // included), what its barrier waits for (its last WAITING), and when to give up regardless.
  struct Silence {
    std::vector<Clock::time_point> heard;
    std::vector<std::string> barrier;
    Clock::time_point give_up;
  };
  // The earliest of: --timeout after the last word from a shard that still owes chunks, give_up.
  Clock::time_point wait_deadline(const std::vector<bool>& received, const Silence& silence) const;
  // Throws when a shard owing chunks has been silent for --timeout (it cannot be reached), or at
  // give_up (naming what the shards' barriers wait for); else logs what is waited for.
  void report_waiting(const std::vector<bool>& received, const Silence& silence) const;
  // Where the values of a received PARAMS are: its shard's parameter area, this worker's
  // segment, or the message's payload frame. Throws when the PS used another path than asked.
  const float* values_of(const Message& msg, const Header& h) const;
  // A SPARSE_ROWS, or an ERROR or WAITING, of a pending request_rows: taken (and false for any
  // other message). Throws for an ERROR or a malformed answer.
  bool take_rows(const Message& msg, const Header& h);
  // --clip-norm with several shards: a NORM of the pending PULL. Once every shard's part of the
  // squares is in, their sum goes back to every shard (CLIP), which then applies the step.
  void take_norm(const Message& msg, const Header& h);

  // A shard's answer to a request_rows: a pull in parts gets one SPARSE_ROWS per part, each
  // checked against its part (the tables and counts asked) and put together in part order.
  struct ShardRows {
    uint64_t parts = 1;
    size_t left = 1;
    std::vector<std::vector<SparseSection>> answers;            // by part, until every part is in
    std::vector<bool> got;                                      // by part
    std::vector<std::vector<std::pair<uint32_t, size_t>>> asked;  // by part (several): table, IDs
  };
  struct RowsRequest {  // a request_rows not fully answered or not received yet
    uint64_t ticket = 0;
    std::vector<bool> waiting;  // by shard
    size_t left = 0;
    std::vector<std::vector<SparseSection>> rows;
    std::vector<ShardRows> shards;
  };
  // Shard s's SPARSE_ROWS `h` of request r, decoded into `answer`: checked against its part;
  // once every part is in, put together into r.rows[s].
  void take_rows_part(RowsRequest& r, size_t s, const Header& h, std::vector<SparseSection> answer);
  std::vector<RowsRequest> rows_requests_;

  const PsClientOptions options_;
  const uint64_t total_;
  Endpoint& endpoint_;
  std::vector<Slice> slices_;
  std::vector<ChunkRef> chunks_;   // every shard's chunks, in flat-vector order
  size_t unpushed_ = 0;            // chunks_[0, unpushed_) are not pushed yet this step
  uint64_t pushing_step_ = UINT64_MAX;
  uint64_t pull_request_ = 0, pull_version_ = 0;
  std::vector<bool> norm_from_;    // --clip-norm: the shards whose NORM the pending PULL got
  ExactSquares norm_sum_;          // their parts summed (exactly: in any order)
  const bool exact_versions_;      // plain sync: PARAMS carry exactly the version pulled
  uint64_t global_batch_ = 0;      // sent with HELLO: every worker must agree
  std::vector<uint64_t> versions_; // of each chunk as last received (PUSH's based_on)
  // Per shard: the segment its payloads go through when the shard is on this host (HELLO
  // offers it, WELCOME says whether the PS mapped it); unmapped: the sockets.
  std::vector<SharedMemory> segments_;
  // Per shard: its parameter area, when WELCOME shm 2 named one and it could be mapped (read-only);
  // PARAMS are then read there (PULL shm 2).
  std::vector<SharedMemory> areas_;
  uint64_t next_request_ = 1;
  uint64_t marked_step_ = UINT64_MAX, marked_checkpoint_ = 0;  // mark_rows
  // The sparse messages travel in parts of at most a chunk's bytes (WELCOME's chunk, by shard);
  // a pull's parts are sized by their answers too, with the rows' dims of earlier answers.
  std::vector<size_t> part_bytes_;
  std::map<uint32_t, uint32_t> row_dims_;  // by table
  std::vector<OpCounts> sent_;  // by shard: messages sent since HELLO, by operation (DONE says them)
};

}  // namespace pstrain
