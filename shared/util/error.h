// Error policy (docs/errors.md): recoverable failures (bad flags, bad data, peer timeouts,
// malformed messages) are thrown as pstrain::Error and reach main(), which prints the message
// and exits non-zero. Broken invariants use PSTRAIN_CHECK, which prints both sides and aborts.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace pstrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A bad flag, value or config file: main() prints it and exits with status 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what) {}
};

[[noreturn]] void check_failed(const char* file, int line, const std::string& message);

}  // namespace pstrain

#define PSTRAIN_CHECK_OP(a, op, b)                                                     \
  do {                                                                                 \
    const auto& pstrain_a_ = (a);                                                      \
    const auto& pstrain_b_ = (b);                                                      \
    if (!(pstrain_a_ op pstrain_b_)) {                                                 \
      std::ostringstream pstrain_os_;                                                  \
      pstrain_os_ << "check failed: " #a " " #op " " #b " (" << pstrain_a_ << " vs "   \
                  << pstrain_b_ << ")";                                                \
      ::pstrain::check_failed(__FILE__, __LINE__, pstrain_os_.str());                  \
    }                                                                                  \
  } while (0)
#define PSTRAIN_CHECK_EQ(a, b) PSTRAIN_CHECK_OP(a, ==, b)
#define PSTRAIN_CHECK_LE(a, b) PSTRAIN_CHECK_OP(a, <=, b)
#define PSTRAIN_CHECK_LT(a, b) PSTRAIN_CHECK_OP(a, <, b)
#define PSTRAIN_CHECK(cond)                                                    \
  do {                                                                         \
    if (!(cond)) ::pstrain::check_failed(__FILE__, __LINE__, "check failed: " #cond); \
  } while (0)
