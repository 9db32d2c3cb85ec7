// The trainer's input stage for --embedding-dim (worker/train/train_input.h; docs/sparse.md, "A
// worker's step"): the model's input is each record's dense features and one row per categorical
// field, the rows pulled from the PS's tables for all of a step's micro-batches at once (one pull),
// and asked for the next step as soon as this step's rows' gradients are pushed, so that the
// shards answer while the worker waits for its parameters. Built on CtrInput
// (worker/sparse/ctr_input.h); the evaluation reads the test records' rows through its own.
#pragma once

#include <vector>

#include "worker/data/prefetch.h"
#include "worker/sparse/ctr_input.h"
#include "worker/train/train_input.h"

namespace pstrain {

class EmbeddingRowsInput : public TrainInput {
 public:
  // Throws pstrain::UsageError when the data have no categorical fields.
  EmbeddingRowsInput(const TrainInputOptions& o, const Dataset& data);

  std::vector<size_t> shape() const override { return {ctr_.input_dim()}; }
  void describe(ModelDescription* d) const override;
  void check_saved(const EmbeddingSetup& saved, const std::string& dir) const override;
  void attach(Backend& backend, const Model& model, int micro_batches, int max_batch,
              Evaluation& evaluation) override;
  void connect(RowSource* rows) override;

  void begin_step(uint64_t step, Prefetcher& reader, InputTimes* times) override;
  void take(uint64_t step, int j, Prefetcher& reader, Batch* batch, InputTimes* times) override;
  const float* input(const Batch& batch, Replica& replica, InputTimes* times) override;
  float* input_grad() override { return input_grad_.get(); }
  void after_backward(uint64_t step, const Batch& batch, bool last, uint64_t samples, Prefetcher& reader,
                      InputTimes* times) override;
  void skip() override;

 private:
  static EmbeddingInputOptions input_options(const EmbeddingSetup& tables, const Dataset& data);
  // The micro-batches of one step from the reader. False when the data ended.
  bool take_step(Prefetcher& reader, std::vector<Batch>* batches) const;
  // Asks the shards for the rows of every record of a step's micro-batches, one after the other,
  // as they are at `version`.
  void request_rows(const std::vector<Batch>& batches, uint64_t version);

  const TrainInputOptions o_;
  const size_t dense_, fields_;  // the data's
  CtrInput ctr_;
  CtrInput eval_ctr_;  // the test records': a training request may be outstanding
  Backend* backend_ = nullptr;
  int micro_batches_ = 1;
  // The step's micro-batches (taken together: one pull of their rows), and the next step's once
  // their rows were asked for; and the IDs of a step of several.
  std::vector<Batch> step_batches_, next_batches_;
  IdLists step_ids_;
  size_t first_ = 0;                        // the current micro-batch's first record among the step's
  BufferPtr input_grad_, host_input_grad_;  // d loss / d input (on the backend, and staged)
};

}  // namespace pstrain
