#include "worker/exchange/push_jitter.h"

#include <chrono>
#include <random>
#include <thread>

namespace pstrain {
namespace {

class JitteredExchange final : public Exchange {
 public:
  JitteredExchange(std::unique_ptr<Exchange> inner, double max_ms)
      : inner_(std::move(inner)),
        rng_(static_cast<std::minstd_rand::result_type>(std::chrono::steady_clock::now().time_since_epoch().count())),
        delay_us_(0.0, max_ms * 1e3) {
    inner_->set_idle_hook([this] { idle(); });  // the hook the trainer sets on this one
  }

  uint64_t start(float* host_params, uint64_t total_steps) override { return inner_->start(host_params, total_steps); }
  void gradient_ready(uint64_t step, float* host_grad, size_t from, const PushInfo& info) override {
    sleep();
    inner_->gradient_ready(step, host_grad, from, info);
  }
  // It pushes what backward did not, so it is delayed too.
  StepMetrics finish_step(uint64_t step, float* host_params, float* host_grad, const PushInfo& info,
                          StepTimes* times) override {
    sleep();
    return inner_->finish_step(step, host_params, host_grad, info, times);
  }
  void done(bool stopped) override { inner_->done(stopped); }
  bool stages_gradient() const override { return inner_->stages_gradient(); }
  // Not delayed: the tables' rows and batch norm's statistics (a job with tables or global
  // statistics runs with jitter too).
  RowSource* row_source() override { return inner_->row_source(); }
  StatsExchange* stats_exchange() override { return inner_->stats_exchange(); }

 private:
  void sleep() { std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(delay_us_(rng_)))); }

  std::unique_ptr<Exchange> inner_;
  std::minstd_rand rng_;
  std::uniform_real_distribution<double> delay_us_;
};

}  // namespace

std::unique_ptr<Exchange> with_push_jitter(std::unique_ptr<Exchange> inner, double max_ms) {
  return std::make_unique<JitteredExchange>(std::move(inner), max_ms);
}

}  // namespace pstrain
