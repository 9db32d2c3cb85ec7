// What a call throws, for tests of error messages, and the worker's flags parsed as its main does.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "shared/config/options.h"

namespace pstrain::test {

// The message of the pstrain::Error `f` throws, "(no pstrain::Error thrown)" when it throws none;
// *usage (if given): whether it was a UsageError.
std::string error_of(const std::function<void()>& f, bool* usage = nullptr);

// A worker's command line `args` (after a placeholder --ps-hosts) parsed as pstrain-worker's main
// parses it, with an empty environment; throws as it does.
std::optional<JobOptions> parse_worker_flags(std::vector<const char*> args);

// The UsageError's message for `args` (a failed expectation if they give none, or another error).
std::string usage_error_of(std::vector<const char*> args);

}  // namespace pstrain::test

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)
