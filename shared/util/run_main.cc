#include "shared/util/run_main.h"

#include <exception>

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

}  // namespace pstrain
