// Where the checkout and the build's binaries are. The paths are compiled into one translation
// unit (build_paths.cc, the only test source given them as definitions: tests/CMakeLists.txt), so
// the other test sources' command lines and preprocessed text hold no absolute path and ccache
// reuses their objects in a clone at another path (tests/run.sh's builds of a clean clone).
#pragma once

#include <string>

namespace pstrain::test::build_paths {

extern const char* const kSourceDir;  // the checkout
extern const char* const kPsBin;
extern const char* const kWorkerBin;
extern const char* const kExportBin;
extern const char* const kKeygenBin;
extern const char* const kLaunchSh;  // launch/launch.sh
extern const char* const kBenchDir;  // the directory of bench/'s binaries
extern const char* const kPython;    // the Python interpreter CMake found

}  // namespace pstrain::test::build_paths

// The names the tests use, each a std::string.
#define PSTRAIN_SOURCE_DIR std::string(::pstrain::test::build_paths::kSourceDir)
#define PSTRAIN_PS_BIN std::string(::pstrain::test::build_paths::kPsBin)
#define PSTRAIN_WORKER_BIN std::string(::pstrain::test::build_paths::kWorkerBin)
#define PSTRAIN_EXPORT_BIN std::string(::pstrain::test::build_paths::kExportBin)
#define PSTRAIN_KEYGEN_BIN std::string(::pstrain::test::build_paths::kKeygenBin)
#define PSTRAIN_LAUNCH_SH std::string(::pstrain::test::build_paths::kLaunchSh)
#define PSTRAIN_BENCH_DIR std::string(::pstrain::test::build_paths::kBenchDir)
#define PSTRAIN_PYTHON std::string(::pstrain::test::build_paths::kPython)
