#include "worker/exchange/stats_exchange.h"

#include <algorithm>

#include "worker/collective/collective.h"

namespace pstrain {
namespace {

class CollectiveStats final : public StatsExchange {
 public:
  explicit CollectiveStats(Collective& collective) : collective_(collective) {}
  void combine(std::vector<double>& sums) override {
    for (size_t from = 0; from < sums.size(); from += kMaxScalars) {
      const size_t k = std::min(kMaxScalars, sums.size() - from);
      collective_.allreduce_sum(nullptr, 0, sums.data() + from, k);
    }
  }

 private:
  Collective& collective_;
};

}  // namespace

std::unique_ptr<StatsExchange> make_collective_stats(Collective& collective) {
  return std::make_unique<CollectiveStats>(collective);
}

}  // namespace pstrain
