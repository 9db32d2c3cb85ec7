// shared/util/run_main.h: the binaries' one error handler gives docs/errors.md's exit codes and
// log lines (the binaries' own tests check them end to end; these check every kind of failure).
#include <gtest/gtest.h>

#include <new>
#include <string>

#include "shared/util/error.h"
#include "shared/util/run_main.h"

namespace pstrain {
namespace {

// run_main's status and what it logged.
struct Outcome {
  int status;
  std::string log;
};

template <typename Body>
Outcome run(Body body) {
  testing::internal::CaptureStderr();
  const int status = run_main("pstrain-test", body);
  return {status, testing::internal::GetCapturedStderr()};
}

TEST(RunMainTest, ReturnsTheBodysStatusAndLogsNothing) {
  const Outcome o = run([] { return 3; });
  EXPECT_EQ(o.status, 3);
  EXPECT_EQ(o.log, "");
}

TEST(RunMainTest, UsageErrorExitsWithTwoPointingAtHelp) {
  const Outcome o = run([]() -> int { throw UsageError("--epochs: 'x' is not a number"); });
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.log.find(" E pstrain-test: --epochs: 'x' is not a number (see --help)\n"), std::string::npos)
      << o.log;
}

TEST(RunMainTest, ErrorExitsWithOne) {
  const Outcome o = run([]() -> int { throw Error("ps1 at host:5000 did not answer"); });
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.log.find(" E pstrain-test: ps1 at host:5000 did not answer\n"), std::string::npos) << o.log;
  EXPECT_EQ(o.log.find("see --help"), std::string::npos) << o.log;
}

TEST(RunMainTest, OtherExceptionsAreUnexpectedErrorsExitingWithOne) {
  const Outcome o = run([]() -> int { throw std::bad_alloc(); });
  EXPECT_EQ(o.status, 1);
  EXPECT_NE(o.log.find(" E pstrain-test: unexpected error: std::bad_alloc\n"), std::string::npos) << o.log;
}

}  // namespace
}  // namespace pstrain
