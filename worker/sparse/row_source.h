// Where a worker's embedding rows come from and its gradients of them go: the PS shards
// (worker/ps_link/row_client.h implements it). A seam, so that the CTR input
// (worker/sparse/ctr_input.h) does not depend on the client, and tests can stand in for the shards.
#pragma once

#include <cstdint>
#include <vector>

#include "shared/wire/sparse_wire.h"

namespace pstrain {

class RowSource {
 public:
  virtual ~RowSource() = default;
  // Asks each shard s for the rows of requests[s]'s IDs (maybe none) as they are at `version`;
  // returns a ticket for receive_rows (the answers may come while the caller does other work).
  virtual uint64_t request_rows(uint64_t version, const std::vector<const std::vector<SparseSection>*>& requests) = 0;
  // The answers to `ticket`: shard s's SPARSE_ROWS sections.
  virtual std::vector<std::vector<SparseSection>> receive_rows(uint64_t ticket) = 0;
  // Gradients per ID for `step` over `samples` samples, sections[s] to shard s (every shard).
  virtual void push_rows(uint64_t step, uint64_t samples, const std::vector<std::vector<SparseSection>>& sections) = 0;
};

}  // namespace pstrain
