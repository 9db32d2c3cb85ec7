#include "worker/train/embedding_rows_input.h"

#include <utility>

#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/backend/replica.h"
#include "worker/data/dataset.h"
#include "worker/model/model.h"
#include "worker/model/model_file.h"
#include "worker/train/evaluation.h"

namespace pstrain {

EmbeddingInputOptions EmbeddingRowsInput::input_options(const EmbeddingSetup& tables, const Dataset& data) {
  if (data.id_fields() == 0) {
    throw UsageError("--embedding-dim: the training data has no categorical fields (Criteo data has 26)");
  }
  EmbeddingInputOptions e;
  e.dense = data.feature_dim();
  e.fields = data.id_fields();
  e.dim = tables.dim;
  e.per_field_tables = tables.per_field_tables;
  e.num_ps = tables.num_ps;
  e.pool = tables.pool;
  return e;
}

EmbeddingRowsInput::EmbeddingRowsInput(const TrainInputOptions& o, const Dataset& data)
    : o_(o),
      dense_(data.feature_dim()),
      fields_(data.id_fields()),
      ctr_(input_options(o.tables, data)),
      eval_ctr_(input_options(o.tables, data)) {
  const EmbeddingSetup& t = o.tables;
  PSLOG(INFO) << o.tag << "embeddings: " << fields_ << " categorical fields of dim " << t.dim << " in "
              << (t.per_field_tables ? std::to_string(fields_) + " tables" : std::string("one shared table"))
              << " on " << t.num_ps << " PS shard(s), " << embedding_pool_name(t.pool)
              << " pooling of a field's IDs; model input " << dense_ << " dense + " << fields_ << " x "
              << t.dim << " = " << ctr_.input_dim() << " floats";
}

void EmbeddingRowsInput::describe(ModelDescription* d) const {
  d->embeddings = o_.tables;
  d->embeddings.dense = dense_;
  d->embeddings.fields = fields_;
}

// --init-params of a CTR model: the PS shards start its tables from DIR/embeddings/ (docs/sparse.md,
// "Fine-tuning"), which must be the tables this job has.
void EmbeddingRowsInput::check_saved(const EmbeddingSetup& saved, const std::string& dir) const {
  const EmbeddingSetup& job = o_.tables;
  const std::string where = "--init-params " + dir + ": its tables (model.json) ";
  if (saved.dim == 0) throw UsageError(where + "are none: it is not a CTR model");
  if (saved.dim != job.dim) {
    throw UsageError(where + "have rows of " + std::to_string(saved.dim) + " floats, this job's " +
                     std::to_string(job.dim));
  }
  if (saved.per_field_tables != job.per_field_tables) {
    throw UsageError(where + "are " + (saved.per_field_tables ? "per-field" : "shared") + ", this job's " +
                     (job.per_field_tables ? "per-field" : "shared") + " (--embedding-tables)");
  }
  if (!saved.optimizer.empty() && saved.optimizer != job.optimizer) {  // (the PS checks each file's too)
    throw UsageError(where + "were trained with --embedding-optimizer " + saved.optimizer +
                     ", this job's is " + job.optimizer +
                     " (the rows' optimizer slots are kept: give the same)");
  }
  if (saved.pool != job.pool) {
    throw UsageError(where + "pool a field's IDs by their " + embedding_pool_name(saved.pool) +
                     ", this job's by their " + embedding_pool_name(job.pool) + " (--embedding-pool)");
  }
  PSLOG(INFO) << o_.tag << "the tables start as " << dir << "/embeddings/'s rows (the PS shards load them)";
}

void EmbeddingRowsInput::attach(Backend& backend, const Model&, int micro_batches, int max_batch,
                                Evaluation& evaluation) {
  backend_ = &backend;
  micro_batches_ = micro_batches;
  // A CTR model of one output (--loss bce) is evaluated as CTR models are: loss, accuracy and AUC.
  evaluation.set_ctr_input(&eval_ctr_, backend);
  const size_t floats =
      static_cast<size_t>(max_batch) * ctr_.input_dim();  // d loss / d input: the rows' gradients
  input_grad_ = backend.allocate(floats);
  if (!backend.host_accessible()) host_input_grad_ = backend.allocate_host(floats);
}

void EmbeddingRowsInput::connect(RowSource* rows) {
  if (rows == nullptr) throw UsageError("--embedding-dim: embedding tables need the PS");
  ctr_.set_source(rows);
  eval_ctr_.set_source(rows);
}

// Every micro-batch of the step at once: one pull of their rows.
void EmbeddingRowsInput::begin_step(uint64_t step, Prefetcher& reader, InputTimes* times) {
  const auto d0 = Clock::now();
  if (ctr_.requested()) {
    std::swap(step_batches_, next_batches_);  // taken, their rows asked for, at the end of the step before
  } else if (!take_step(reader, &step_batches_)) {
    throw Error("data ended before step " + std::to_string(step));
  }
  times->data += Clock::now() - d0;
  const auto r0 = Clock::now();
  if (!ctr_.requested()) request_rows(step_batches_, step);
  times->rows += Clock::now() - r0;
  first_ = 0;
}

void EmbeddingRowsInput::take(uint64_t, int j, Prefetcher&, Batch* batch, InputTimes* times) {
  const auto d0 = Clock::now();
  std::swap(*batch, step_batches_[static_cast<size_t>(j)]);
  times->data += Clock::now() - d0;
}

// The rows of this batch's IDs as they are at the step's version.
const float* EmbeddingRowsInput::input(const Batch& batch, Replica& replica, InputTimes* times) {
  const auto r0 = Clock::now();
  const size_t n = static_cast<size_t>(batch.size);
  const float* x = replica.input(ctr_.input(batch.x.data(), first_, n), n * ctr_.input_dim());
  times->rows += Clock::now() - r0;
  return x;
}

// The rows' gradients, after the dense ones (pushed during backward).
void EmbeddingRowsInput::after_backward(uint64_t step, const Batch& batch, bool last, uint64_t samples,
                                        Prefetcher& reader, InputTimes* times) {
  const auto p0 = Clock::now();
  const size_t n = static_cast<size_t>(batch.size);
  const float* dx = input_grad_.get();
  if (host_input_grad_ != nullptr) {
    backend_->download(host_input_grad_.get(), dx, n * ctr_.input_dim());
    dx = host_input_grad_.get();
  }
  ctr_.add_gradient(first_, n, dx);
  first_ += n;
  if (last) {  // one gradient per unique ID, summed over the step's micro-batches
    ctr_.push(step, samples);
    // The next step's batches, their rows asked for now (version step + 1): the shards
    // answer as soon as this step is applied, while this worker waits for its parameters.
    if (step + 1 < o_.total_steps && take_step(reader, &next_batches_)) request_rows(next_batches_, step + 1);
  }
  times->pushing += Clock::now() - p0;
}

void EmbeddingRowsInput::skip() {
  if (ctr_.requested()) ctr_.discard();
}

bool EmbeddingRowsInput::take_step(Prefetcher& reader, std::vector<Batch>* batches) const {
  batches->resize(static_cast<size_t>(micro_batches_));
  for (Batch& b : *batches) {
    if (!reader.take(b)) return false;
  }
  return true;
}

void EmbeddingRowsInput::request_rows(const std::vector<Batch>& batches, uint64_t version) {
  if (batches.size() == 1) {
    const IdLists& ids = batches[0].ids;
    return ctr_.request(ids.ids.data(), ids.counts.data(), static_cast<size_t>(batches[0].size), version);
  }
  step_ids_.ids.clear();
  step_ids_.counts.clear();
  size_t n = 0;
  for (const Batch& b : batches) {
    step_ids_.ids.insert(step_ids_.ids.end(), b.ids.ids.begin(), b.ids.ids.end());
    step_ids_.counts.insert(step_ids_.counts.end(), b.ids.counts.begin(), b.ids.counts.end());
    n += static_cast<size_t>(b.size);
  }
  ctr_.request(step_ids_.ids.data(), step_ids_.counts.data(), n, version);
}

}  // namespace pstrain
