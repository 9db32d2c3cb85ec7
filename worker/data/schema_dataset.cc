#include "worker/data/schema_dataset.h"

#include <cstdio>

#include "worker/data/ctr_cache.h"
#include "worker/data/schema.h"

namespace pstrain {
namespace {

// The schema reader's cache: the CTR cache's layout with the schema's counts (PSSCH01).
constexpr char kMagic[8] = {'P', 'S', 'S', 'C', 'H', '0', '1', '\n'};
constexpr size_t kMaxLine = 16 << 20;  // a line past it is a bad line (and memory stays bounded)

}  // namespace

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
  return open_ctr_cache(path, cache_dir, skip_bad_lines, labels_range, layout,
                        [kept, path] { return std::make_unique<SchemaLineParser>(*kept, path); });
}

}  // namespace pstrain
