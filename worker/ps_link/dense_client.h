// The dense parameters over a PsChannel (docs/wire_protocol.md): the chief's INIT, the gradient
// pushed to each shard chunk by chunk (as soon as backward has produced a chunk), the parameters
// of the next version received as each shard finishes their chunks, and --clip-norm's NORM/CLIP
// round with several shards. A chunk of a shard on this host moves through its shared-memory
// segment, or is read from its parameter area (plain sync), instead of the socket.
//
// Threads and errors as the channel's (worker/ps_link/channel.h): the thread that owns the
// channel calls every method; failures throw pstrain::Error naming the shard.
#pragma once

#include <cstdint>
#include <vector>

#include "shared/train/clip_norm.h"
#include "shared/train/layout.h"
#include "worker/exchange/step_metrics.h"
#include "worker/ps_link/channel.h"

namespace pstrain {

class DenseClient final : private PsChannel::Awaiter {
 public:
  // After channel.hello(), which returned `version`: the chunks are the shards' WELCOMEs'.
  // Attaches to the channel (its NORMs come whenever they arrive) until destroyed.
  DenseClient(PsChannel& channel, uint64_t version);
  ~DenseClient() override;
  DenseClient(const DenseClient&) = delete;
  DenseClient& operator=(const DenseClient&) = delete;

  // Chief only: the initial values of every chunk (copied: sent once).
  void init(const float* params);
  // Asks every shard for the parameters of `version` (exactly it in plain sync; at least it, and
  // the newest, in async, ssp and with backup workers); chunks are sent as they become ready.
  void request_params(uint64_t version);
  // Pushes, for `step`, every chunk not pushed yet that lies inside [ready_from, total) of grad.
  // Sends without copying: grad must not change until receive_params() has returned.
  void push_ready(uint64_t step, const float* grad, size_t ready_from, const PushInfo& info);
  // Receives every chunk of the requested version into params (the metrics of the step ride
  // on the first). Sets *wait_us (until the first chunk arrived) and *pull_us (the rest), when
  // not null. Waits while the shards' barriers wait (WAITING) but gives up after 4 x --timeout,
  // or after --timeout of silence from a shard that owes chunks ("cannot reach ps<s>"); logs what
  // it waits for every 5 s. A repeated PARAMS (a duplicated message) is logged and dropped.
  StepMetrics receive_params(float* params, uint64_t* wait_us, uint64_t* pull_us);
  // request_params + receive_params.
  StepMetrics pull(uint64_t version, float* params);

  // With one shard, on this host: its segment's gradient area, the whole gradient; a gradient
  // computed there is pushed without a copy. Else nullptr.
  float* gradient_area() const;
  // With one shard that keeps its values in a shared parameter area (WELCOME shm 2: plain sync,
  // on this host): that area, mapped read-only. The PS writes it only while every worker waits
  // for PARAMS, so forward and backward may read the parameters there. Else nullptr.
  const float* params_area() const;
  const std::vector<Slice>& slices() const { return channel_.slices(); }
  size_t num_chunks() const { return chunks_.size(); }

 private:
  struct ChunkRef {
    int shard;
    Slice range;
  };
  // One receive_params: the Wait that owns the pulled version's messages.
  class Receive;

  // Awaiter: every NORM, whenever it arrives (one may cross the PARAMS it preceded).
  bool owns(const Header& h) const override { return h.op == Op::kNorm; }
  std::string what() const override { return "parameters"; }
  void take(Message& msg, const Header& h) override { take_norm(msg, h); }
  // --clip-norm with several shards: a NORM of the pending PULL. Once every shard's part of the
  // squares is in, their sum goes back to every shard (CLIP), which then applies the step.
  void take_norm(const Message& msg, const Header& h);
  // Where the values of a received PARAMS are: its shard's parameter area, this worker's
  // segment, or the message's payload frame. Throws when the PS used another path than asked.
  const float* values_of(const Message& msg, const Header& h) const;

  PsChannel& channel_;
  const PsClientOptions& options_;
  std::vector<ChunkRef> chunks_;    // every shard's chunks, in flat-vector order
  std::vector<uint64_t> versions_;  // of each chunk as last received (PUSH's based_on)
  size_t unpushed_ = 0;             // chunks_[0, unpushed_) are not pushed yet this step
  uint64_t pushing_step_ = UINT64_MAX;
  uint64_t pull_request_ = 0, pull_version_ = 0;
  bool pulling_ = false;         // between request_params and the end of its receive_params
  std::vector<bool> norm_from_;  // --clip-norm: the shards whose NORM the pending PULL got
  ExactSquares norm_sum_;        // their parts summed (exactly: in any order)
  const bool exact_versions_;    // plain sync: PARAMS carry exactly the version pulled
};

}  // namespace pstrain
