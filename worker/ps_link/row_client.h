// The embedding tables' rows over a PsChannel (docs/sparse.md): SPARSE_PULL and SPARSE_PUSH to
// every shard, each cut into parts of at most the shard's chunk (WELCOME) and an answer in parts
// put back together in the pull's order. The RowSource the CTR input reads (worker/sparse/row_source.h).
//
// Threads and errors as the channel's (worker/ps_link/channel.h): the thread that owns the
// channel calls every method; failures throw pstrain::Error naming the shard.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shared/wire/sparse_wire.h"
#include "worker/ps_link/channel.h"
#include "worker/sparse/row_source.h"

namespace pstrain {

class RowClient final : public RowSource, private PsChannel::Awaiter {
 public:
  // Attaches to the channel (the answers to its pulls are taken whenever they arrive, also while
  // another client waits) until destroyed. Its requests need the channel's hello() first.
  explicit RowClient(PsChannel& channel);
  ~RowClient() override;
  RowClient(const RowClient&) = delete;
  RowClient& operator=(const RowClient&) = delete;

  // Asks each shard s for the rows of requests[s]'s IDs (none, or nullptr: an empty pull, which
  // still waits for the version) as they are at `version` (SPARSE_PULL; sync: once every step
  // before it was applied) and returns at once: a ticket for receive_rows. The answers are taken
  // whenever they arrive, also while receive_params waits (a step's rows may be asked for before
  // the parameters it is computed on). Throws when a request cannot be sent.
  uint64_t request_rows(uint64_t version,
                        const std::vector<const std::vector<SparseSection>*>& requests) override;
  // Waits for the answers to `ticket` (from request_rows, once): shard s's SPARSE_ROWS sections.
  // Throws pstrain::Error when a shard refuses ("ps<s> rejected SPARSE_PULL: ..."), answers what
  // was not asked, or does not answer within --timeout (its WAITING, while its barrier waits,
  // restarts the wait; 4 x --timeout in all).
  std::vector<std::vector<SparseSection>> receive_rows(uint64_t ticket) override;
  // This worker's summed gradients per ID for `step` over `samples` samples, sections[s] to
  // shard s (SPARSE_PUSH): every shard gets one, empty or not, since a sync step is applied once
  // every worker pushed to it. Returns once sent (no answer comes).
  void push_rows(uint64_t step, uint64_t samples,
                 const std::vector<std::vector<SparseSection>>& sections) override;
  // Hybrid mode, the chief: its SPARSE_PUSHes of `step` carry the version to checkpoint (the
  // shards write their tables once they reach it), as its dense PUSHes do in sync.
  void mark_rows(uint64_t step, uint64_t checkpoint) {
    marked_step_ = step;
    marked_checkpoint_ = checkpoint;
  }

 private:
  class Receive;
  // A shard's answer to a request_rows: a pull in parts gets one SPARSE_ROWS per part, each
  // checked against its part (the tables and counts asked) and put together in part order.
  struct ShardRows {
    uint64_t parts = 1;
    size_t left = 1;
    std::vector<std::vector<SparseSection>> answers;              // by part, until every part is in
    std::vector<bool> got;                                        // by part
    std::vector<std::vector<std::pair<uint32_t, size_t>>> asked;  // by part (several): table, IDs
  };
  struct RowsRequest {  // a request_rows not fully answered or not received yet
    uint64_t ticket = 0;
    std::vector<bool> waiting;  // by shard
    size_t left = 0;
    std::vector<std::vector<SparseSection>> rows;
    std::vector<ShardRows> shards;
    std::vector<std::string> waits;  // by shard: what its last WAITING said its barrier waits for
    Clock::time_point last_waiting;  // when the last WAITING about it came
  };

  // Awaiter: every message about a pending request_rows.
  bool owns(const Header& h) const override { return find(h.request_id) != requests_.end(); }
  std::string what() const override { return "SPARSE_PULL"; }
  void waiting(int shard, const Header& h) override;
  void take(Message& msg, const Header& h) override;
  std::vector<RowsRequest>::iterator find(uint64_t ticket);
  std::vector<RowsRequest>::const_iterator find(uint64_t ticket) const;
  // Shard s's part of its answer to r: the parts it is cut into, what each asks for.
  void expect_parts(ShardRows& answer, const std::vector<std::string>& bodies) const;
  // Shard s's SPARSE_ROWS `h` of request r, decoded into `answer`: checked against its part;
  // once every part is in, put together into r.rows[s].
  void take_rows_part(RowsRequest& r, size_t s, const Header& h, std::vector<SparseSection> answer);

  PsChannel& channel_;
  std::vector<RowsRequest> requests_;
  uint64_t marked_step_ = UINT64_MAX, marked_checkpoint_ = 0;  // mark_rows
  // A pull's parts are sized by their answers too, with the rows' dims of earlier answers.
  std::map<uint32_t, uint32_t> row_dims_;  // by table
};

}  // namespace pstrain
