#include "ps/barrier_reports.h"

#include <cmath>
#include <sstream>

#include "shared/util/clock.h"
#include "shared/util/log.h"

namespace pstrain {
namespace {

// How often workers waiting at a barrier are told what it waits for (WAITING): a worker whose PS
// is reachable keeps waiting for a peer that is not, and only the worker cut off times out.
constexpr double kWaitingEverySeconds = 1;

}  // namespace

std::vector<std::string> BarrierReports::stall(Clock::time_point now, const std::string& dones,
                                               const Barrier* b, bool dense,
                                               const std::vector<int>& unregistered) {
  std::vector<std::string> lines;
  std::vector<int> missing;
  std::ostringstream os;
  os << "ps" << index_ << ": stall: ";
  if (!dones.empty()) {  // a worker's message lost on the way, or still on it
    lines.push_back(os.str() + dones);
    last_stall_ = now;
  }
  if (b != nullptr) {
    if (now - b->since < stall_after_) return lines;
    for (int i = 0; i < num_workers_; ++i) {
      if (!b->pushed[static_cast<size_t>(i)]) missing.push_back(i);
    }
    os << (dense ? "barrier" : "the tables' barrier (SPARSE_PUSH)") << " of step " << b->step
       << " has waited " << std::chrono::duration<double>(now - b->since).count() << " s for worker(s)";
  } else {
    missing = unregistered;
    if (missing.empty()) return lines;
    os << "still waiting for worker(s) to register:";
  }
  for (int w : missing) os << " " << w;
  lines.push_back(os.str());
  last_stall_ = now;
  return lines;
}

bool BarrierReports::waiting(Clock::time_point now, const Barrier& b, bool dense, Header* h) {
  const auto every = std::chrono::duration<double>(kWaitingEverySeconds);
  if (now - last_waiting_ < every || now - b.since < every) return false;
  std::string missing;
  for (int i = 0; i < num_workers_; ++i) {
    if (!b.pushed[static_cast<size_t>(i)]) missing += (missing.empty() ? "w" : ", w") + std::to_string(i);
  }
  *h = Header{};
  h->op = Op::kWaiting;
  h->step = b.step;
  h->message = std::string(dense ? "the push of " : "the sparse push of ") + missing + " for step " +
               std::to_string(b.step) + " (waited " +
               seconds_text(std::floor(std::chrono::duration<double>(now - b.since).count())) + " so far)";
  last_waiting_ = now;
  return true;
}

}  // namespace pstrain
