// Line-oriented logging to stderr. Each line is written with one write(2), so lines of
// concurrent threads and processes do not interleave. Usage: PSLOG(INFO) << "x=" << x;
#pragma once

#include <sstream>
#include <string>

namespace pstrain {

enum class LogLevel { DEBUG = 0, INFO = 1, WARN = 2, ERROR = 3 };

// Lines below this level are dropped. Default INFO; PSTRAIN_LOG_LEVEL=debug|info|warn|error.
void set_log_level(LogLevel level);
LogLevel log_level();
void log_line(LogLevel level, const std::string& text);

// A duration in messages as the flags give it: "3 s", "0.5 s" (not std::to_string's "3.000000").
std::string seconds_text(double seconds);

class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine() { log_line(level_, os_.str()); }
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  std::ostringstream& stream() { return os_; }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

// Lets PSLOG be a conditional expression: `&` binds looser than `<<`.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace pstrain

// Safe inside an unbraced if/else: the whole statement is one expression.
#define PSLOG(level)                                                \
  (::pstrain::LogLevel::level < ::pstrain::log_level())            \
      ? (void)0                                                     \
      : ::pstrain::LogVoidify() & ::pstrain::LogLine(::pstrain::LogLevel::level).stream()
