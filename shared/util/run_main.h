// The binaries' common main(): their error handling in one place, so that every binary logs and
// exits the same way for the same kind of failure (docs/errors.md, "Exit codes").
#pragma once

#include <functional>
#include <string>

namespace pstrain {

// Runs body and returns its status. A pstrain::UsageError escaping it is logged as
// "<program>: <message> (see --help)" and gives 2; a pstrain::Error "<program>: <message>" and 1;
// any other std::exception "<program>: unexpected error: <message>" and 1.
int run_main(const char* program, const std::function<int()>& body);

// From now on the process has `seconds` to end; if it has not, "<who>: <what> did not end within
// <seconds> s; exiting" is logged and the process exits with `status` at once (_Exit: no more
// destructors). For a teardown whose work is done but that a library may block forever: libzmq's
// context termination can hang after a socket monitor was used (libzmq issues 2330, 3575).
void end_within(double seconds, const std::string& who, const std::string& what, int status);

}  // namespace pstrain
