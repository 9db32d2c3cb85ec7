#include "worker/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace pstrain {

namespace {

constexpr auto kSpin = std::chrono::microseconds(500);

size_t bound(size_t n, int part, int parts) { return n * static_cast<size_t>(part) / static_cast<size_t>(parts); }

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() holds or kSpin has passed; whether done() held.
template <typename Done>
bool spin_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (done()) return true;
    cpu_relax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) helpers_.emplace_back([this, i] { helper(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void ThreadPool::run(size_t n, const std::function<void(size_t, size_t)>& part, size_t min_per_thread) {
  const int parts = static_cast<int>(std::min<size_t>(threads(), n / std::max<size_t>(min_per_thread, 1)));
  if (parts <= 1) {
    if (n > 0) part(0, n);
    return;
  }
  std::lock_guard<std::mutex> one_run(run_mu_);
  part_ = &part;
  n_ = n;
  parts_ = parts;
  pending_.store(static_cast<int>(helpers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);  // a helper about to sleep sees the new generation
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_.notify_all();
  part(0, bound(n, 1, parts));
  const auto finished = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(finished)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, finished);
  }
}

void ThreadPool::helper(int index) {
  uint64_t seen = 0;
  const auto moved = [&] { return generation_.load(std::memory_order_acquire) != seen || stop_.load(); };
  for (;;) {
    if (!spin_until(moved)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, moved);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    if (index < parts_) (*part_)(bound(n_, index, parts_), bound(n_, index + 1, parts_));
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // run() about to sleep sees pending_ at 0
      done_.notify_one();
    }
  }
}

}  // namespace pstrain
