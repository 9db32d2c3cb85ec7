// The CPU backend's pooling on oneDNN (worker/cpu/cpu_pool.h) against the definition (the loops the
// backend ran before, which the CUDA kernels mirror), ties and NaN included; its determinism (the
// same bits every call, on any thread count, whatever block a plane falls in); and its scratch
// (nothing written past Backend::pool_scratch_floats).
#include "worker/cpu/cpu_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "test_util/random.h"
#include "worker/backend/backend.h"

namespace pstrain {
namespace {

using test::random_floats;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Where two results first differ, for a failure's message.
std::string first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      return "at " + std::to_string(i) + ": " + std::to_string(got[i]) + " against " +
             std::to_string(want[i]);
    }
  }
  return got.size() == want.size() ? "none" : "sizes";
}

struct Case {
  int planes, height, width, kernel, stride;
  PoolGeometry geometry() const {
    return PoolGeometry{
        height, width, kernel, stride, (height - kernel) / stride + 1, (width - kernel) / stride + 1};
  }
  size_t in() const { return static_cast<size_t>(planes) * height * width; }
  size_t out() const {
    const PoolGeometry g = geometry();
    return static_cast<size_t>(planes) * g.out_height * g.out_width;
  }
  std::string text() const {
    return std::to_string(planes) + "x" + std::to_string(height) + "x" + std::to_string(width) + " k" +
           std::to_string(kernel) + " s" + std::to_string(stride);
  }
};

// The definition, in float: max keeps the first (row major) largest value and NaN never wins;
// the mean sums its window row major and scales by 1 / K^2; backward scatters window by window in
// (oy, ox) order, max's dy onto the first position holding the maximum.
void reference(PoolKind kind, const std::vector<float>& x, const std::vector<float>& dy, const Case& c,
               std::vector<float>& y, std::vector<float>& dx) {
  const PoolGeometry g = c.geometry();
  const float inv = 1.0f / static_cast<float>(g.kernel * g.kernel);
  y.assign(c.out(), 0.0f);
  dx.assign(c.in(), 0.0f);
  for (int p = 0; p < c.planes; ++p) {
    const size_t plane = static_cast<size_t>(p) * g.height * g.width;
    for (int oy = 0; oy < g.out_height; ++oy) {
      for (int ox = 0; ox < g.out_width; ++ox) {
        const size_t o = (static_cast<size_t>(p) * g.out_height + oy) * g.out_width + ox;
        float acc = kind == PoolKind::kMax ? -INFINITY : 0.0f;
        size_t at = 0;
        bool found = false;
        for (int ki = 0; ki < g.kernel; ++ki) {
          for (int kj = 0; kj < g.kernel; ++kj) {
            const size_t i = plane + static_cast<size_t>(oy * g.stride + ki) * g.width + ox * g.stride + kj;
            if (kind == PoolKind::kAverage) {
              acc += x[i];
            } else if (x[i] > acc || (!found && x[i] == acc)) {
              acc = x[i], at = i, found = true;
            }
          }
        }
        y[o] = kind == PoolKind::kMax ? acc : acc * inv;
        if (kind == PoolKind::kMax) {
          if (found) dx[at] += dy[o];
          continue;
        }
        for (int ki = 0; ki < g.kernel; ++ki) {
          for (int kj = 0; kj < g.kernel; ++kj) {
            dx[plane + static_cast<size_t>(oy * g.stride + ki) * g.width + ox * g.stride + kj] += dy[o] * inv;
          }
        }
      }
    }
  }
}

struct Result {
  std::vector<float> y, dx;
};

Result run(Backend& backend, PoolKind kind, const std::vector<float>& x, const std::vector<float>& dy,
           const Case& c) {
  const PoolGeometry g = c.geometry();
  std::vector<float> scratch(backend.pool_scratch_floats(kind, c.planes, g));
  Result r{std::vector<float>(c.out()), std::vector<float>(c.in())};
  backend.pool(kind, x.data(), c.planes, g, r.y.data(), scratch.data());
  backend.pool_backward(kind, x.data(), r.y.data(), dy.data(), c.planes, g, r.dx.data(), scratch.data());
  return r;
}

// Inputs with ties: values in halves, a quarter of them 0 (a ReLU's output), and a NaN now and then
// (never a whole window: cpu_pool.h).
std::vector<float> inputs(const Case& c, uint32_t seed) {
  std::vector<float> x = random_floats(c.in(), seed);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = i % 4 == 1 ? 0.0f : std::round(x[i] * 4) / 2;
    if (i % 97 == 13) x[i] = std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

// Planes below, at and past the block of 64; overlapping windows, windows that leave columns
// over, a 2x2 max pooling that does not tile its plane (7x7: oneDNN's), strides past the window.
const std::vector<Case> kCases = {
    {3, 7, 7, 2, 2},    {64, 9, 8, 3, 1},  {150, 7, 6, 3, 2}, {37, 28, 28, 2, 2},
    {70, 14, 14, 3, 2}, {5, 11, 13, 5, 3}, {129, 6, 6, 2, 1}, {16, 5, 9, 2, 3},
};

bool plain(const std::vector<float>& v) {
  return std::none_of(v.begin(), v.end(), [](float f) { return std::isnan(f); });
}

TEST(CpuPoolTest, EqualsTheDefinition) {
  auto backend = make_cpu_backend(1);
  for (const Case& c : kCases) {
    const auto x = inputs(c, 1), dy = random_floats(c.out(), 2);
    for (const PoolKind kind : {PoolKind::kMax, PoolKind::kAverage}) {
      if (!CpuPool::on_onednn(kind, c.geometry())) continue;
      std::vector<float> want_y, want_dx;
      reference(kind, x, dy, c, want_y, want_dx);
      const Result got = run(*backend, kind, x, dy, c);
      if (kind == PoolKind::kMax) {  // a choice: exact, and so is dx where windows do not overlap
        EXPECT_TRUE(plain(got.y)) << c.text();
        EXPECT_TRUE(same_bits(got.y, want_y)) << c.text() << " " << first_difference(got.y, want_y);
        if (c.stride >= c.kernel) {
          EXPECT_TRUE(same_bits(got.dx, want_dx)) << c.text() << " " << first_difference(got.dx, want_dx);
          continue;
        }
      }
      for (size_t i = 0; kind == PoolKind::kAverage && i < want_y.size(); ++i) {
        if (std::isnan(want_y[i])) {
          ASSERT_TRUE(std::isnan(got.y[i])) << c.text() << " at " << i;
        } else {
          ASSERT_NEAR(got.y[i], want_y[i], 1e-6 * (1 + std::fabs(want_y[i]))) << c.text() << " at " << i;
        }
      }
      // Overlapping windows add a pixel's terms in oneDNN's order, not the definition's.
      for (size_t i = 0; i < want_dx.size(); ++i) {
        ASSERT_NEAR(got.dx[i], want_dx[i], 1e-6 * (1 + std::fabs(want_dx[i]))) << c.text() << " at " << i;
      }
    }
  }
}

TEST(CpuPoolTest, SameBitsEveryCallAndOnAnyThreadCount) {
  auto one = make_cpu_backend(1), two = make_cpu_backend(2), three = make_cpu_backend(3);
  for (const Case& c : {Case{300, 14, 14, 3, 2}, Case{65, 9, 8, 3, 1}, Case{190, 7, 7, 2, 2}}) {
    const auto x = random_floats(c.in(), 3), dy = random_floats(c.out(), 4);
    for (const PoolKind kind : {PoolKind::kMax, PoolKind::kAverage}) {
      const Result first = run(*one, kind, x, dy, c), again = run(*one, kind, x, dy, c);
      EXPECT_TRUE(same_bits(again.y, first.y) && same_bits(again.dx, first.dx)) << c.text();
      for (Backend* b : {two.get(), three.get()}) {
        const Result r = run(*b, kind, x, dy, c);
        EXPECT_TRUE(same_bits(r.y, first.y)) << c.text() << " on " << b->name();
        EXPECT_TRUE(same_bits(r.dx, first.dx)) << c.text() << " on " << b->name();
      }
    }
  }
}

// A plane's result does not depend on the block it falls in: planes [5, 150) pooled alone (other
// blocks, another short last block) give the bits they get as part of 150 (N workers' shares of a
// batch against one process's).
TEST(CpuPoolTest, APlaneDoesNotDependOnItsBlock) {
  auto backend = make_cpu_backend(2);
  const Case whole{150, 9, 8, 3, 2}, part{145, 9, 8, 3, 2};
  const auto x = random_floats(whole.in(), 5), dy = random_floats(whole.out(), 6);
  const size_t skip_in = whole.in() - part.in(), skip_out = whole.out() - part.out();
  for (const PoolKind kind : {PoolKind::kMax, PoolKind::kAverage}) {
    const Result all = run(*backend, kind, x, dy, whole);
    const Result tail =
        run(*backend, kind, std::vector<float>(x.begin() + static_cast<std::ptrdiff_t>(skip_in), x.end()),
            std::vector<float>(dy.begin() + static_cast<std::ptrdiff_t>(skip_out), dy.end()), part);
    EXPECT_TRUE(same_bits(
        tail.y, std::vector<float>(all.y.begin() + static_cast<std::ptrdiff_t>(skip_out), all.y.end())));
    EXPECT_TRUE(same_bits(
        tail.dx, std::vector<float>(all.dx.begin() + static_cast<std::ptrdiff_t>(skip_in), all.dx.end())));
  }
}

// Nothing is written past pool_scratch_floats(planes), for those planes and fewer (a model
// allocates its scratch for its largest batch), on 1 and 3 threads; the tiled 2x2 max pooling
// (the backend's own loop) needs none.
TEST(CpuPoolTest, StaysWithinItsScratch) {
  constexpr size_t kGuard = 4096;
  for (const int threads : {1, 3}) {
    auto backend = make_cpu_backend(threads);
    EXPECT_EQ(backend->pool_scratch_floats(PoolKind::kMax, 256, Case{256, 28, 28, 2, 2}.geometry()), 0u);
    for (const Case& c : kCases) {
      const PoolGeometry g = c.geometry();
      const auto x = random_floats(c.in(), 7), dy = random_floats(c.out(), 8);
      for (const PoolKind kind : {PoolKind::kMax, PoolKind::kAverage}) {
        const size_t need = backend->pool_scratch_floats(kind, c.planes, g);
        std::vector<float> y(c.out()), dx(c.in());
        for (int planes = c.planes; planes >= 1; planes = planes > 9 ? planes - 7 : planes - 1) {
          EXPECT_LE(backend->pool_scratch_floats(kind, planes, g), need) << c.text() << " planes " << planes;
          std::vector<float> scratch(need + kGuard, std::numeric_limits<float>::quiet_NaN());
          backend->pool(kind, x.data(), planes, g, y.data(), scratch.data());
          backend->pool_backward(kind, x.data(), y.data(), dy.data(), planes, g, dx.data(), scratch.data());
          const bool untouched = std::all_of(scratch.begin() + static_cast<std::ptrdiff_t>(need),
                                             scratch.end(), [](float v) { return std::isnan(v); });
          EXPECT_TRUE(untouched) << c.text() << " planes " << planes << " on " << threads << " threads";
        }
      }
    }
  }
}

}  // namespace
}  // namespace pstrain
