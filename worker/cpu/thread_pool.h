// A fixed set of threads for the CPU backend: work split into contiguous index ranges (samples,
// planes, channels, rows of a product), each computed as the serial loop would. The ranges depend
// only on the work's size and the number of threads, so a job's floats are the same every time.
//
// A step hands out dozens of parts, often well under a millisecond apart, so a helper spins up to
// 0.5 ms for the next one before it sleeps (a futex wake-up costs more than a small part), and so
// does the caller for the last part. Idle longer, as while a worker waits for the PS, the helpers
// sleep. With --threads 1 there are no helpers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pstrain {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads - 1 helper threads; the caller is the first
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }
  // Calls part(begin, end) on up to threads() contiguous, nearly equal, non-empty ranges covering
  // [0, n), the first on the calling thread, and returns when every call has returned. One call
  // over [0, n) on the caller with one thread or when n < 2 * min_per_thread. `part` must not
  // throw, nor call run() itself.
  void run(size_t n, const std::function<void(size_t, size_t)>& part, size_t min_per_thread = 1);

 private:
  void helper(int index);

  std::mutex run_mu_;  // one run at a time
  // The job: written by run() before generation_ moves on, read by the helpers after.
  const std::function<void(size_t, size_t)>* part_ = nullptr;
  size_t n_ = 0;
  int parts_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // helpers still on the current job
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // for sleeping only
  std::condition_variable start_, done_;
  std::vector<std::thread> helpers_;
};

}  // namespace pstrain
