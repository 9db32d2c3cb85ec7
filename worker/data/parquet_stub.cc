// A build without Parquet (cmake/pstrain_arrow.cmake found no pyarrow): a Parquet file is a
// usage error saying how to build it in.
#include "shared/util/error.h"
#include "worker/data/parquet_rows.h"

namespace pstrain {

bool parquet_built() { return false; }

std::unique_ptr<CtrRows> parquet_rows(const std::string& path, const FeatureSchema&) {
  throw UsageError(parquet_not_built(path));
}

}  // namespace pstrain
