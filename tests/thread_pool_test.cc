// The CPU backend's threads (worker/cpu/thread_pool.h), and the backend split over them: the same
// floats as on one thread for every operation but a large GEMM split by rows or columns (OpenBLAS
// picks its kernel by the product's size, so a part may round differently: equal within 1e-5),
// and the same floats on the same number of threads every time.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "test_util/random.h"
#include "worker/backend/backend.h"
#include "worker/cpu/thread_pool.h"
#include "worker/model/model.h"

namespace pstrain {
namespace {

using test::random_floats;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ThreadPoolTest, RangesCoverEveryIndexOnceTheCallerTakingTheFirst) {
  for (const int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (const size_t n : {0, 1, 2, 3, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      std::mutex mu;
      std::vector<std::pair<size_t, size_t>> ranges;
      bool first_on_caller = n == 0;
      const std::thread::id caller = std::this_thread::get_id();
      pool.run(n, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) ++hits[i];
        std::lock_guard<std::mutex> lock(mu);
        ranges.emplace_back(lo, hi);
        if (lo == 0) first_on_caller = std::this_thread::get_id() == caller;
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "threads " << threads << " n " << n << " i " << i;
      EXPECT_TRUE(first_on_caller);
      EXPECT_LE(ranges.size(), static_cast<size_t>(threads));
      EXPECT_EQ(ranges.size(), n == 0 ? 0 : std::min<size_t>(n, threads));
      for (const auto& [lo, hi] : ranges) EXPECT_LT(lo, hi);
    }
  }
}

TEST(ThreadPoolTest, SmallWorkStaysOnTheCaller) {
  ThreadPool pool(4);
  int calls = 0;
  pool.run(31, [&](size_t lo, size_t hi) {
    ++calls;
    EXPECT_EQ(lo, 0u);
    EXPECT_EQ(hi, 31u);
  }, 16);
  EXPECT_EQ(calls, 1);
  std::atomic<int> parts{0};
  pool.run(64, [&](size_t, size_t) { ++parts; }, 16);
  EXPECT_EQ(parts, 4);
}

// Many short runs back to back, with the number of parts changing: no wake-up is lost, no part
// runs twice (a lost wake-up hangs this test, a repeated part breaks the sum).
TEST(ThreadPoolTest, ManyShortRunsEachComplete) {
  ThreadPool pool(3);
  std::atomic<size_t> sum{0};
  size_t want = 0;
  for (size_t round = 0; round < 5000; ++round) {
    const size_t n = 1 + round % 5;
    pool.run(n, [&](size_t lo, size_t hi) { sum += hi - lo; });
    want += n;
  }
  EXPECT_EQ(sum, want);
}

// --- The backend on threads against the backend on one thread ------------------------------------

bool near(const std::vector<float>& a, const std::vector<float>& b, double rel) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::fabs(double{a[i]} - b[i]) > rel * (1.0 + std::fabs(double{a[i]}))) return false;
  }
  return true;
}

TEST(CpuThreadsTest, GemmsSplitOverThreadsGiveTheSameFloats) {
  auto one = make_cpu_backend(1);
  auto three = make_cpu_backend(3);
  // Shapes above the split threshold: tall (split by rows), wide (by columns), and each transpose.
  for (const auto& [m, n, k] : {std::tuple{300, 40, 200}, std::tuple{24, 256, 784}, std::tuple{128, 784, 256}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        const auto a = random_floats(static_cast<size_t>(m) * k, 1), b = random_floats(static_cast<size_t>(k) * n, 2);
        std::vector<float> c1 = random_floats(static_cast<size_t>(m) * n, 3), c3 = c1;
        one->gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 1.0f, c1.data());
        three->gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 1.0f, c3.data());
        EXPECT_TRUE(near(c1, c3, 1e-5)) << m << "x" << n << "x" << k << " ta " << ta << " tb " << tb;
      }
    }
  }
  // The per-sample products of a convolution, batched and summed over the samples: each product
  // whole on one thread, so bit for bit.
  const int m = 64, n = 196, k = 288, count = 9;
  const auto w = random_floats(static_cast<size_t>(m) * k, 4);
  const auto col = random_floats(static_cast<size_t>(count) * k * n, 5);
  const auto dy = random_floats(static_cast<size_t>(count) * m * n, 6);
  std::vector<float> y1(static_cast<size_t>(count) * m * n), y3(y1.size());
  one->gemm_batched(false, false, m, n, k, 1.0f, w.data(), 0, col.data(), static_cast<size_t>(k) * n, 0.0f, y1.data(),
                    static_cast<size_t>(m) * n, count);
  three->gemm_batched(false, false, m, n, k, 1.0f, w.data(), 0, col.data(), static_cast<size_t>(k) * n, 0.0f, y3.data(),
                      static_cast<size_t>(m) * n, count);
  EXPECT_TRUE(same_bits(y1, y3));
  std::vector<float> dw1 = random_floats(static_cast<size_t>(m) * k, 7), dw3 = dw1;
  one->gemm_sum(false, true, m, k, n, 1.0f, dy.data(), static_cast<size_t>(m) * n, col.data(),
                static_cast<size_t>(k) * n, 1.0f, dw1.data(), count);
  three->gemm_sum(false, true, m, k, n, 1.0f, dy.data(), static_cast<size_t>(m) * n, col.data(),
                  static_cast<size_t>(k) * n, 1.0f, dw3.data(), count);
  EXPECT_TRUE(same_bits(dw1, dw3));
  // gemm_sum is the gemms of its terms, added in order, in calls of 16 rows whatever the thread
  // count (OpenBLAS's Haswell and Zen kernels round a row differently in calls of other shapes).
  std::vector<float> dw_loop = random_floats(static_cast<size_t>(m) * k, 7);
  for (int lo = 0; lo < m; lo += 16) {
    for (int i = 0; i < count; ++i) {
      one->gemm(false, true, std::min(16, m - lo), k, n, 1.0f, dy.data() + static_cast<size_t>(i) * m * n + lo * n,
                col.data() + static_cast<size_t>(i) * k * n, 1.0f, dw_loop.data() + static_cast<size_t>(lo) * k);
    }
  }
  EXPECT_TRUE(same_bits(dw1, dw_loop));
}

// A training step of a CNN with every kind of layer, at sizes where each operation splits: equal
// to one thread's within rounding, and the same bits on the same threads every time.
TEST(CpuThreadsTest, ATrainingStepOnThreadsEqualsOneThread) {
  const std::string spec =
      "conv 8 3 pad=1, relu, maxpool 2, conv 16 3 pad=1, tanh, avgpool 2, flatten, dense 64, relu, dropout 0.25, "
      "dense 10";
  const int batch = 40;
  const auto x = random_floats(static_cast<size_t>(batch) * 784, 8);
  std::vector<int32_t> y(batch);
  std::vector<uint64_t> records(batch);
  for (int i = 0; i < batch; ++i) y[i] = i % 10, records[i] = 100 + i;
  const auto step = [&](int threads, double* loss) {
    auto backend = make_cpu_backend(threads);
    Model model(spec, {1, 28, 28}, 10, batch, false, *backend);
    std::vector<float> params(model.layout().total()), grad(params.size());
    model.init(5, params.data());
    *loss = model.train_step(params.data(), x.data(), y.data(), batch, grad.data(), nullptr, false, {3, 1, records.data()})
                .loss_sum;
    return grad;
  };
  double loss1 = 0, loss3 = 0, again = 0;
  const std::vector<float> one = step(1, &loss1), three = step(3, &loss3);
  EXPECT_NEAR(loss3, loss1, 1e-6 * loss1);
  EXPECT_TRUE(near(three, one, 1e-5));
  EXPECT_TRUE(same_bits(step(3, &again), three));
  EXPECT_EQ(again, loss3);
  EXPECT_TRUE(same_bits(step(2, &again), step(2, &loss1)));
}

}  // namespace
}  // namespace pstrain
