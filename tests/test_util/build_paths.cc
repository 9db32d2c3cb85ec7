#include "test_util/build_paths.h"

namespace pstrain::test::build_paths {

// PSTRAIN_PATH_* are this file's own compile definitions (tests/CMakeLists.txt).
const char* const kSourceDir = PSTRAIN_PATH_SOURCE_DIR;
const char* const kPsBin = PSTRAIN_PATH_PS_BIN;
const char* const kWorkerBin = PSTRAIN_PATH_WORKER_BIN;
const char* const kExportBin = PSTRAIN_PATH_EXPORT_BIN;
const char* const kKeygenBin = PSTRAIN_PATH_KEYGEN_BIN;
const char* const kLaunchSh = PSTRAIN_PATH_LAUNCH_SH;
const char* const kBenchDir = PSTRAIN_PATH_BENCH_DIR;
const char* const kPython = PSTRAIN_PATH_PYTHON;

}  // namespace pstrain::test::build_paths
