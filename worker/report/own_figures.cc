#include "worker/report/own_figures.h"

#include <nlohmann/json.hpp>

#include "worker/report/metrics_sink.h"
#include "worker/report/tensorboard.h"

namespace pstrain {

OwnStepFigures::OwnStepFigures(const std::string& tensorboard_dir, int index, int log_every,
                               uint64_t steps_per_epoch)
    : sink_(open_tensorboard(worker_run_dir(tensorboard_dir, index), "--tensorboard-dir")),
      log_every_(static_cast<uint64_t>(log_every)),
      steps_per_epoch_(steps_per_epoch) {}

OwnStepFigures::~OwnStepFigures() = default;

void OwnStepFigures::add(uint64_t step, const StepTimes& times, uint64_t samples, double loss_sum,
                         bool last) {
  StepMetrics m;
  m.times = times;
  m.samples = samples;
  m.loss_sum = loss_sum;
  interval_.add(m);
  if (!reports_at(step, log_every_, steps_per_epoch_, last)) return;
  nlohmann::ordered_json r;
  r["kind"] = "progress";
  r["step"] = step + 1;
  if (interval_.samples() > 0) r["loss"] = interval_.mean_loss();  // "train/loss", as the chief's
  r["breakdown"] = interval_.breakdown_record();
  sink_->write(r);
  interval_.reset();
}

}  // namespace pstrain
