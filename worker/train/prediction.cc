#include "worker/train/prediction.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "shared/util/log.h"
#include "worker/backend/loss_math.h"
#include "worker/backend/replica.h"
#include "worker/data/npy_format.h"
#include "worker/model/model.h"
#include "worker/report/auc.h"
#include "worker/report/progress.h"
#include "worker/report/target_metrics.h"
#include "worker/sparse/ctr_input.h"

namespace pstrain {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Softmax of one row of logits, in double for the sum; returns the first most probable class.
int softmax_row(const float* logits, int classes, float* out) {
  const float* top = std::max_element(logits, logits + classes);
  double sum = 0;
  for (int c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(logits[c]) - *top);
  for (int c = 0; c < classes; ++c) out[c] = static_cast<float>(std::exp(static_cast<double>(logits[c]) - *top) / sum);
  return static_cast<int>(top - logits);
}

// `column`: the header's prefix ("p" for probabilities, "y" for a regression's outputs).
std::string csv_text(const std::vector<float>& p, size_t records, int classes, const std::string& column = "p") {
  std::string text;
  for (int c = 0; c < classes; ++c) text += (c ? "," : "") + column + std::to_string(c);
  text += "\n";
  char number[32];
  for (size_t r = 0; r < records; ++r) {
    for (int c = 0; c < classes; ++c) {
      std::snprintf(number, sizeof number, "%.9g", static_cast<double>(p[r * static_cast<size_t>(classes) + c]));
      if (c) text += ",";
      text += number;
    }
    text += "\n";
  }
  return text;
}

// records x classes values to `output`: CSV (column names `column`<c>) or .npy by its name.
void write_predictions(const std::string& output, const std::vector<float>& values, size_t records, int classes,
                       const std::string& column) {
  if (ends_with(output, ".csv")) {
    write_file_atomically(output, csv_text(values, records, classes, column));
  } else {
    write_npy(output, {records, static_cast<size_t>(classes)}, values.data());
  }
}

// A model of float targets (--loss bce | mse | huber): its raw outputs (mse, huber) or their
// sigmoids (bce), and its figures against the input's targets.
PredictionSummary predict_targets(LoadedModel& loaded, const PredictOptions& o) {
  const Dataset& data = *loaded.data;
  const Loss loss = loaded.model->loss();
  PredictionSummary s;
  s.records = data.size();
  s.classes = loaded.model->classes();
  const size_t width = static_cast<size_t>(s.classes), batch = static_cast<size_t>(loaded.batch);
  std::vector<float> predictions(s.records * width), outputs(batch * width), targets(batch * width);
  std::vector<size_t> records(batch);
  std::vector<float> x(batch * data.feature_dim());
  std::vector<int32_t> y(batch);
  TargetMetrics metrics(loss, loaded.huber_delta, width);
  for (size_t start = 0; start < s.records; start += batch) {
    const size_t count = std::min(batch, s.records - start);
    std::iota(records.begin(), records.begin() + static_cast<long>(count), start);
    data.read(records.data(), count, x.data(), y.data());
    data.read_targets(records.data(), count, targets.data());
    const float* input = loaded.replica->input(x.data(), count * data.feature_dim());
    const float* out = loaded.model->logits(loaded.replica->params(), input, static_cast<int>(count));
    loaded.backend->download(outputs.data(), out, count * width);
    metrics.add(outputs.data(), targets.data(), count);
    for (size_t i = 0; i < count * width; ++i) {
      predictions[start * width + i] = loss == Loss::kBce ? stable_sigmoid(outputs[i]) : outputs[i];
    }
  }
  write_predictions(o.output, predictions, s.records, s.classes, loss == Loss::kBce ? "p" : "y");
  TrainSummary figures;
  metrics.fill(&figures);
  std::cout << "predictions: " << s.records << " records x " << s.classes
            << (loss == Loss::kBce ? " label probabilities" : " outputs") << " written to " << o.output
            << " (against the input's targets: test_loss=" << fixed(figures.test_loss, 4)
            << target_metrics_text(figures, true) << ")" << std::endl;
  return s;
}

}  // namespace

PredictionSummary predict_saved_model(const PredictOptions& o) {
  LoadedModel loaded = load_saved_model(o.model, o.data);
  CtrInput* const ctr = loaded.ctr.get();  // a CTR model: its input takes the records' rows
  if (loaded.model->loss() != Loss::kSoftmax && ctr == nullptr) return predict_targets(loaded, o);
  const bool sigmoid = loaded.model->loss() == Loss::kBce;  // a CTR model of one output: p(click)
  const Dataset& data = *loaded.data;
  const bool labelled = data.labelled();  // a CTR file without its label column: scores only
  PredictionSummary s;
  s.records = data.size();
  s.classes = loaded.model->classes();
  const size_t classes = static_cast<size_t>(s.classes), batch = static_cast<size_t>(loaded.batch);
  std::vector<float> probabilities(s.records * classes), logits(batch * classes);
  std::vector<size_t> records(batch);
  std::vector<float> x(batch * data.feature_dim());
  std::vector<int32_t> y(batch), labels;
  IdLists ids;
  for (size_t start = 0; start < s.records; start += batch) {
    const size_t count = std::min(batch, s.records - start);
    std::iota(records.begin(), records.begin() + static_cast<long>(count), start);
    data.read(records.data(), count, x.data(), y.data());
    const float* host = x.data();
    size_t floats = count * data.feature_dim();
    if (ctr != nullptr) {
      data.read_ids(records.data(), count, &ids);
      host = ctr->input(x.data(), ids.ids.data(), ids.counts.data(), count, 0);
      floats = count * ctr->input_dim();
    }
    const float* input = loaded.replica->input(host, floats);
    const float* out = loaded.model->logits(loaded.replica->params(), input, static_cast<int>(count));
    loaded.backend->download(logits.data(), out, count * classes);
    for (size_t r = 0; r < count; ++r) {
      const int top = sigmoid ? (logits[r] >= 0 ? 1 : 0)
                              : softmax_row(&logits[r * classes], s.classes, &probabilities[(start + r) * classes]);
      if (sigmoid) probabilities[start + r] = stable_sigmoid(logits[r]);
      if (!labelled) continue;
      if (top == y[r]) ++s.correct;
      if (ctr != nullptr) labels.push_back(y[r] == (sigmoid ? 1 : s.classes - 1) ? 1 : 0);
    }
  }
  write_predictions(o.output, probabilities, s.records, s.classes, "p");
  const double n = static_cast<double>(std::max<size_t>(s.records, 1));
  std::string auc_text;  // a CTR model: the AUC of p(click), the last class's probability
  const std::string what = sigmoid ? std::string("1 p(click)") : std::to_string(s.classes) + " classes";
  if (!labelled) {
    std::cout << "predictions: " << s.records << " records x " << what << " written to " << o.output
              << " (the input has no labels: no accuracy)" << std::endl;
    return s;
  }
  if (ctr != nullptr) {
    std::vector<float> clicks(s.records);
    for (size_t r = 0; r < s.records; ++r) clicks[r] = probabilities[r * classes + classes - 1];
    auc_text = ", auc " + fixed(exact_auc(clicks.data(), labels.data(), s.records), 4);
  }
  std::cout << "predictions: " << s.records << " records x " << what << " written to " << o.output
            << " (accuracy against the input's labels " << fixed(static_cast<double>(s.correct) / n, 4) << auc_text
            << ")" << std::endl;
  return s;
}

}  // namespace pstrain
