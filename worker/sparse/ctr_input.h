// A CTR model's input (docs/sparse.md, "A worker's step"): each record's dense features followed
// by one embedding row per categorical field, the rows pulled from the PS shards for the batch's
// unique IDs; and after backward, the gradient of those rows (from the gradient of the input)
// pushed back, one summed row per unique ID and shard. Built on EmbeddingInput
// (worker/sparse/embedding_input.h), with the shards behind a RowSource.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "worker/sparse/embedding_input.h"
#include "worker/sparse/row_source.h"

namespace pstrain {

class CtrInput {
 public:
  explicit CtrInput(const EmbeddingInputOptions& options) : embedding_(options), options_(options) {}

  size_t input_dim() const { return embedding_.input_dim(); }
  size_t unique_keys() const { return embedding_.unique_keys(); }
  // The shards, once the exchange is made (must outlive this).
  void set_source(RowSource* source) { source_ = source; }

  // Asks the shards for the rows of `ids` (n * options.fields) at `version`, without waiting: a
  // step asks for its batch's rows before it waits for its parameters (sync: both arrive once the
  // step before is applied).
  void request(const uint64_t* ids, size_t n, uint64_t version);
  // The model's input for the `n` records of the last request() (host memory, n * input_dim()
  // floats, valid until the next call): `dense` (n * options.dense) and their rows. Throws
  // pstrain::Error when a shard's answer does not match what was asked.
  const float* input(const float* dense, size_t n);
  // request() and input() in one.
  const float* input(const float* dense, const uint64_t* ids, size_t n, uint64_t version) {
    request(ids, n, version);
    return input(dense, n);
  }
  bool requested() const { return requested_; }
  // After backward of the last input(): `dx` (host, n * input_dim()) is the gradient of the
  // summed loss with respect to it; pushes its rows' part to the shards for `step`.
  void push(uint64_t step, uint64_t samples, const float* dx);

 private:
  EmbeddingInput embedding_;
  const EmbeddingInputOptions options_;
  RowSource* source_ = nullptr;
  std::vector<float> x_;
  bool requested_ = false;
  uint64_t ticket_ = 0;
};

}  // namespace pstrain
