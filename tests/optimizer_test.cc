#include "shared/train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "shared/util/error.h"

namespace pstrain {
namespace {

OptimizerOptions opts(const std::string& kind) {
  OptimizerOptions o;
  if (!optimizer_kind_of(kind, &o.kind)) ADD_FAILURE() << "no optimizer " << kind;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  return o;
}

TEST(OptimizerTest, SgdMatchesClosedForm) {
  auto opt = make_optimizer(opts("sgd"), 2);
  std::vector<float> p = {1.0f, -2.0f};
  const std::vector<float> g = {4.0f, 8.0f};  // summed over 4 samples
  opt->apply(0, 2, p.data(), g.data(), 0.25f, 0.1, 0);
  EXPECT_FLOAT_EQ(p[0], 1.0f * (1 - 0.1f * 0.01f) - 0.1f * 1.0f);
  EXPECT_FLOAT_EQ(p[1], -2.0f * (1 - 0.1f * 0.01f) - 0.1f * 2.0f);
}

TEST(OptimizerTest, MomentumAccumulatesVelocity) {
  OptimizerOptions o = opts("momentum");
  o.weight_decay = 0;
  auto opt = make_optimizer(o, 1);
  std::vector<float> p = {0.0f};
  const std::vector<float> g = {1.0f};
  opt->apply(0, 1, p.data(), g.data(), 1.0f, 0.1, 0);  // v = 1
  opt->apply(0, 1, p.data(), g.data(), 1.0f, 0.1, 1);  // v = 1.9
  EXPECT_NEAR(p[0], -0.1 * 1.0 - 0.1 * 1.9, 1e-6);
}

TEST(OptimizerTest, AdamMatchesReferenceImplementation) {
  OptimizerOptions o = opts("adam");
  o.lr = 0.01;
  auto opt = make_optimizer(o, 1);
  std::vector<float> p = {0.5f};
  double ref = 0.5, m = 0, v = 0;
  const double grads[] = {0.3, -0.1, 0.7, 0.0, -2.0};
  for (int t = 1; t <= 5; ++t) {
    const float g = static_cast<float>(grads[t - 1]);
    opt->apply(0, 1, p.data(), &g, 1.0f, o.lr, static_cast<uint64_t>(t - 1));
    m = o.beta1 * m + (1 - o.beta1) * grads[t - 1];
    v = o.beta2 * v + (1 - o.beta2) * grads[t - 1] * grads[t - 1];
    const double mhat = m / (1 - std::pow(o.beta1, t)), vhat = v / (1 - std::pow(o.beta2, t));
    ref = ref * (1 - o.lr * o.weight_decay) - o.lr * mhat / (std::sqrt(vhat) + o.epsilon);
    EXPECT_NEAR(p[0], ref, 1e-6) << "step " << t;
  }
}

// Applying slice by slice (as S shards do) equals applying to the whole vector.
TEST(OptimizerTest, SlicedApplicationEqualsWhole) {
  for (const char* kind : {"sgd", "momentum", "adam"}) {
    std::vector<float> whole(10), sliced(10), grad(10);
    for (int i = 0; i < 10; ++i) {
      whole[i] = sliced[i] = 0.1f * static_cast<float>(i) - 0.3f;
      grad[i] = std::sin(static_cast<float>(i));
    }
    auto all = make_optimizer(opts(kind), 10);
    auto first = make_optimizer(opts(kind), 4);
    auto second = make_optimizer(opts(kind), 6);
    for (uint64_t step = 0; step < 3; ++step) {
      all->apply(0, 10, whole.data(), grad.data(), 0.5f, 0.1, step);
      first->apply(0, 4, sliced.data(), grad.data(), 0.5f, 0.1, step);
      // The second shard in two chunks, as the PS applies it.
      second->apply(0, 2, sliced.data() + 4, grad.data() + 4, 0.5f, 0.1, step);
      second->apply(2, 4, sliced.data() + 6, grad.data() + 6, 0.5f, 0.1, step);
    }
    EXPECT_EQ(whole, sliced) << kind;
  }
}

TEST(OptimizerTest, CosineScheduleDecaysToZero) {
  OptimizerOptions o = opts("sgd");
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 50, 100), 0.1);  // constant
  o.schedule = LrSchedule::kCosine;
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 0, 100), 0.1);
  EXPECT_NEAR(scheduled_lr(o, 50, 100), 0.05, 1e-12);
  EXPECT_NEAR(scheduled_lr(o, 100, 100), 0.0, 1e-12);
}

// Warm-up, then each schedule over the steps after it (the values by their definitions).
TEST(OptimizerTest, WarmupStepDecayAndCosineRestarts) {
  OptimizerOptions o = opts("sgd");  // lr 0.1
  o.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 0, 100), 0.025);
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 3, 100), 0.1);
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 50, 100), 0.1);  // constant after it
  o.schedule = LrSchedule::kCosine;  // over the 96 steps after the warm-up
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 4, 100), 0.1);
  EXPECT_NEAR(scheduled_lr(o, 52, 100), 0.05, 1e-12);
  EXPECT_NEAR(scheduled_lr(o, 100, 100), 0.0, 1e-12);
  o.schedule = LrSchedule::kStep;
  o.decay_steps = 10;
  o.decay_rate = 0.5;
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 13, 100), 0.1);   // s = 9
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 14, 100), 0.05);  // s = 10
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 38, 100), 0.0125);
  o.schedule = LrSchedule::kCosineRestarts;
  o.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 0, 100), 0.1);
  EXPECT_NEAR(scheduled_lr(o, 5, 100), 0.05, 1e-12);
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 10, 100), 0.1);  // the second cycle starts over
  EXPECT_NEAR(scheduled_lr(o, 25, 100), 0.05, 1e-12);
  o.cycle_mult = 2;  // cycles of 10, 20, 40 steps: [0, 10), [10, 30), [30, 70)
  EXPECT_NEAR(scheduled_lr(o, 20, 100), 0.05, 1e-12);
  EXPECT_DOUBLE_EQ(scheduled_lr(o, 30, 100), 0.1);
  EXPECT_NEAR(scheduled_lr(o, 50, 100), 0.05, 1e-12);
  EXPECT_GE(scheduled_lr(o, 1000000000000ull, 2000000000000ull), 0.0);  // cycles found in log time
}

TEST(OptimizerTest, AdamwIsAdam) {
  OptimizerOptions a = opts("adam"), w = opts("adamw");
  a.weight_decay = w.weight_decay = 0.01;
  auto adam = make_optimizer(a, 3), adamw = make_optimizer(w, 3);
  std::vector<float> p1 = {1, -2, 3}, p2 = p1;
  const std::vector<float> g = {0.5f, 0.25f, -1};
  for (uint64_t step = 0; step < 3; ++step) {
    adam->apply(0, 3, p1.data(), g.data(), 1.0f, 0.1, step);
    adamw->apply(0, 3, p2.data(), g.data(), 1.0f, 0.1, step);
  }
  EXPECT_EQ(p1, p2);
}

// The flags' words are parsed once (options.cc: "--optimizer: 'rmsprop' is not one of ..."); the
// names read back from checkpoints go through optimizer_kind_of.
TEST(OptimizerTest, EveryKindHasOneNameAndNoOtherNameIsAKind) {
  for (const OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdam, OptimizerKind::kAdamW}) {
    OptimizerKind back = kind == OptimizerKind::kSgd ? OptimizerKind::kAdam : OptimizerKind::kSgd;
    EXPECT_TRUE(optimizer_kind_of(optimizer_kind_name(kind), &back));
    EXPECT_EQ(back, kind);
  }
  OptimizerKind unknown;
  EXPECT_FALSE(optimizer_kind_of("rmsprop", &unknown));
  EXPECT_FALSE(optimizer_kind_of("", &unknown));
}

}  // namespace
}  // namespace pstrain
