// The trainer's input stage: how a step's micro-batches come from the reader, how each becomes
// the model's input, and what is pushed for the input after backward. Chosen once, when the
// trainer opens its data, so that the step loop (worker/train/trainer.cc) has no branch per kind of
// input: a feature of the input is a stage here, not a branch in the loop.
//   plain           the records' features are the model's input (train_input.cc)
//   embedding rows  --embedding-dim: each record's dense features and one row per categorical
//                   field, pulled from the PS's tables; the rows' gradients pushed back
//                   (worker/train/embedding_rows_input.h, docs/sparse.md)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/util/clock.h"
#include "worker/backend/backend.h"
#include "worker/sparse/embedding_setup.h"

namespace pstrain {

class Dataset;
class Evaluation;
class Model;
class Prefetcher;
class Replica;
class RowSource;
struct Batch;
struct ModelDescription;

// Where a step's time went in the stage, for the step's breakdown (StepTimes).
struct InputTimes {
  Clock::duration data{};     // waiting for the reader's batches
  Clock::duration rows{};     // the embedding rows: asked for, waited for, gathered into the input
  Clock::duration pushing{};  // the rows' gradients, staged and pushed
};

class TrainInput {
 public:
  virtual ~TrainInput() = default;

  // One record's input to the model (its first layer's shape).
  virtual std::vector<size_t> shape() const = 0;
  // What model.json records of the input (a CTR model's tables).
  virtual void describe(ModelDescription* d) const = 0;
  // --init-params DIR: the saved model's tables (model.json) against this job's; throws
  // pstrain::UsageError when they differ.
  virtual void check_saved(const EmbeddingSetup& saved, const std::string& dir) const = 0;
  // Once the model is made: micro-batches of a step, the device buffers for up to `max_batch`
  // records, and how the evaluation reads and judges the test records (after set_model).
  virtual void attach(Backend& backend, const Model& model, int micro_batches, int max_batch,
                      Evaluation& evaluation) = 0;
  // Once the exchange is made: where the rows come from (null: no PS shards).
  virtual void connect(RowSource* rows) = 0;

  // A step's start, before its first take().
  virtual void begin_step(uint64_t step, Prefetcher& reader, InputTimes* times) = 0;
  // Micro-batch j of `step` into *batch; throws pstrain::Error when the data ended before it.
  virtual void take(uint64_t step, int j, Prefetcher& reader, Batch* batch, InputTimes* times) = 0;
  // The model's input for the batch just taken, on the device.
  virtual const float* input(const Batch& batch, Replica& replica, InputTimes* times) = 0;
  // Where backward leaves d loss / d input (null: not wanted).
  virtual float* input_grad() = 0;
  // After the batch's backward (`last`: the step's last micro-batch, `samples` the step's).
  virtual void after_backward(uint64_t step, const Batch& batch, bool last, uint64_t samples,
                              Prefetcher& reader, InputTimes* times) = 0;
  // Backup workers: the job moved past the steps after this one; what was asked ahead goes unused.
  virtual void skip() = 0;
};

struct TrainInputOptions {
  EmbeddingSetup tables;     // dim 0: the plain stage
  uint64_t total_steps = 0;  // the job's steps (the rows are asked for a step ahead)
  float huber_delta = 1;     // --loss huber: the test figures' delta
  std::string tag;           // the worker's log prefix ("w0: ")
};

// The stage for the job's input. Throws pstrain::UsageError for tables over data without
// categorical fields.
std::unique_ptr<TrainInput> make_train_input(const TrainInputOptions& o, const Dataset& train_data);

}  // namespace pstrain
