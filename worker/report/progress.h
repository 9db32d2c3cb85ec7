// The chief's running view of the job: loss/accuracy of all workers and where their step time
// went, per progress interval and per epoch, and which worker (if any) keeps the others waiting;
// the progress lines and the summary line that print it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shared/train/optimizer.h"
#include "shared/util/clock.h"
#include "shared/util/modes.h"
#include "worker/exchange/step_metrics.h"

namespace pstrain {

class MetricsSink;

// One worker's run: what train() returns and the chief's summary line prints.
struct TrainSummary {
  uint64_t steps = 0;
  double seconds = 0;
  double samples_per_second = 0;  // global: all workers' samples
  bool stopped = false;  // ended early after a final checkpoint (SIGTERM)
  double train_loss = 0, train_accuracy = 0;  // over the last epoch (or the steps run), all workers
  double test_loss = 0, test_accuracy = 0;    // chief only
  bool binary = false;   // a CTR model (--embedding-dim): test_auc and test_logloss are reported too
  // false for a CTR model of one output (--loss bce): its training steps count no right answers,
  // so train_accuracy is not reported (its test_accuracy is: the output >= 0 predicting a click)
  bool train_accuracy_known = true;
  double test_auc = 0;   // exact ROC AUC of p(label 1) on the test set (NaN: one label only)
  // --loss other than softmax (worker/report/target_metrics.h): no accuracies, but these test figures
  Loss loss = Loss::kSoftmax;
  double test_rmse = 0, test_mae = 0, test_r2 = 0;       // mse, huber
  double test_label_accuracy = 0, test_exact_match = 0;  // bce
};

// `value` with `digits` decimals, as the progress lines print their figures.
std::string fixed(double value, int digits);
// Whether the chief's progress record (and each worker's own figures) is written after `step`
// (from 0): every `log_every` steps, at each epoch's end and at the last step.
inline bool reports_at(uint64_t step, uint64_t log_every, uint64_t steps_per_epoch, bool last) {
  return (step + 1) % log_every == 0 || (step + 1) % steps_per_epoch == 0 || last;
}

// The least a straggler's busy time per step exceeds the mean by before it is named.
constexpr double kStragglerGapMs = 1.0;

class StepStats {  // sums over a run of global steps
 public:
  explicit StepStats(int num_workers) : slowest_count_(static_cast<size_t>(num_workers), 0) {}
  void add(const StepMetrics& m);
  void reset();

  uint64_t steps() const { return steps_; }
  uint64_t samples() const { return samples_; }
  double mean_loss() const { return samples_ ? loss_ / samples_ : 0; }
  double accuracy() const { return samples_ ? static_cast<double>(correct_) / samples_ : 0; }
  // "step 2.10 ms = data 0.01 + compute 1.20 + push 0.05 + wait 0.70 + pull 0.14": per-step means
  // over all workers (the parts are measured back to back, so they add up to the step time), with
  // " + eval E" when the test set was evaluated within the interval (by the chief alone, or by
  // every worker on its share; whoever finished first waits at the next barrier, in `wait`).
  std::string breakdown() const;
  // "w1 is the slowest in 95% of steps (busy 3.3 ms vs 1.9 ms mean)" when one worker is the slowest
  // in at least 3/4 of the steps, at least 10% busier than the mean and at least kStragglerGapMs
  // more; "" otherwise.
  std::string straggler() const;
  // "; staleness mean 1.20 max 3 over 1200 updates" (async, ssp), "; ssp lead max 2",
  // "; 5 late pushes dropped" (backup workers); "" in plain sync.
  std::string consistency() const;
  // The same figures for the metrics file: the per-step means in ms ("step_ms", "data_ms", ...;
  // empty before any timed step), and the consistency counters, where there are any, added to
  // *record.
  nlohmann::ordered_json breakdown_record() const;
  void add_consistency(nlohmann::ordered_json* record) const;
  // The PS shards' figures per step of this run of steps (their cumulative counters at its last
  // step less those at the previous run's last, for one that reset() followed; a counter that went
  // back, a restarted PS's, counts from 0): "; ps apply 0.12 ms max (ps1), in 1.50 MiB, out 1.50
  // MiB per step" (in and out summed over the shards) and, for the metrics file, {"ps0":
  // {"apply_ms", "in_mib", "out_mib"}, ...} added to *record as "ps"; neither without a PS.
  std::string shards_text() const;
  void add_shards(nlohmann::ordered_json* record) const;

 private:
  uint64_t steps_ = 0, timed_steps_ = 0, samples_ = 0, correct_ = 0;
  double loss_ = 0;
  StepTimes times_;              // summed over workers and steps
  uint64_t slowest_us_ = 0;      // summed busy time of each step's slowest worker
  uint64_t stale_sum_ = 0, stale_count_ = 0, stale_max_ = 0, lead_max_ = 0, dropped_ = 0;
  std::vector<uint64_t> slowest_count_;
  std::vector<ShardFigures> shards_before_, shards_last_;  // cumulative: at the start, at the last step
  ShardFigures shard_delta(size_t s) const;
};

// What the progress lines need of the job (filled from the job's flags in main:
// worker/options_from_job.h).
struct ProgressOptions {
  Mode mode = Mode::kSync;  // named in the summary line
  int num_workers = 1;      // N
  int num_ps = 1;           // S (named in the summary line but in allreduce)
  int epochs = 10;          // --epochs
  int log_every = 100;      // --log-every: a progress line every this many steps
  OptimizerOptions optimizer;  // its learning-rate schedule, for the metrics records' "lr"
  Loss loss = Loss::kSoftmax;  // --loss: other than softmax, the lines show no accuracy
};

// A worker's figures of the progress interval and of the whole run, from every step's results;
// the chief prints them: a progress line every --log-every steps, at each epoch's end and after
// the last step, and the summary line at the end.
class Progress {
 public:
  // Starts the run's clock and the first interval's. `metrics` (may be null: none) gets a record
  // of every progress line and of the summary (worker/report/metrics_sink.h).
  // total_steps: the job's, for the learning rate's schedule.
  Progress(const ProgressOptions& o, uint64_t steps_per_epoch, uint64_t total_steps, MetricsSink* metrics = nullptr);

  void add(const StepMetrics& m);
  // The chief after `step` of epoch `epoch` (both from 0; `last`: the job's last step): the
  // progress line when one is due, and a warning naming a straggler.
  void report(uint64_t step, uint64_t epoch, bool last);
  // The chief at the end: "summary: mode=.. workers=.. steps=.. time_s=.. ... | breakdown".
  void print_summary(const TrainSummary& summary) const;

  double seconds() const;  // since the run started
  const StepStats& run() const { return run_; }

 private:
  const ProgressOptions o_;
  const uint64_t steps_per_epoch_;
  const uint64_t total_steps_;
  MetricsSink* metrics_;
  Clock::time_point start_, interval_start_;
  StepStats interval_, run_;
};

}  // namespace pstrain
