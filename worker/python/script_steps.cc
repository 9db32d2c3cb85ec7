#include "worker/python/script_steps.h"

#include <algorithm>

#include "shared/util/log.h"
#include "worker/options_from_job.h"
#include "worker/report/metrics_file.h"
#include "worker/report/tensorboard.h"
#include "worker/train/stop_request.h"

namespace pstrain {

ScriptSteps::ScriptSteps(const JobOptions& o) : t_(train_options(o)), chief_(o.index == 0) {
  model_.script = true;
  model_.given_as = "a script's model (pstrain.Worker.start's variables)";
  model_.training.optimizer = optimizer_kind_name(t_.checkpoint.job.optimizer.kind);
  model_.training.lr = t_.checkpoint.job.optimizer.lr;
  if (o.embedding_dim > 0) {
    model_.embeddings = embedding_setup(o);
    model_.embeddings.dense = 0;  // the script's own features are not the tables' business
  }
  if (!chief_) return;
  if (!o.checkpoint_dir.empty()) {
    checkpoint_lock_ = claim_checkpoint_dir(o);
    stop_requested_ = take_sigterm_as_stop_request();
  }
  if (!t_.metrics_file.empty()) {
    metrics_.add(std::make_unique<MetricsFile>(t_.metrics_file, "--metrics-file"));
    PSLOG(INFO) << "w0: metrics to " << t_.metrics_file;
  }
  if (!t_.tensorboard_dir.empty()) metrics_.add(open_tensorboard(chief_run_dir(t_.tensorboard_dir), "--tensorboard-dir"));
}

void ScriptSteps::started(const Layout& variables, uint64_t total_steps, uint64_t steps_per_epoch,
                          uint64_t first_step) {
  total_steps_ = total_steps;
  const uint64_t epochs = static_cast<uint64_t>(std::max(t_.epochs, 1));
  steps_per_epoch_ = std::max<uint64_t>(steps_per_epoch > 0 ? steps_per_epoch : (total_steps + epochs - 1) / epochs, 1);
  layout_ = variables;
  model_.variables = variables;
  checkpoints_ = std::make_unique<ChiefCheckpoints>(t_.checkpoint, chief_, t_.checkpoint_shards, layout_, model_,
                                                    total_steps, stop_requested_);
  if (checkpoints_->enabled() && t_.checkpoint.resume && first_step > 0) checkpoints_->check_resumed(first_step);
  if (chief_) progress_ = std::make_unique<Progress>(t_.progress, steps_per_epoch_, total_steps, &metrics_);
}

void ScriptSteps::tables_read(size_t fields, EmbeddingPool pool) {
  EmbeddingSetup& e = model_.embeddings;
  if (e.dim == 0) return;
  e.fields = fields;
  e.pool = pool;
  // Per-field tables: the PS shards made the job's (Criteo's 26, or a --schema's); the script
  // reads the first `fields`.
  if (e.per_field_tables && e.tables.size() > fields) e.tables.resize(fields);
  if (checkpoints_) checkpoints_->set_embeddings(e);
}

void ScriptSteps::plan(uint64_t step, PushInfo* info) {
  checkpoints_->plan(step, &info->checkpoint, &info->stop);
}

void ScriptSteps::finished(uint64_t step, const PushInfo& info, const StepMetrics& m, StepTimes* times) {
  times->ckpt_us += static_cast<uint64_t>(1e6 * checkpoints_->step_done(info.checkpoint, m.durable));
  if (!progress_) return;
  progress_->add(m);
  progress_->report(step, step / steps_per_epoch_, step + 1 == total_steps_ || m.stop);
}

}  // namespace pstrain
