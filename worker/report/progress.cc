#include "worker/report/progress.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "shared/util/clock.h"
#include "shared/util/log.h"
#include "worker/report/metrics_sink.h"
#include "worker/report/target_metrics.h"

namespace pstrain {

constexpr double kMiB = 1024.0 * 1024.0;

std::string fixed(double value, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << value;
  return os.str();
}

void StepStats::add(const StepMetrics& m) {
  ++steps_;
  samples_ += m.samples;
  correct_ += m.correct;
  loss_ += m.loss_sum;
  stale_sum_ += m.stale_sum;
  stale_count_ += m.stale_count;
  stale_max_ = std::max(stale_max_, m.stale_max);
  lead_max_ = std::max(lead_max_, m.lead_max);
  dropped_ += m.dropped;
  if (!m.shards.empty()) shards_last_ = m.shards;
  if (m.times.total_us() == 0) return;  // the first step carries no times yet
  ++timed_steps_;
  times_ += m.times;
  slowest_us_ += m.slowest_us;
  if (m.slowest < slowest_count_.size()) ++slowest_count_[m.slowest];
}

void StepStats::reset() {
  StepStats next(static_cast<int>(slowest_count_.size()));
  next.shards_before_ = next.shards_last_ = shards_last_;
  *this = std::move(next);
}

ShardFigures StepStats::shard_delta(size_t s) const {
  const ShardFigures& last = shards_last_[s];
  if (s >= shards_before_.size()) return last;
  const ShardFigures& before = shards_before_[s];
  auto since = [](uint64_t now, uint64_t then) { return now >= then ? now - then : now; };
  return ShardFigures{since(last.apply_us, before.apply_us), since(last.bytes_in, before.bytes_in),
                      since(last.bytes_out, before.bytes_out)};
}

std::string StepStats::shards_text() const {
  if (shards_last_.empty() || steps_ == 0) return "";
  const double per = static_cast<double>(steps_);
  double apply_ms = -1, in = 0, out = 0;
  size_t slowest = 0;
  for (size_t s = 0; s < shards_last_.size(); ++s) {
    const ShardFigures d = shard_delta(s);
    if (d.apply_us / 1e3 / per > apply_ms) {
      apply_ms = d.apply_us / 1e3 / per;
      slowest = s;
    }
    in += d.bytes_in / per;
    out += d.bytes_out / per;
  }
  char part[160];
  std::snprintf(part, sizeof part, "; ps apply %.2f ms max (ps%zu), in %.2f MiB, out %.2f MiB per step", apply_ms,
                slowest, in / kMiB, out / kMiB);
  return part;
}

void StepStats::add_shards(nlohmann::ordered_json* record) const {
  if (shards_last_.empty() || steps_ == 0) return;
  const double per = static_cast<double>(steps_);
  nlohmann::ordered_json ps = nlohmann::ordered_json::object();
  for (size_t s = 0; s < shards_last_.size(); ++s) {
    const ShardFigures d = shard_delta(s);
    nlohmann::ordered_json& f = ps["ps" + std::to_string(s)];
    f["apply_ms"] = d.apply_us / 1e3 / per;
    f["in_mib"] = d.bytes_in / kMiB / per;
    f["out_mib"] = d.bytes_out / kMiB / per;
  }
  (*record)["ps"] = std::move(ps);
}

std::string StepStats::breakdown() const {
  if (timed_steps_ == 0) return "";
  const double per = 1e3 * static_cast<double>(timed_steps_) * static_cast<double>(slowest_count_.size());
  char line[240];
  const int n =
      std::snprintf(line, sizeof line, "step %.2f ms = data %.2f + compute %.2f + push %.2f + wait %.2f + pull %.2f",
                    times_.total_us() / per, times_.data_us / per, times_.compute_us / per, times_.push_us / per,
                    times_.wait_us / per, times_.pull_us / per);
  int used = n;
  if (times_.eval_us > 0 && used > 0 && static_cast<size_t>(used) < sizeof line) {
    used += std::snprintf(line + used, sizeof line - static_cast<size_t>(used), " + eval %.2f", times_.eval_us / per);
  }
  if (times_.ckpt_us > 0 && used > 0 && static_cast<size_t>(used) < sizeof line) {
    std::snprintf(line + used, sizeof line - static_cast<size_t>(used), " + ckpt %.2f", times_.ckpt_us / per);
  }
  return line;
}

std::string StepStats::consistency() const {
  std::string out;
  char part[120];
  if (stale_count_ > 0) {
    std::snprintf(part, sizeof part, "; staleness mean %.2f max %llu over %llu updates",
                  static_cast<double>(stale_sum_) / static_cast<double>(stale_count_),
                  static_cast<unsigned long long>(stale_max_), static_cast<unsigned long long>(stale_count_));
    out += part;
  }
  if (lead_max_ > 0) out += "; lead over the slowest worker max " + std::to_string(lead_max_);
  if (dropped_ > 0) out += "; " + std::to_string(dropped_) + " late pushes dropped";
  return out;
}

nlohmann::ordered_json StepStats::breakdown_record() const {
  nlohmann::ordered_json r = nlohmann::ordered_json::object();
  if (timed_steps_ == 0) return r;
  const double per = 1e3 * static_cast<double>(timed_steps_) * static_cast<double>(slowest_count_.size());
  r["step_ms"] = times_.total_us() / per;
  r["data_ms"] = times_.data_us / per;
  r["compute_ms"] = times_.compute_us / per;
  r["push_ms"] = times_.push_us / per;
  r["wait_ms"] = times_.wait_us / per;
  r["pull_ms"] = times_.pull_us / per;
  r["eval_ms"] = times_.eval_us / per;
  r["ckpt_ms"] = times_.ckpt_us / per;
  return r;
}

void StepStats::add_consistency(nlohmann::ordered_json* record) const {
  nlohmann::ordered_json& r = *record;
  if (stale_count_ > 0) {
    r["staleness_mean"] = static_cast<double>(stale_sum_) / static_cast<double>(stale_count_);
    r["staleness_max"] = stale_max_;
    r["staleness_updates"] = stale_count_;
  }
  if (lead_max_ > 0) r["lead_max"] = lead_max_;
  if (dropped_ > 0) r["late_pushes_dropped"] = dropped_;
}

std::string StepStats::straggler() const {
  const size_t workers = slowest_count_.size();
  if (workers < 2 || timed_steps_ == 0) return "";
  const auto top = std::max_element(slowest_count_.begin(), slowest_count_.end());
  const double share = static_cast<double>(*top) / static_cast<double>(timed_steps_);
  const double mean_busy_ms = times_.busy_us() / 1e3 / static_cast<double>(timed_steps_ * workers);
  const double slowest_busy_ms = slowest_us_ / 1e3 / static_cast<double>(timed_steps_);
  // Both a share and an absolute gap: on steps of 2 ms, scheduling noise alone puts one worker
  // 20% (0.4 ms) above the mean, and that costs the job nothing worth a warning.
  if (share < 0.75 || slowest_busy_ms < 1.1 * mean_busy_ms || slowest_busy_ms - mean_busy_ms < kStragglerGapMs) return "";
  char line[160];
  std::snprintf(line, sizeof line, "w%zu is the slowest in %.0f%% of steps (busy %.2f ms vs %.2f ms mean)",
                static_cast<size_t>(top - slowest_count_.begin()), 100 * share, slowest_busy_ms, mean_busy_ms);
  return line;
}

Progress::Progress(const ProgressOptions& o, uint64_t steps_per_epoch, uint64_t total_steps, MetricsSink* metrics)
    : o_(o),
      steps_per_epoch_(steps_per_epoch),
      total_steps_(total_steps),
      metrics_(metrics),
      interval_(o.num_workers),
      run_(o.num_workers) {
  start_ = interval_start_ = Clock::now();
}

void Progress::add(const StepMetrics& m) {
  interval_.add(m);
  run_.add(m);
}

void Progress::report(uint64_t step, uint64_t epoch, bool last) {
  if (reports_at(step, static_cast<uint64_t>(o_.log_every), steps_per_epoch_, last)) {
    const double secs = std::chrono::duration<double>(Clock::now() - interval_start_).count();
    PSLOG(INFO) << "epoch " << epoch + 1 << "/" << o_.epochs << " step " << step % steps_per_epoch_ + 1
                << "/" << steps_per_epoch_ << " (global " << step + 1 << ") loss " << fixed(interval_.mean_loss(), 4)
                << (o_.loss == Loss::kSoftmax ? " acc " + fixed(interval_.accuracy(), 4) : "") << " samples/s "
                << fixed(interval_.samples() / std::max(secs, 1e-9), 0) << " | measured "
                << fixed(1e3 * secs / static_cast<double>(interval_.steps()), 2) << " ms/step; "
                << interval_.breakdown() << interval_.consistency() << interval_.shards_text();
    const std::string slow = interval_.straggler();
    if (!slow.empty()) PSLOG(WARN) << "straggler: " << slow;
    if (metrics_ != nullptr) {
      nlohmann::ordered_json r;
      r["kind"] = "progress";
      r["step"] = step + 1;
      r["epoch"] = epoch + 1;
      r["epoch_step"] = step % steps_per_epoch_ + 1;
      r["loss"] = interval_.mean_loss();
      if (o_.loss == Loss::kSoftmax) r["accuracy"] = interval_.accuracy();
      r["samples_per_s"] = interval_.samples() / std::max(secs, 1e-9);
      r["ms_per_step"] = 1e3 * secs / static_cast<double>(interval_.steps());
      r["lr"] = scheduled_lr(o_.optimizer, step, total_steps_);  // the line's last step's
      r["breakdown"] = interval_.breakdown_record();
      interval_.add_consistency(&r);
      if (!slow.empty()) r["straggler"] = slow;
      interval_.add_shards(&r);
      metrics_->write(r);
    }
    interval_.reset();
    interval_start_ = Clock::now();
  }
}

void Progress::print_summary(const TrainSummary& s) const {
  PSLOG(INFO) << "summary: mode=" << mode_name(o_.mode) << " workers=" << o_.num_workers
              << (o_.mode != Mode::kAllreduce ? " ps=" + std::to_string(o_.num_ps) : "") << " steps=" << s.steps
              << " time_s=" << fixed(s.seconds, 1)
              << " samples_per_s=" << fixed(s.samples_per_second, 0)
              << " train_loss=" << fixed(s.train_loss, 4)
              << (s.loss == Loss::kSoftmax && s.train_accuracy_known ? " train_accuracy=" + fixed(s.train_accuracy, 4) : "")
              << " test_loss=" << fixed(s.test_loss, 4)
              << (s.loss == Loss::kSoftmax ? " test_accuracy=" + fixed(s.test_accuracy, 4) : "")
              << target_metrics_text(s, true)
              << (s.binary ? " test_auc=" + fixed(s.test_auc, 4) + " test_logloss=" + fixed(s.test_loss, 4) : "")
              << " | " << run_.breakdown() << run_.consistency();
  if (metrics_ == nullptr) return;
  nlohmann::ordered_json r;
  r["kind"] = "summary";
  r["mode"] = mode_name(o_.mode);
  r["workers"] = o_.num_workers;
  if (o_.mode != Mode::kAllreduce) r["ps"] = o_.num_ps;
  r["steps"] = s.steps;
  r["seconds"] = s.seconds;
  r["samples_per_s"] = s.samples_per_second;
  r["train_loss"] = s.train_loss;
  if (s.loss == Loss::kSoftmax && s.train_accuracy_known) r["train_accuracy"] = s.train_accuracy;
  r["test_loss"] = s.test_loss;
  if (s.loss == Loss::kSoftmax) r["test_accuracy"] = s.test_accuracy;
  add_target_metrics(s, &r);
  if (s.binary) r["test_auc"] = s.test_auc;
  r["stopped"] = s.stopped;
  r["breakdown"] = run_.breakdown_record();
  run_.add_consistency(&r);
  metrics_->write(r);
}

double Progress::seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

}  // namespace pstrain
