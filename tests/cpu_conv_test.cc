// The CPU backend's convolutions on oneDNN (worker/cpu/cpu_conv.h) against the im2col definition
// (Backend's default, which the CUDA backend still runs), their determinism (the same bits every
// call and on any thread count, the weight gradient's blocks added in order), and their scratch
// (nothing written past Backend::conv_scratch_floats).
#include "worker/cpu/cpu_conv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
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

// The largest difference relative to 1 + |want|.
double worst(const std::vector<float>& got, const std::vector<float>& want) {
  double w = 0;
  for (size_t i = 0; i < got.size(); ++i)
    w = std::max(w, std::fabs(double{got[i]} - want[i]) / (1 + std::fabs(want[i])));
  return w;
}

struct Case {
  int channels, height, width, kernel, stride, pad, outputs, batch;
  ConvGeometry geometry() const {
    return ConvGeometry{channels,
                        height,
                        width,
                        kernel,
                        stride,
                        pad,
                        (height + 2 * pad - kernel) / stride + 1,
                        (width + 2 * pad - kernel) / stride + 1};
  }
  std::string text() const {
    return std::to_string(batch) + "x" + std::to_string(channels) + "x" + std::to_string(height) + "x" +
           std::to_string(width) + " -> " + std::to_string(outputs) + " k" + std::to_string(kernel) + " s" +
           std::to_string(stride) + " p" + std::to_string(pad);
  }
};

// One forward and backward: y, dx, dw (onto `dw0` when accumulating) and db.
struct Result {
  std::vector<float> y, dx, dw, db;
};

// `reference`: Backend's default (im2col and per-sample products) instead of the backend's own.
Result run(Backend& backend, const Case& c, bool accumulate, bool reference, uint32_t seed = 1) {
  const ConvGeometry g = c.geometry();
  const size_t in = g.input_size(), out = static_cast<size_t>(c.outputs) * g.positions();
  const size_t weights = static_cast<size_t>(c.outputs) * g.patch();
  const auto x = random_floats(c.batch * in, seed), w = random_floats(weights, seed + 1),
             bias = random_floats(static_cast<size_t>(c.outputs), seed + 2),
             dy = random_floats(c.batch * out, seed + 3);
  Result r;
  r.y.resize(c.batch * out);
  r.dx.resize(c.batch * in);
  r.dw = random_floats(weights, seed + 4);
  r.db = random_floats(static_cast<size_t>(c.outputs), seed + 5);
  std::vector<float> scratch(reference ? backend.Backend::conv_scratch_floats(c.batch, g, c.outputs)
                                       : backend.conv_scratch_floats(c.batch, g, c.outputs));
  if (reference) {
    backend.Backend::conv_forward(x.data(), c.batch, g, c.outputs, w.data(), bias.data(), r.y.data(),
                                  scratch.data());
    backend.Backend::conv_backward(x.data(), dy.data(), c.batch, g, c.outputs, w.data(), r.dx.data(),
                                   r.dw.data(), r.db.data(), accumulate, scratch.data());
  } else {
    backend.conv_forward(x.data(), c.batch, g, c.outputs, w.data(), bias.data(), r.y.data(), scratch.data());
    backend.conv_backward(x.data(), dy.data(), c.batch, g, c.outputs, w.data(), r.dx.data(), r.dw.data(),
                          r.db.data(), accumulate, scratch.data());
  }
  return r;
}

// Odd sizes, strides and paddings, 1x1 to 5x5 kernels; channels below and above the 16 where the
// data gradient changes layout; batches below, at and past the block of 8 samples.
const std::vector<Case> kCases = {
    {1, 28, 28, 3, 1, 1, 32, 9},  {32, 14, 14, 3, 1, 1, 64, 8}, {2, 7, 6, 3, 1, 1, 4, 3},
    {2, 7, 6, 3, 2, 0, 4, 3},     {3, 9, 8, 3, 2, 2, 5, 19},    {16, 11, 9, 1, 2, 0, 33, 7},
    {17, 9, 13, 5, 3, 2, 16, 17}, {16, 8, 8, 3, 1, 1, 16, 1},   {4, 5, 5, 5, 1, 0, 3, 10},
};

TEST(CpuConvTest, EqualsTheIm2colDefinition) {
  auto backend = make_cpu_backend(1);
  for (const Case& c : kCases) {
    for (const bool accumulate : {false, true}) {
      const Result want = run(*backend, c, accumulate, true), got = run(*backend, c, accumulate, false);
      EXPECT_LT(worst(got.y, want.y), 2e-5) << c.text();
      EXPECT_LT(worst(got.dx, want.dx), 2e-5) << c.text();
      // A sum over batch x positions terms in another order: relative to the sum's size.
      EXPECT_LT(worst(got.dw, want.dw), 2e-5 * std::sqrt(double{1.0} * c.batch * c.geometry().positions()))
          << c.text() << " accumulate " << accumulate;
      EXPECT_TRUE(same_bits(got.db, want.db)) << c.text();  // bias_grad on both
    }
  }
}

TEST(CpuConvTest, SameBitsEveryCallAndOnAnyThreadCount) {
  auto one = make_cpu_backend(1), two = make_cpu_backend(2), three = make_cpu_backend(3);
  for (const Case& c :
       {Case{16, 12, 12, 3, 1, 1, 32, 41}, Case{1, 28, 28, 3, 1, 1, 32, 19}, Case{3, 9, 8, 3, 2, 2, 5, 25}}) {
    const Result first = run(*one, c, true, false), again = run(*one, c, true, false);
    for (const Result* r : {&again}) {
      EXPECT_TRUE(same_bits(r->y, first.y) && same_bits(r->dx, first.dx) && same_bits(r->dw, first.dw))
          << c.text();
    }
    for (Backend* b : {two.get(), three.get()}) {
      const Result r = run(*b, c, true, false);
      EXPECT_TRUE(same_bits(r.y, first.y)) << c.text() << " on " << b->name();
      EXPECT_TRUE(same_bits(r.dx, first.dx)) << c.text();
      EXPECT_TRUE(same_bits(r.dw, first.dw)) << c.text();
      EXPECT_TRUE(same_bits(r.db, first.db)) << c.text();
    }
  }
}

// The weight gradient of a batch is its blocks' gradients (kBlock samples each, the last shorter)
// added to dw in block order: the same bits as one accumulating call per block.
TEST(CpuConvTest, TheWeightGradientAddsItsBlocksInOrder) {
  const Case c{16, 10, 10, 3, 1, 1, 24, 2 * CpuConv::kBlock + 5};
  const ConvGeometry g = c.geometry();
  const size_t in = g.input_size(), out = static_cast<size_t>(c.outputs) * g.positions();
  const size_t weights = static_cast<size_t>(c.outputs) * g.patch();
  const auto x = random_floats(c.batch * in, 11), dy = random_floats(c.batch * out, 12),
             w = random_floats(weights, 13);
  for (const int threads : {1, 3}) {
    auto backend = make_cpu_backend(threads);
    std::vector<float> scratch(backend->conv_scratch_floats(c.batch, g, c.outputs));
    std::vector<float> db(static_cast<size_t>(c.outputs));
    for (const bool accumulate : {false, true}) {
      std::vector<float> whole = random_floats(weights, 14), blocks = whole;
      backend->conv_backward(x.data(), dy.data(), c.batch, g, c.outputs, w.data(), nullptr, whole.data(),
                             db.data(), accumulate, scratch.data());
      for (int first = 0; first < c.batch; first += CpuConv::kBlock) {
        const int n = std::min(CpuConv::kBlock, c.batch - first);
        backend->conv_backward(x.data() + first * in, dy.data() + first * out, n, g, c.outputs, w.data(),
                               nullptr, blocks.data(), db.data(), accumulate || first > 0, scratch.data());
      }
      EXPECT_TRUE(same_bits(whole, blocks)) << threads << " threads, accumulate " << accumulate;
    }
  }
}

// Nothing is written past conv_scratch_floats(batch), for that batch and every smaller one (a
// model allocates its scratch for its largest batch), on 1 and 3 threads.
TEST(CpuConvTest, StaysWithinItsScratch) {
  constexpr size_t kGuard = 4096;
  for (const int threads : {1, 3}) {
    auto backend = make_cpu_backend(threads);
    for (const Case& c : kCases) {
      const ConvGeometry g = c.geometry();
      const size_t need = backend->conv_scratch_floats(c.batch, g, c.outputs);
      const size_t in = g.input_size(), out = static_cast<size_t>(c.outputs) * g.positions();
      const size_t weights = static_cast<size_t>(c.outputs) * g.patch();
      const auto x = random_floats(c.batch * in, 21), dy = random_floats(c.batch * out, 22),
                 w = random_floats(weights, 23), bias = random_floats(static_cast<size_t>(c.outputs), 24);
      std::vector<float> y(c.batch * out), dx(c.batch * in), dw(weights), db(static_cast<size_t>(c.outputs));
      for (int batch = c.batch; batch >= 1; batch = batch > 9 ? batch - 7 : batch - 1) {
        EXPECT_LE(backend->conv_scratch_floats(batch, g, c.outputs), need) << c.text() << " batch " << batch;
        std::vector<float> scratch(need + kGuard, std::numeric_limits<float>::quiet_NaN());
        backend->conv_forward(x.data(), batch, g, c.outputs, w.data(), bias.data(), y.data(), scratch.data());
        backend->conv_backward(x.data(), dy.data(), batch, g, c.outputs, w.data(), dx.data(), dw.data(),
                               db.data(), false, scratch.data());
        const bool untouched = std::all_of(scratch.begin() + static_cast<std::ptrdiff_t>(need), scratch.end(),
                                           [](float v) { return std::isnan(v); });
        EXPECT_TRUE(untouched) << c.text() << " batch " << batch << " on " << threads << " threads";
      }
    }
  }
}

}  // namespace
}  // namespace pstrain
