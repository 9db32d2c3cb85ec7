#include "worker/exchange.h"

#include <algorithm>
#include <iterator>

#include "shared/checkpoint/checkpoint_store.h"
#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"
#include "shared/train/clip_norm.h"
#include "shared/train/optimizer.h"
#include "worker/ps_link/channel.h"
#include "worker/ps_link/dense_client.h"
#include "worker/ps_link/row_client.h"
#include "worker/ps_link/stats_client.h"

namespace pstrain {
namespace {

uint64_t micros(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

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

// A worker's checkpoints: in hybrid mode the saved tables are the PS shards' to load.
CheckpointOptions without_tables(CheckpointOptions o) {
  o.keep_tables = false;
  return o;
}

class AllreduceExchange final : public Exchange {
 public:
  AllreduceExchange(const ExchangeOptions& o, uint64_t total, std::unique_ptr<Collective> collective, Replica& replica)
      : o_(o),
        total_(total),
        collective_(std::move(collective)),
        replica_(replica),
        optimizer_(make_optimizer(o.optimizer, total)),
        store_(without_tables(o.checkpoint), "w" + std::to_string(o.index)),
        stats_(make_collective_stats(*collective_)) {}

  uint64_t start(float* host_params, uint64_t total_steps) override {
    // Every worker initialised from the same seed; nothing to fetch. On --resume every worker
    // loads the same checkpoint (the chief's, of the whole vector): parameters and optimizer state.
    total_steps_ = total_steps;
    uint64_t first = 0;
    if (store_.resuming()) {
      const auto slots = optimizer_->state();
      ShardCheckpoint c;
      std::string error;
      if (!store_.load(total_, total_steps, Slice{0, total_}, slots.size(), &c, &error)) throw Error(error);
      std::copy(c.values.begin(), c.values.end(), host_params);
      for (size_t k = 0; k < slots.size(); ++k) *slots[k] = c.slots[k];
      first = c.version;
    }
    PSLOG(INFO) << "w" << o_.index << ": all-reduce " << (collective_->on_device() ? "(NCCL)" : "ring") << " of "
                << collective_->world() << " worker(s) ready" << (first > 0 ? "; resuming at step " + std::to_string(first) : "");
    return first;
  }

  void gradient_ready(uint64_t, float*, size_t, const PushInfo&) override {}

  StepMetrics finish_step(uint64_t step, float* host_params, float* host_grad, const PushInfo& info,
                          StepTimes* times) override {
    // The chief's checkpoint and stop decisions ride along (only it sets them: their sums are its).
    double sums[14] = {static_cast<double>(info.samples),      info.loss_sum,
                       static_cast<double>(info.correct),      static_cast<double>(info.times.data_us),
                       static_cast<double>(info.times.compute_us), static_cast<double>(info.times.push_us),
                       static_cast<double>(info.times.wait_us),    static_cast<double>(info.times.pull_us),
                       static_cast<double>(info.times.eval_us),    static_cast<double>(info.checkpoint),
                       info.stop ? 1.0 : 0.0,                  static_cast<double>(info.eval.samples),
                       info.eval.loss_sum,                     static_cast<double>(info.eval.correct)};
    const auto t0 = Clock::now();
    idle();  // the ring waits for the slowest worker first (counted in push, like that wait)
    if (collective_->on_device()) {
      collective_->allreduce_sum(replica_.grad(), total_, sums, std::size(sums));
      replica_.grad_to_host(0, total_);
    } else {
      collective_->allreduce_sum(host_grad, total_, sums, std::size(sums));
    }
    const auto t1 = Clock::now();
    if (!placed_ && !collective_->on_device() && !replica_.on_device()) {
      // The shared-memory all-reduce sums where the gradient lies when it is computed there.
      if (float* slot = collective_->input_buffer(total_)) replica_.place_host_grad(slot);
      placed_ = true;
    }
    float scale = static_cast<float>(1.0 / sums[0]);
    if (o_.optimizer.clip_norm > 0) {  // the whole summed gradient is here: its norm, as a PS computes it
      ExactSquares squares;
      squares.add(host_grad, total_);
      scale = clipped_scale(scale, clip_factor(squares, static_cast<uint64_t>(sums[0]), o_.optimizer.clip_norm));
    }
    optimizer_->apply(0, total_, host_params, host_grad, scale, scheduled_lr(o_.optimizer, step, total_steps_), step);
    times->push_us = micros(t1 - t0);
    times->wait_us = 0;
    times->pull_us = micros(Clock::now() - t1);
    if (o_.index == 0 && info.checkpoint != 0) {
      const auto w0 = Clock::now();
      write_checkpoint(info.checkpoint, host_params);
      times->ckpt_us = micros(Clock::now() - w0);
    }
    StepMetrics m;
    m.stop = sums[10] > 0;
    m.version = m.next_step = step + 1;
    m.samples = static_cast<uint64_t>(sums[0]);
    m.loss_sum = sums[1];
    m.correct = static_cast<uint64_t>(sums[2]);
    m.eval = EvalSums{static_cast<uint64_t>(sums[11]), sums[12], static_cast<uint64_t>(sums[13])};
    m.times = StepTimes{static_cast<uint64_t>(sums[3]), static_cast<uint64_t>(sums[4]), static_cast<uint64_t>(sums[5]),
                        static_cast<uint64_t>(sums[6]), static_cast<uint64_t>(sums[7]), static_cast<uint64_t>(sums[8])};
    return m;
  }

  void done(bool) override {}
  bool stages_gradient() const override { return !collective_->on_device(); }
  StatsExchange* stats_exchange() override { return stats_.get(); }

 private:
  // The chief, after applying step version-1: the whole vector as the one shard of the checkpoint.
  void write_checkpoint(uint64_t version, const float* host_params) {
    ShardCheckpoint c;
    // Hybrid mode: the last of S + 1 files, after the PS shards' tables.
    c.shard = static_cast<uint32_t>(o_.checkpoint.table_shards);
    c.num_shards = c.shard + 1;
    c.version = version;
    c.total = total_;
    c.total_steps = total_steps_;
    c.optimizer = optimizer_kind_name(o_.optimizer.kind);
    c.values.assign(host_params, host_params + total_);
    for (const std::vector<float>* slot : optimizer_->state()) c.slots.push_back(*slot);
    store_.write(c);
  }

  const ExchangeOptions o_;
  const uint64_t total_;
  uint64_t total_steps_ = 0;
  std::unique_ptr<Collective> collective_;
  Replica& replica_;
  bool placed_ = false;  // asked the collective where to compute the gradient
  std::unique_ptr<Optimizer> optimizer_;
  CheckpointStore store_;
  std::unique_ptr<StatsExchange> stats_;  // over collective_
};

}  // namespace

std::unique_ptr<Exchange> make_ps_exchange(const ExchangeOptions& options, uint64_t total, Endpoint& servers,
                                           Replica& replica) {
  return std::make_unique<PsExchange>(options, total, servers, replica);
}

std::unique_ptr<Exchange> make_allreduce_exchange(const ExchangeOptions& options, uint64_t total,
                                                  std::unique_ptr<Collective> collective, Replica& replica) {
  return std::make_unique<AllreduceExchange>(options, total, std::move(collective), replica);
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
