// Buffers on loan to the ring's link (Loans): the all-reduce sends the caller's memory without a
// copy, and the caller may reuse it only once the transport let go of every frame; apart from the
// ring's protocol because it is the one piece that threads share (ZeroMQ's I/O thread returns the
// loans; docs/threading.md).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>

#include "shared/net/frame.h"
#include "shared/util/clock.h"

namespace pstrain {

// Buffers on loan to the link: a frame that borrows the caller's memory holds a loan until the
// transport is done with it (Frame's keeper), so the collective can wait until nothing reads the
// caller's buffer any more before it returns it.
class Loans {
 public:
  Loans() : state_(std::make_shared<State>()) {}

  // A frame over [data, data + bytes) without a copy. The memory must stay unchanged until
  // outstanding() drops back (wait_returned).
  Frame borrow(const void* data, size_t bytes) {
    if (bytes == 0) return Frame();
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      ++state_->outstanding;
    }
    // The deleter runs once, from whichever thread lets go of the last reference (usually
    // ZeroMQ's I/O thread, after the bytes were written to the kernel).
    std::shared_ptr<State> state = state_;
    std::shared_ptr<const void> keeper(data, [state](const void*) {
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        --state->outstanding;
      }
      state->returned.notify_all();
    });
    return Frame(std::move(keeper), data, bytes);
  }

  size_t outstanding() const {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->outstanding;
  }

  bool wait_returned(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(state_->mutex);
    return state_->returned.wait_until(lock, deadline, [&] { return state_->outstanding == 0; });
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable returned;
    size_t outstanding = 0;
  };
  std::shared_ptr<State> state_;  // shared with the keepers, which may run later
};

}  // namespace pstrain
