// Parquet files read by a feature schema (--schema; docs/data.md, "Parquet"): the schema's columns,
// by name, through Apache Arrow's C++ library (pyarrow's wheel: cmake/pstrain_arrow.cmake), as
// rows of the CTR cache, so a Parquet file is parsed once into the same cache as the same data
// in a CSV file, byte for byte, and everything downstream is the same.
#pragma once

#include <memory>
#include <string>

#include "shared/config/feature_schema.h"
#include "worker/data/ctr_cache.h"

namespace pstrain {

// Whether this build reads Parquet (PSTRAIN_PARQUET found pyarrow's Arrow).
bool parquet_built();

// The rows of the Parquet file at `path`. Each of the schema's columns must be there (by name,
// any order; other columns are not read) but the label (absent: a file to --predict), of a type
// that maps (integers of any width, float, double, bool for the label; string or binary,
// dictionary-encoded or not; lists of them for categorical columns), else pstrain::Error naming
// the file, the column and its type. Values read as the text reader reads the same text: a
// null numeric value is 0, a null (or "") categorical one the missing ID, a null label or list
// element is a bad row ("<path>: row N: column "c" ..."). Without Arrow built in,
// pstrain::UsageError naming how to build it.
std::unique_ptr<CtrRows> parquet_rows(const std::string& path, const FeatureSchema& schema);

// The message for a Parquet file in a build without Parquet: how to enable it.
std::string parquet_not_built(const std::string& path);

}  // namespace pstrain
