#include "shared/util/save_progress.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"

namespace pstrain {
namespace {

constexpr auto kEvery = std::chrono::seconds(5);

std::string fixed_text(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

}  // namespace

std::string mib_text(uint64_t bytes) { return fixed_text(static_cast<double>(bytes) / (1 << 20), 1); }

SaveProgress::SaveProgress(std::string what, uint64_t total, bool quiet_start)
    : what_(std::move(what)),
      total_(total),
      start_(Clock::now()),
      next_(quiet_start ? start_ + kEvery : start_) {}

void SaveProgress::append(const void* data, size_t n) {
  PSTRAIN_CHECK(out_ != nullptr);
  out_->append(data, n);
  done_ += n;
  const auto now = Clock::now();
  if (now < next_) return;
  PSLOG(INFO) << what_ << ": " << mib_text(done_) << " of " << mib_text(total_) << " MiB";
  next_ = now + kEvery;
}

std::string SaveProgress::done_text() const {
  const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
  return mib_text(done_) + " MiB in " + fixed_text(secs, 2) + " s (" +
         mib_text(static_cast<uint64_t>(static_cast<double>(done_) / std::max(secs, 1e-6))) + " MiB/s)";
}

}  // namespace pstrain
