#include "ps/sparse/sparse_optimizer.h"

#include <cmath>

#include "shared/util/error.h"

namespace pstrain {
namespace {

class Base : public SparseOptimizer {
 public:
  Base(const SparseOptimizerOptions& o, size_t slots) : o_(o), slots_(slots) {}
  TableOptimizer kind() const override { return o_.kind; }
  size_t slots() const override { return slots_; }

 protected:
  const SparseOptimizerOptions o_;
  const size_t slots_;
};

// w -= lr * g  (the dense SGD's float expression without weight decay: the same bits)
class SparseSgd final : public Base {
 public:
  explicit SparseSgd(const SparseOptimizerOptions& o) : Base(o, 0) {}
  void init_slots(size_t, float*) const override {}
  void apply(size_t dim, float* w, float*, const float* g, float scale, double lr, uint64_t) const override {
    const float step = static_cast<float>(lr) * scale;
    for (size_t i = 0; i < dim; ++i) w[i] = w[i] - step * g[i];
  }
};

// a += g^2;  w -= lr * g / (sqrt(a) + eps)
class SparseAdagrad final : public Base {
 public:
  explicit SparseAdagrad(const SparseOptimizerOptions& o) : Base(o, 1) {}
  void init_slots(size_t dim, float* s) const override {
    for (size_t i = 0; i < dim; ++i) s[i] = static_cast<float>(o_.initial_accumulator);
  }
  void apply(size_t dim, float* w, float* a, const float* g, float scale, double lr, uint64_t) const override {
    const float rate = static_cast<float>(lr), eps = static_cast<float>(o_.epsilon);
    for (size_t i = 0; i < dim; ++i) {
      const float gi = scale * g[i];
      a[i] += gi * gi;
      w[i] -= rate * gi / (std::sqrt(a[i]) + eps);
    }
  }
};

// Lazy Adam: the dense Adam's float expressions (without weight decay) on the touched rows only,
// t = the row's own updates + 1 in the bias corrections.
class SparseAdam final : public Base {
 public:
  explicit SparseAdam(const SparseOptimizerOptions& o) : Base(o, 2) {}
  void init_slots(size_t dim, float* s) const override {
    for (size_t i = 0; i < 2 * dim; ++i) s[i] = 0.0f;
  }
  void apply(size_t dim, float* w, float* s, const float* g, float scale, double lr, uint64_t updates) const override {
    const double t = static_cast<double>(updates + 1);
    const float b1 = static_cast<float>(o_.beta1), b2 = static_cast<float>(o_.beta2);
    const float step_size = static_cast<float>(lr / (1.0 - std::pow(o_.beta1, t)));
    const float inv_sqrt_c2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(o_.beta2, t)));
    const float eps = static_cast<float>(o_.epsilon);
    float* m = s;
    float* v = s + dim;
    for (size_t i = 0; i < dim; ++i) {
      const float gi = scale * g[i];
      m[i] = b1 * m[i] + (1.0f - b1) * gi;
      v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
      w[i] = w[i] - step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + eps);
    }
  }
};

// FTRL-Proximal (McMahan et al. 2013, Algorithm 1), alpha = lr:
// sigma = (sqrt(n + g^2) - sqrt(n)) / alpha;  z += g - sigma * w;  n += g^2;
// w = 0 if |z| <= l1, else -(z - sign(z) * l1) / ((beta + sqrt(n)) / alpha + l2)
class SparseFtrl final : public Base {
 public:
  explicit SparseFtrl(const SparseOptimizerOptions& o) : Base(o, 2) {}
  void init_slots(size_t dim, float* s) const override {
    for (size_t i = 0; i < dim; ++i) s[i] = 0.0f;                                           // z
    for (size_t i = 0; i < dim; ++i) s[dim + i] = static_cast<float>(o_.initial_accumulator);  // n
  }
  void apply(size_t dim, float* w, float* s, const float* g, float scale, double lr, uint64_t) const override {
    const float inv_alpha = static_cast<float>(1.0 / lr), beta = static_cast<float>(o_.ftrl_beta);
    const float l1 = static_cast<float>(o_.l1), l2 = static_cast<float>(o_.l2);
    // Branch-free, so that the loop vectorises (the same bits: where copysign's sign differs from
    // the comparison's, at z = +-0, |z| <= l1 makes the weight 0 either way).
    float* __restrict__ wr = w;
    float* __restrict__ z = s;
    float* __restrict__ n = s + dim;
    const float* __restrict__ gr = g;
    for (size_t i = 0; i < dim; ++i) {
      const float gi = scale * gr[i];
      const float n_new = n[i] + gi * gi;
      const float root = std::sqrt(n_new);
      const float zi = z[i] + (gi - (root - std::sqrt(n[i])) * inv_alpha * wr[i]);
      z[i] = zi;
      n[i] = n_new;
      const float shrunk = zi - std::copysign(l1, zi);
      const float wi = -shrunk / ((beta + root) * inv_alpha + l2);
      wr[i] = std::fabs(zi) <= l1 ? 0.0f : wi;
    }
  }
};

void check_options(const SparseOptimizerOptions& o) {
  const auto bad = [&](const std::string& what) {
    throw Error(std::string("sparse optimizer '") + table_optimizer_name(o.kind) + "': " + what);
  };
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1)) bad("beta1 and beta2 must be in [0, 1)");
  if (!(o.epsilon >= 0) || !(o.initial_accumulator >= 0)) bad("epsilon and the initial accumulator must be >= 0");
  if (o.kind == TableOptimizer::kAdagrad && !(o.epsilon > 0 || o.initial_accumulator > 0)) {
    bad("epsilon or the initial accumulator must be > 0 (else 0 / 0 for a zero gradient)");
  }
  if (!(o.ftrl_beta >= 0) || !(o.l1 >= 0) || !(o.l2 >= 0)) bad("ftrl's beta, l1 and l2 must be >= 0");
  if (!std::isfinite(o.epsilon + o.initial_accumulator + o.ftrl_beta + o.l1 + o.l2)) bad("values must be finite");
}

}  // namespace

std::unique_ptr<SparseOptimizer> make_sparse_optimizer(const SparseOptimizerOptions& options) {
  check_options(options);
  switch (options.kind) {
    case TableOptimizer::kSgd: return std::make_unique<SparseSgd>(options);
    case TableOptimizer::kAdagrad: return std::make_unique<SparseAdagrad>(options);
    case TableOptimizer::kAdam: return std::make_unique<SparseAdam>(options);
    case TableOptimizer::kFtrl: return std::make_unique<SparseFtrl>(options);
  }
  throw Error("unknown sparse optimizer " + std::to_string(static_cast<int>(options.kind)));
}

}  // namespace pstrain
