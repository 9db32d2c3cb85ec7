// The binaries' common main(): their error handling in one place, so that every binary logs and
// exits the same way for the same kind of failure (docs/errors.md, "Exit codes").
#pragma once

#include <functional>

namespace pstrain {

// Runs body and returns its status. A pstrain::UsageError escaping it is logged as
// "<program>: <message> (see --help)" and gives 2; a pstrain::Error "<program>: <message>" and 1;
// any other std::exception "<program>: unexpected error: <message>" and 1.
int run_main(const char* program, const std::function<int()>& body);

}  // namespace pstrain
