// A data set of one CTR text file (TSV or CSV, plain or gzip) read by a feature schema
// (--schema; docs/data.md, "Feature schema"), parsed once into the CTR cache
// (worker/data/ctr_cache.h) and read back by pread.
#pragma once

#include <memory>
#include <string>

#include "shared/config/feature_schema.h"
#include "worker/data/dataset.h"
#include "worker/data/records.h"

namespace pstrain {

// As a Dataset: the schema's numeric columns are the features (sample_shape() {dense()}), its
// categorical columns the id_fields(), labels 0 and 1 (labelled() false for a file without the
// label column). The cache file's name holds a hash of schema.canonical(), so another schema
// parses the file anew. Errors as open_ctr_cache's, a line's naming the field, the column and
// the value (worker/data/schema.h).
std::unique_ptr<Dataset> open_schema_dataset(const std::string& path, const FeatureSchema& schema,
                                             const std::string& cache_dir, bool skip_bad_lines,
                                             const LabelRange& labels_range);

}  // namespace pstrain
