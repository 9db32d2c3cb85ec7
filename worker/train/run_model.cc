#include "worker/train/run_model.h"

#include "shared/util/log.h"
#include "worker/model/param_files.h"
#include "worker/model/saved_model.h"

namespace pstrain {

ModelDescription describe_run_model(const TrainOptions& o, int classes,
                                    const std::vector<size_t>& input_shape, const TrainInput& input) {
  ModelDescription d;
  d.classes = classes;
  d.loss = o.data.loss;
  d.huber_delta = o.huber_delta;
  d.input_shape = input_shape;
  input.describe(&d);
  d.spec = Network::spec_of(o.model, o.hidden, d.classes);
  d.given_as = "--model";
  if (o.model.empty()) {
    d.given_as = "--hidden ";
    for (size_t i = 0; i < o.hidden.size(); ++i) d.given_as += (i ? "," : "") + std::to_string(o.hidden[i]);
  }
  if (!o.init_params.empty()) {
    SavedModelQuery q;
    q.dir = o.init_params;
    q.model_given = o.model_given;
    q.model = o.model;
    q.hidden = o.hidden;
    q.sample_shape = d.input_shape;
    q.classes = d.classes;
    q.loss = d.loss;
    const SavedModel saved = resolve_saved_model(q);
    d.spec = saved.spec;
    input.check_saved(saved.embeddings, o.init_params);
    if (!o.model_given) d.given_as = "--init-params " + o.init_params + " (its model.json)";
  }
  d.training.optimizer = optimizer_kind_name(o.checkpoint.job.optimizer.kind);
  d.training.lr = o.checkpoint.job.optimizer.lr;
  return d;
}

void init_run_model(const TrainOptions& o, Model& model, float* host_params, bool chief,
                    const std::string& tag) {
  model.init(o.seed, host_params);  // the same on every worker: it depends on the seed alone
  if (o.init_params.empty()) return;
  load_params(o.init_params, model.layout(), host_params);
  load_model_state(model, o.init_params, chief, tag);
  if (chief) {
    PSLOG(INFO) << tag << "initial parameters from " << o.init_params << " ("
                << model.layout().tensors().size() << " variables)";
  }
}

void load_model_state(Model& model, const std::string& dir, bool chief, const std::string& tag) {
  const Layout& layout = model.network().state_layout();
  if (layout.tensors().empty()) return;
  std::vector<float> state(layout.total());
  load_params(dir, layout, state.data());
  model.set_state(state);
  if (chief)
    PSLOG(INFO) << tag << "running statistics from " << dir << " (" << layout.tensors().size()
                << " variables)";
}

void save_run_model(const std::string& dir, const Model& model, const float* host_params,
                    const TrainSummary& summary, ModelDescription* description) {
  save_params(dir, model.layout(), host_params);
  const Layout& state = model.network().state_layout();
  if (!state.tensors().empty()) save_params(dir, state, model.state().data());
  TrainingRecord& t = description->training;
  t.source = "--save-params";
  t.steps = summary.steps;
  t.evaluated = summary.test_accuracy > 0 || summary.test_loss > 0;
  t.test_loss = summary.test_loss;
  t.test_accuracy = summary.test_accuracy;
  write_model_json(dir, *description);
}

}  // namespace pstrain
