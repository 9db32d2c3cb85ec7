#include "worker/data/criteo_dataset.h"

#include "worker/data/criteo.h"
#include "worker/data/ctr_cache.h"

namespace pstrain {
namespace {

static_assert(kCriteoNoLabel == kNoLabel, "one value for a record without label");

constexpr char kMagic[8] = {'P', 'S', 'C', 'T', 'R', '0', '2', '\n'};

class CriteoParser final : public CtrLineParser {
 public:
  std::string parse(std::string_view line, uint64_t, CtrRecord& out, bool*) override {
    const std::string problem = parse_criteo_line(line, record_);
    if (!problem.empty()) return problem;
    out.label = record_.label;
    out.dense.assign(record_.dense, record_.dense + kCriteoDense);
    out.ids.assign(record_.ids, record_.ids + kCriteoCategorical);
    out.counts.assign(record_.counts, record_.counts + kCriteoCategorical);
    out.lists.swap(record_.lists);
    return "";
  }

 private:
  CriteoRecord record_;
};

}  // namespace

std::unique_ptr<Dataset> open_criteo_dataset(const std::string& path, const std::string& cache_dir,
                                             bool skip_bad_lines, const LabelRange& labels_range) {
  CtrCacheLayout layout;
  layout.format = "Criteo TSV";
  layout.magic = kMagic;
  layout.suffix = ".pstrain-criteo";
  layout.dense = kCriteoDense;
  layout.fields = kCriteoCategorical;
  layout.max_ids = kCriteoMaxIds;
  layout.max_line = kCriteoMaxLine;
  return open_ctr_cache(path, cache_dir, skip_bad_lines, labels_range, layout,
                        [] { return std::make_unique<CriteoParser>(); });
}

}  // namespace pstrain
