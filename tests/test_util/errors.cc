#include "test_util/errors.h"

#include <gtest/gtest.h>

#include "shared/util/error.h"

namespace pstrain::test {

std::string error_of(const std::function<void()>& f, bool* usage) {
  try {
    f();
  } catch (const UsageError& e) {
    if (usage != nullptr) *usage = true;
    return e.what();
  } catch (const Error& e) {
    if (usage != nullptr) *usage = false;
    return e.what();
  }
  return "(no pstrain::Error thrown)";
}

std::optional<JobOptions> parse_worker_flags(std::vector<const char*> args) {
  args.insert(args.begin(), {"prog", "--ps-hosts", "127.0.0.1:5000"});
  return parse_job_options(Role::kWorker, static_cast<int>(args.size()), args.data(), EnvMap{});
}

std::string usage_error_of(std::vector<const char*> args) {
  bool usage = false;
  const std::string message = error_of([&] { parse_worker_flags(args); }, &usage);
  EXPECT_TRUE(usage) << message;
  return message;
}

}  // namespace pstrain::test
