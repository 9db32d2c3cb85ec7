#include "worker/exchange/exchange.h"

#include <algorithm>
#include <iterator>

#include "shared/checkpoint/checkpoint_store.h"
#include "shared/train/clip_norm.h"
#include "shared/train/optimizer.h"
#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"

namespace pstrain {
namespace {

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

std::unique_ptr<Exchange> make_allreduce_exchange(const ExchangeOptions& options, uint64_t total,
                                                  std::unique_ptr<Collective> collective, Replica& replica) {
  return std::make_unique<AllreduceExchange>(options, total, std::move(collective), replica);
}

}  // namespace pstrain
