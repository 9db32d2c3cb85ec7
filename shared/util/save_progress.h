// A long save's progress lines (docs/operations.md, "Supervision"): the launcher keeps waiting
// for a process whose lines say ": saving " (a PS writing large tables or a large checkpoint at
// the job's end, or after SIGTERM), however long the save takes, where a fixed timeout would kill
// it and lose what it saves.
#pragma once

#include <cstdint>
#include <string>

#include "shared/util/clock.h"
#include "shared/util/file_util.h"

namespace pstrain {

// "512.0": bytes in MiB, one decimal.
std::string mib_text(uint64_t bytes);

// A save's bytes on their way to the file of the moment (to()), counted: a line "<what>: D of T
// MiB" when it starts (unless `quiet_start`: then first after 5 s) and every 5 s after, and
// done_text() for its last line. `what` says ": saving " ("ps0: saving embedding tables to DIR").
class SaveProgress final : public ByteSink {
 public:
  SaveProgress(std::string what, uint64_t total, bool quiet_start = false);
  void to(ByteSink* out) { out_ = out; }
  void append(const void* data, size_t n) override;
  // "1900.0 MiB in 12.34 s (154.0 MiB/s)": the bytes so far, the time since the start.
  std::string done_text() const;

 private:
  const std::string what_;
  const uint64_t total_;
  const Clock::time_point start_;
  ByteSink* out_ = nullptr;
  uint64_t done_ = 0;
  Clock::time_point next_;  // when the next line is due
};

}  // namespace pstrain
