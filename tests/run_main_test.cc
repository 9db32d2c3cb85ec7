// shared/util/run_main.h: the binaries' one error handler gives docs/errors.md's exit codes and
// log lines (the binaries' own tests check them end to end; these check every kind of failure).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
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

// end_within: a process whose teardown blocks (here: forever in pause()) ends at the deadline
// with the given status, naming what did not end. In a child, which the test reaps; not a unit
// suite (a thread and a fork).
TEST(EndWithinTest, AProcessThatDoesNotEndInTimeExitsWithTheStatusNamingWhy) {
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::dup2(out[1], STDERR_FILENO);
    pstrain::end_within(0.2, "ps3", "ZeroMQ's teardown", 7);
    for (;;) ::pause();  // a teardown that never returns
  }
  ::close(out[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string log;
  char buf[256];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) log.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 7);
  EXPECT_GE(seconds, 0.2);
  EXPECT_LT(seconds, 10);
  EXPECT_NE(log.find("ps3: ZeroMQ's teardown did not end within 0.2 s; exiting"), std::string::npos) << log;
}
