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

  // Asks the shards for the rows of the IDs of n records at `version` (`counts`: n * options.fields,
  // each field's number of IDs, `ids` their IDs; null counts: one each, n * options.fields IDs;
  // EmbeddingInput::prepare), without waiting: a
  // step asks for its batch's rows before it waits for its parameters (sync: both arrive once the
  // step before is applied). With gradient accumulation the n records are all the step's
  // micro-batches, one after the other: the tables do not change within a step.
  void request(const uint64_t* ids, const uint32_t* counts, size_t n, uint64_t version);
  // The model's input for records [first, first + n) of the last request() (host memory,
  // n * input_dim() floats, valid until the next call): `dense` (n * options.dense) and their
  // rows. The first call after request() waits for the rows. Throws pstrain::Error when a shard's
  // answer does not match what was asked.
  const float* input(const float* dense, size_t first, size_t n);
  // The same into the caller's memory (n * input_dim() floats): no copy of the batch's input.
  void input(const float* dense, size_t first, size_t n, float* out);
  // All the records of the last request().
  const float* input(const float* dense, size_t n);
  // request() and input() in one.
  const float* input(const float* dense, const uint64_t* ids, const uint32_t* counts, size_t n, uint64_t version) {
    request(ids, counts, n, version);
    return input(dense, n);
  }
  bool requested() const { return requested_; }
  // The rows of the last request(), received and dropped unused (backup workers: the job moved on
  // past the version they were asked for).
  void discard();
  // After backward of input(dense, first, n): `dx` (host, n * input_dim()) is the gradient of the
  // summed loss with respect to it. Kept until push().
  void add_gradient(size_t first, size_t n, const float* dx);
  // Once every record of the request has its gradient: pushes the rows' part to the shards for
  // `step`, one gradient per unique ID summed over all the records (record order, field order).
  void push(uint64_t step, uint64_t samples);

 private:
  EmbeddingInput embedding_;
  const EmbeddingInputOptions options_;
  RowSource* source_ = nullptr;
  std::vector<float> x_;
  std::vector<float> dx_;  // the request's records' dL/dx, filled by add_gradient
  bool requested_ = false, received_ = false;
  uint64_t ticket_ = 0;
};

}  // namespace pstrain
