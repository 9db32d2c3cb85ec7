#include "worker/data/schema_dataset.h"

#include <cstdio>
#include <cstring>
#include <fstream>

#include "shared/util/error.h"
#include "worker/data/ctr_cache.h"
#include "worker/data/parquet_rows.h"
#include "worker/data/schema.h"

namespace pstrain {
namespace {

// The schema reader's cache: the CTR cache's layout with the schema's counts (PSSCH01).
constexpr char kMagic[8] = {'P', 'S', 'S', 'C', 'H', '0', '1', '\n'};
constexpr size_t kMaxLine = 16 << 20;  // a line past it is a bad line (and memory stays bounded)

// A Parquet file begins and ends with "PAR1" (its magic), whatever its name.
bool is_parquet_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[4] = {}, tail[4] = {};
  if (!in.read(head, 4) || !in.seekg(-4, std::ios::end) || !in.read(tail, 4)) return false;
  return std::memcmp(head, "PAR1", 4) == 0 && std::memcmp(tail, "PAR1", 4) == 0;
}

}  // namespace

std::string parquet_not_built(const std::string& path) {
  return path +
         " is a Parquet file, but this pstrain was built without Parquet (Apache Arrow): launch/setup.sh "
         "builds it in (it installs pyarrow, whose wheel ships Arrow's C++ library, into a venv), or "
         "configure with "
         "cmake -DPSTRAIN_PARQUET=ON -DPSTRAIN_ARROW_PYTHON=<a python with pyarrow >= 24> (docs/data.md, "
         "\"Parquet\")";
}

std::unique_ptr<Dataset> open_schema_dataset(const std::string& path, const FeatureSchema& schema,
                                             const std::string& cache_dir, bool skip_bad_lines,
                                             const LabelRange& labels_range) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(schema_string_id(schema.canonical())));
  CtrCacheLayout layout;
  layout.format = "CTR text read by " + schema.source;
  layout.magic = kMagic;
  layout.suffix = ".pstrain-schema-" + std::string(hash);
  layout.dense = schema.dense();
  layout.fields = schema.fields();
  layout.max_ids = kSchemaMaxIds;
  layout.max_line = kMaxLine;
  // The parser holds a reference to the schema: the copy lives as long as the open.
  auto kept = std::make_shared<FeatureSchema>(schema);
  if (is_parquet_file(path)) {
    if (!parquet_built()) throw UsageError(parquet_not_built(path));
    layout.format = "Parquet read by " + schema.source;
    return open_ctr_cache_rows(path, cache_dir, skip_bad_lines, labels_range, layout,
                               [kept, path] { return parquet_rows(path, *kept); });
  }
  return open_ctr_cache(path, cache_dir, skip_bad_lines, labels_range, layout,
                        [kept, path] { return std::make_unique<SchemaLineParser>(*kept, path); });
}

}  // namespace pstrain
