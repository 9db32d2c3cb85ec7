#include "ps/stats_service.h"

#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace pstrain {

bool StatsService::stats(const Message& msg, const Header& h, int worker, std::string* error) {
  if (options_.index != 0) return (*error = "STATS goes to ps0 only", false);
  if (options_.mode != Mode::kSync) return (*error = "STATS: batch-norm statistics are combined in sync mode only", false);
  if (h.length == 0 || h.length % 2 != 0) {
    return (*error = "STATS payload of " + std::to_string(h.length) + " words is not one or more doubles", false);
  }
  if (h.length / 2 > StatsCombiner::kMaxValues) {  // before anything is copied
    return (*error = "STATS of " + std::to_string(h.length / 2) + " values (1 to " +
                     std::to_string(StatsCombiner::kMaxValues) + ")", false);
  }
  // A replacement worker redoes its step from its first call, which the others have passed: the
  // job would wait out --timeout. Refused at once, naming the way out.
  if (options_.allow_rejoin) {
    return (*error = "STATS: batch norm's global statistics do not survive a replaced worker (--allow-rejoin, "
                     "launch.sh --max-restarts): give the workers --batchnorm-stats local, or no --max-restarts", false);
  }
  std::vector<double> values(h.length / 2);
  std::memcpy(values.data(), msg.frames[1].data(), values.size() * sizeof(double));
  std::optional<StatsCombiner::Complete> complete;
  *error = stats_.add(worker, msg.route, h.request_id, h.step, h.offset, std::move(values), &complete);
  if (!error->empty()) return false;
  if (!complete) return true;
  // Every worker's answer shares one buffer: a call's sums (kMaxValues doubles at most, checked
  // above) are held once, whatever the number of workers.
  const auto sums = std::make_shared<const std::vector<double>>(std::move(complete->sums));
  const size_t bytes = sums->size() * sizeof(double);
  for (const auto& [route, request_id] : complete->askers) {
    Header sum;
    sum.op = Op::kStatsSum;
    sum.request_id = request_id;
    sum.step = h.step;
    sum.offset = h.offset;
    sum.length = bytes / 4;
    Frame payload(sums, sums->data(), bytes);
    replier_.reply(route, sum, &payload);
  }
  return true;
}

}  // namespace pstrain
