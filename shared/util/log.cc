#include "shared/util/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "shared/util/error.h"

namespace pstrain {
namespace {

LogLevel level_from_env() {
  const char* env = std::getenv("PSTRAIN_LOG_LEVEL");
  if (env == nullptr) return LogLevel::INFO;
  if (std::strcmp(env, "debug") == 0) return LogLevel::DEBUG;
  if (std::strcmp(env, "warn") == 0) return LogLevel::WARN;
  if (std::strcmp(env, "error") == 0) return LogLevel::ERROR;
  return LogLevel::INFO;
}

std::atomic<LogLevel>& current_level() {
  static std::atomic<LogLevel> level{level_from_env()};
  return level;
}

const char* level_tag(LogLevel level) {
  switch (level) {
    case LogLevel::DEBUG: return "D";
    case LogLevel::INFO: return "I";
    case LogLevel::WARN: return "W";
    case LogLevel::ERROR: return "E";
  }
  return "?";
}

}  // namespace

std::string seconds_text(double seconds) {
  std::ostringstream os;
  os << seconds << " s";
  return os.str();
}

void set_log_level(LogLevel level) { current_level().store(level); }
LogLevel log_level() { return current_level().load(); }

void log_line(LogLevel level, const std::string& text) {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t secs = system_clock::to_time_t(now);
  const int millis = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char prefix[32];
  std::snprintf(prefix, sizeof prefix, "%02d:%02d:%02d.%03d %s ", tm.tm_hour, tm.tm_min, tm.tm_sec,
                millis, level_tag(level));
  std::string line = prefix + text + "\n";
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void check_failed(const char* file, int line, const std::string& message) {
  log_line(LogLevel::ERROR, std::string(file) + ":" + std::to_string(line) + ": " + message);
  std::abort();
}

}  // namespace pstrain
