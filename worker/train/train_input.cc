#include "worker/train/train_input.h"

#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/backend/replica.h"
#include "worker/data/dataset.h"
#include "worker/data/prefetch.h"
#include "worker/model/model.h"
#include "worker/train/embedding_rows_input.h"
#include "worker/train/evaluation.h"

namespace pstrain {
namespace {

// The records' features are the model's input; nothing is pushed for them.
class PlainInput : public TrainInput {
 public:
  PlainInput(const TrainInputOptions& o, const Dataset& data)
      : huber_delta_(o.huber_delta), shape_(data.sample_shape()) {
    if (data.id_fields() > 0) {
      PSLOG(WARN) << o.tag << "the data's " << data.id_fields()
                  << " categorical fields are not used: the model "
                  << "sees its " << data.feature_dim() << " numeric features only (--embedding-dim D, or a "
                  << "--model beginning 'embedding D', gives each field a row of a table: docs/sparse.md)";
    }
  }

  std::vector<size_t> shape() const override { return shape_; }
  void describe(ModelDescription*) const override {}
  void check_saved(const EmbeddingSetup&, const std::string&) const override {}
  void attach(Backend& backend, const Model& model, int, int, Evaluation& evaluation) override {
    if (model.loss() != Loss::kSoftmax) evaluation.set_target_loss(model.loss(), huber_delta_, backend);
  }
  void connect(RowSource*) override {}

  void begin_step(uint64_t, Prefetcher&, InputTimes*) override {}
  void take(uint64_t step, int, Prefetcher& reader, Batch* batch, InputTimes* times) override {
    const auto d0 = Clock::now();
    // The reader refills the queue when the exchange goes idle (Exchange::set_idle_hook).
    if (!reader.take(*batch)) throw Error("data ended before step " + std::to_string(step));
    times->data += Clock::now() - d0;
  }
  const float* input(const Batch& batch, Replica& replica, InputTimes*) override {
    return replica.input(batch.x.data(), batch.x.size());
  }
  float* input_grad() override { return nullptr; }
  void after_backward(uint64_t, const Batch&, bool, uint64_t, Prefetcher&, InputTimes*) override {}
  void skip() override {}

 private:
  const float huber_delta_;
  const std::vector<size_t> shape_;
};

}  // namespace

std::unique_ptr<TrainInput> make_train_input(const TrainInputOptions& o, const Dataset& train_data) {
  if (o.tables.dim > 0) return std::make_unique<EmbeddingRowsInput>(o, train_data);
  return std::make_unique<PlainInput>(o, train_data);
}

}  // namespace pstrain
