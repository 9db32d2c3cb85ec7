// Where the chief's metrics records go (docs/operations.md, "Metrics file" and "TensorBoard").
// A record is a JSON object with its "kind" (progress, epoch, summary) and its figures; the code
// that makes the figures (worker/report/progress.cc, worker/train/evaluation.cc) writes records and knows
// nothing of the formats: JSON Lines (worker/report/metrics_file.h), TensorBoard event files
// (worker/report/tensorboard.h).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <vector>

namespace pstrain {

class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  // Takes one record as the run goes; a sink that fails to write logs it and goes on, never
  // throws (a lost metric is no reason to lose the run).
  virtual void write(const nlohmann::ordered_json& record) = 0;
};

// Every sink added, each record to each in order; with none, write() does nothing.
class MetricsSinks final : public MetricsSink {
 public:
  void add(std::unique_ptr<MetricsSink> sink) { sinks_.push_back(std::move(sink)); }
  bool empty() const { return sinks_.empty(); }
  void write(const nlohmann::ordered_json& record) override;

 private:
  std::vector<std::unique_ptr<MetricsSink>> sinks_;
};

}  // namespace pstrain
