#include "shared/train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "shared/util/error.h"
#include "shared/util/numeric.h"

namespace pstrain {
namespace {

PSTRAIN_MULTIVERSION
void sgd_kernel(size_t n, float* __restrict p, const float* __restrict g, float step, float decay) {
  for (size_t i = 0; i < n; ++i) p[i] = decay * p[i] - step * g[i];
}

PSTRAIN_MULTIVERSION
void momentum_kernel(size_t n, float* __restrict p, const float* __restrict g, float* __restrict v, float scale,
                     float lr, float mu, float decay) {
  for (size_t i = 0; i < n; ++i) {
    v[i] = mu * v[i] + scale * g[i];
    p[i] = decay * p[i] - lr * v[i];
  }
}

PSTRAIN_MULTIVERSION
void adam_kernel(size_t n, float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                 float scale, float b1, float b2, float step_size, float inv_sqrt_c2, float eps, float decay) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = scale * g[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    p[i] = decay * p[i] - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + eps);
  }
}

class OptimizerBase : public Optimizer {
 public:
  OptimizerBase(const OptimizerOptions& o, size_t n) : o_(o), n_(n) {}
  size_t size() const override { return n_; }

 protected:
  void check_range(size_t offset, size_t n) const { PSTRAIN_CHECK_LE(offset + n, n_); }
  float decay(double lr) const { return static_cast<float>(1.0 - lr * o_.weight_decay); }
  const OptimizerOptions o_;
  const size_t n_;
};

// p -= lr * (g + wd * p)
class Sgd final : public OptimizerBase {
 public:
  using OptimizerBase::OptimizerBase;
  void apply(size_t offset, size_t n, float* p, const float* g, float scale, double lr, uint64_t) override {
    check_range(offset, n);
    sgd_kernel(n, p, g, static_cast<float>(lr) * scale, decay(lr));
  }
};

// v = mu * v + g;  p -= lr * (v + wd * p)
class Momentum final : public OptimizerBase {
 public:
  Momentum(const OptimizerOptions& o, size_t n) : OptimizerBase(o, n), velocity_(n, 0.0f) {}
  void apply(size_t offset, size_t n, float* p, const float* g, float scale, double lr, uint64_t) override {
    check_range(offset, n);
    momentum_kernel(n, p, g, velocity_.data() + offset, scale, static_cast<float>(lr),
                    static_cast<float>(o_.momentum), decay(lr));
  }

  std::vector<std::vector<float>*> state() override { return {&velocity_}; }

 private:
  std::vector<float> velocity_;
};

// Adam with decoupled weight decay (AdamW):
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p)
class Adam final : public OptimizerBase {
 public:
  Adam(const OptimizerOptions& o, size_t n) : OptimizerBase(o, n), m_(n, 0.0f), v_(n, 0.0f) {}
  void apply(size_t offset, size_t n, float* p, const float* g, float scale, double lr, uint64_t step) override {
    check_range(offset, n);
    const double t = static_cast<double>(step + 1);
    adam_kernel(n, p, g, m_.data() + offset, v_.data() + offset, scale, static_cast<float>(o_.beta1),
                static_cast<float>(o_.beta2), static_cast<float>(lr / (1.0 - std::pow(o_.beta1, t))),
                static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(o_.beta2, t))), static_cast<float>(o_.epsilon),
                decay(lr));
  }

  std::vector<std::vector<float>*> state() override { return {&m_, &v_}; }

 private:
  std::vector<float> m_, v_;
};

}  // namespace

double scheduled_lr(const OptimizerOptions& options, uint64_t step, uint64_t total_steps) {
  const uint64_t warmup = options.warmup_steps;
  if (step < warmup) return options.lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const uint64_t s = step - warmup;
  const auto cosine = [&](double done, double length) {
    return options.lr * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, done / length)));
  };
  if (options.schedule == LrSchedule::kCosine) {
    return total_steps > warmup ? cosine(static_cast<double>(s), static_cast<double>(total_steps - warmup))
                                : options.lr;
  }
  if (options.schedule == LrSchedule::kStep && options.decay_steps > 0) {
    return options.lr * std::pow(options.decay_rate, static_cast<double>(s / options.decay_steps));
  }
  if (options.schedule == LrSchedule::kCosineRestarts && options.decay_steps > 0) {
    if (options.cycle_mult <= 1.0) {
      return cosine(static_cast<double>(s % options.decay_steps), static_cast<double>(options.decay_steps));
    }
    double at = static_cast<double>(s), length = static_cast<double>(options.decay_steps);
    while (at >= length) {  // a logarithmic number of cycles: each is longer than the one before
      at -= length;
      length *= options.cycle_mult;
    }
    return cosine(at, length);
  }
  return options.lr;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, size_t n) {
  switch (options.kind) {
    case OptimizerKind::kSgd: return std::make_unique<Sgd>(options, n);
    case OptimizerKind::kMomentum: return std::make_unique<Momentum>(options, n);
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW: return std::make_unique<Adam>(options, n);
  }
  throw Error("unknown optimizer kind " + std::to_string(static_cast<int>(options.kind)));
}

}  // namespace pstrain
