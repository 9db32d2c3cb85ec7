// The worker's side of the PS protocol: registers with every shard, pushes each shard its slice
// of the gradient, pulls each shard's slice of the parameters. The calling thread owns the
// transport (docs/threading.md). Every wait has the job's --timeout deadline.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/layout.h"
#include "shared/options.h"
#include "shared/protocol.h"
#include "shared/transport.h"

namespace pstrain {

struct StepMetrics {  // of one global step, summed over all workers (from shard 0)
  uint64_t samples = 0;
  double loss_sum = 0;
  uint64_t correct = 0;
};

class PsClient {
 public:
  // `total` = floats of the flat parameter vector. `endpoint` has one peer per shard.
  PsClient(const JobOptions& options, uint64_t total, Endpoint& endpoint);

  // Registers with every shard, logging while a shard is not reachable yet. Returns the version
  // the shards are at.
  uint64_t hello(uint64_t total_steps);
  void init(const float* params);  // chief only: initial values of every slice
  void push(uint64_t step, const float* grad, uint64_t samples, double loss_sum, uint64_t correct);
  // Blocks until every shard sent its slice of version `version` into params.
  StepMetrics pull(uint64_t version, float* params);
  void done();

  const std::vector<Slice>& slices() const { return slices_; }

 private:
  Header request(Op op, uint64_t step, int shard) const;
  void send(int shard, const Header& h, const float* payload);
  // Receives the reply to request_id from each shard that has one outstanding (pending[s]).
  std::vector<Message> await(const std::vector<bool>& pending, uint64_t request_id, Op want,
                             const char* what);

  const JobOptions options_;
  const uint64_t total_;
  Endpoint& endpoint_;
  std::vector<Slice> slices_;
  uint64_t next_request_ = 1;
};

}  // namespace pstrain
