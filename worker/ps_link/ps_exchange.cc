#include "worker/ps_link/ps_exchange.h"

#include <algorithm>
#include <iterator>

#include "shared/checkpoint/checkpoint_store.h"
#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"
#include "worker/ps_link/channel.h"
#include "worker/ps_link/dense_client.h"
#include "worker/ps_link/row_client.h"
#include "worker/ps_link/stats_client.h"

namespace pstrain {
namespace {


// Batch norm's global statistics over ps0 (sync): the calls of a step numbered from 0, as every
// worker makes them in the same order.
class PsStats final : public StatsExchange {
 public:
  explicit PsStats(PsChannel& channel) : client_(channel) {}
  void at_step(uint64_t step) {
    if (step != step_) step_ = step, call_ = 0;
  }
  void combine(std::vector<double>& sums) override { client_.combine(step_, call_++, sums); }

 private:
  StatsClient client_;
  uint64_t step_ = 0, call_ = 0;
};

class PsExchange final : public Exchange {
 public:
  PsExchange(const ExchangeOptions& o, uint64_t total, Endpoint& servers, Replica& replica)
      : o_(o), channel_(o.client, total, servers), rows_(channel_), replica_(replica) {}

  uint64_t start(float* host_params, uint64_t total_steps) override {
    const uint64_t first = channel_.hello(total_steps);
    client_ = std::make_unique<DenseClient>(channel_, first);
    // One PS on this host: backward computes the gradient in the segment the PS reads it from.
    // (On a GPU the pinned staging buffer stays: copies into pageable memory are slower.)
    if (!replica_.on_device()) {
      if (float* area = client_->gradient_area()) replica_.place_host_grad(area);
    }
    // The chief's initial values are a function of the seed: a replaced chief sends them again
    // and the PS drops them as a replacement's repeat if it has them already.
    if (o_.index == 0 && first == 0) client_->init(host_params);
    client_->pull(first, host_params);
    stats_.at_step(first);
    // In plain sync the PS keeps its values in an area it writes only while every worker waits
    // for PARAMS: forward and backward read the parameters there, and a PULL copies nothing.
    const float* area = client_->params_area();
    if (area != nullptr && !replica_.on_device()) {
      replica_.compute_from(area);
      PSLOG(INFO) << "w" << o_.index << ": computing from ps0's parameter area (plain sync: no copy per step)";
    }
    PSLOG(INFO) << "w" << o_.index << ": registered with " << o_.client.num_ps << " PS shard(s) in "
                << client_->num_chunks() << " chunk(s)"
                << (first > 0 ? "; the first step is " + std::to_string(first) + " (resumed, or replacing a worker)" : "");
    return first;
  }

  void gradient_ready(uint64_t step, float* host_grad, size_t from, const PushInfo& info) override {
    client_->push_ready(step, host_grad, from, info);
  }

  StepMetrics finish_step(uint64_t step, float* host_params, float* host_grad, const PushInfo& info,
                          StepTimes* times) override {
    const auto start = Clock::now();
    client_->push_ready(step, host_grad, 0, info);  // whatever backward did not push yet
    // Pushes first, then the PULL: sync asks for version step + 1, ssp for the version that keeps
    // it within --staleness, async for the newest. Right behind the last push, the PULL costs the
    // PS no wake-up of its own (asked at the step's start it woke the PS while both workers computed).
    client_->request_params(o_.mode == Mode::kSync  ? step + 1
                           : o_.mode == Mode::kSsp ? step + 1 - std::min<uint64_t>(step + 1, o_.staleness)
                                              : 0);
    const auto pushed = Clock::now();
    times->push_us = micros(pushed - start);
    idle();  // counted as waiting: waking the reader may hand it the core right here
    const uint64_t idle_us = micros(Clock::now() - pushed);
    StepMetrics m = client_->receive_params(host_params, &times->wait_us, &times->pull_us);
    times->wait_us += idle_us;
    times->ckpt_us = std::min(m.write_us, times->wait_us);  // the shards' checkpoint write, out of the wait
    times->wait_us -= times->ckpt_us;
    // Backup workers: a late worker's step was applied without it; it goes on from the version
    // it received. Every other mode counts its own steps.
    m.next_step = o_.backup_workers > 0 ? std::max(step + 1, m.version) : step + 1;
    stats_.at_step(m.next_step);
    return m;
  }

  void done(bool stopped) override { channel_.done(stopped); }
  RowSource* row_source() override { return &rows_; }
  StatsExchange* stats_exchange() override { return o_.mode == Mode::kSync ? &stats_ : nullptr; }

 private:
  const ExchangeOptions o_;
  PsChannel channel_;
  std::unique_ptr<DenseClient> client_;  // once the channel's HELLO told the chunks
  RowClient rows_;
  Replica& replica_;
  PsStats stats_{channel_};
};

}  // namespace

std::unique_ptr<Exchange> make_ps_exchange(const ExchangeOptions& options, uint64_t total, Endpoint& servers,
                                           Replica& replica) {
  return std::make_unique<PsExchange>(options, total, servers, replica);
}

namespace {

// Hybrid mode (docs/sparse.md, "Hybrid mode"): the dense parameters all-reduced among the
// workers, the embedding tables on the PS shards, which this worker registers with for them
// alone (in sync: a step's rows are applied once every worker pushed them).
class HybridExchange final : public Exchange {
 public:
  HybridExchange(std::unique_ptr<Exchange> dense, const ExchangeOptions& o, uint64_t total, Endpoint& servers)
      : dense_(std::move(dense)), channel_(o.client, total, servers), client_(channel_), num_ps_(o.client.num_ps) {}

  uint64_t start(float* host_params, uint64_t total_steps) override {
    // Both sides take the newest checkpoint that is complete (its manifest) and whose every file,
    // the dense vector's and each shard's tables', is intact: the same one.
    const uint64_t tables_at = channel_.hello(total_steps);
    const uint64_t first = dense_->start(host_params, total_steps);
    if (tables_at != first) {
      throw Error("hybrid mode: the PS's tables are at step " + std::to_string(tables_at) + ", the dense parameters at " +
                  std::to_string(first) + " (were the PS shards and the workers given the same --checkpoint-dir?)");
    }
    return first;
  }
  void plan_step(uint64_t step, const PushInfo& info) override { client_.mark_rows(step, info.checkpoint); }
  void gradient_ready(uint64_t step, float* host_grad, size_t from, const PushInfo& info) override {
    client_.mark_rows(step, info.checkpoint);  // the shards write their tables at the chief's versions
    dense_->gradient_ready(step, host_grad, from, info);
  }
  StepMetrics finish_step(uint64_t step, float* host_params, float* host_grad, const PushInfo& info,
                          StepTimes* times) override {
    StepMetrics m = dense_->finish_step(step, host_params, host_grad, info, times);
    if (info.checkpoint != 0) {
      // The chief wrote the dense vector; the manifest may follow once every shard wrote its tables
      // of the version, which it does before it answers a pull of that version.
      const auto start = Clock::now();
      const std::vector<const std::vector<SparseSection>*> none(static_cast<size_t>(num_ps_), nullptr);
      client_.receive_rows(client_.request_rows(info.checkpoint, none));
      times->ckpt_us += micros(Clock::now() - start);
    }
    return m;
  }
  void done(bool stopped) override {
    dense_->done(stopped);
    channel_.done(stopped);
  }
  bool stages_gradient() const override { return dense_->stages_gradient(); }
  RowSource* row_source() override { return &client_; }
  StatsExchange* stats_exchange() override { return dense_->stats_exchange(); }

 private:
  std::unique_ptr<Exchange> dense_;
  PsChannel channel_;
  RowClient client_;
  const int num_ps_;
};

}  // namespace

std::unique_ptr<Exchange> make_hybrid_exchange(std::unique_ptr<Exchange> dense, const ExchangeOptions& options,
                                               uint64_t total, Endpoint& servers) {
  auto hybrid = std::make_unique<HybridExchange>(std::move(dense), options, total, servers);
  return hybrid;
}

}  // namespace pstrain
