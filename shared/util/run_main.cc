#include "shared/util/run_main.h"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <thread>

#include "shared/util/error.h"
#include "shared/util/log.h"

namespace pstrain {

int run_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    PSLOG(ERROR) << program << ": " << e.what() << " (see --help)";
    return 2;
  } catch (const Error& e) {
    PSLOG(ERROR) << program << ": " << e.what();
    return 1;
  } catch (const std::exception& e) {
    PSLOG(ERROR) << program << ": unexpected error: " << e.what();
    return 1;
  }
}

void end_within(double seconds, const std::string& who, const std::string& what, int status) {
  std::thread([=] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // a deadline, not a wait for anything
    PSLOG(WARN) << who << ": " << what << " did not end within " << seconds << " s; exiting";
    std::_Exit(status);
  }).detach();
}

}  // namespace pstrain
