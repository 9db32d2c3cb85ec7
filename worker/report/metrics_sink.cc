#include "worker/report/metrics_sink.h"

#include <nlohmann/json.hpp>

namespace pstrain {

void MetricsSinks::write(const nlohmann::ordered_json& record) {
  for (const std::unique_ptr<MetricsSink>& sink : sinks_) sink->write(record);
}

}  // namespace pstrain
