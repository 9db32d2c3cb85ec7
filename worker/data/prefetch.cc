#include "worker/data/prefetch.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "shared/util/error.h"
#include "worker/data/augment.h"
#include "worker/data/dataset.h"
#include "worker/data/sampler.h"

namespace pstrain {

class Prefetcher::Impl {
 public:
  Impl(const Dataset& data, const ShardSampler& sampler, uint64_t first_epoch, uint64_t epochs,
       uint64_t max_batches, size_t depth, uint64_t first_step, const AugmentOptions& augment)
      : data_(data),
        sampler_(sampler),
        augment_(augment),
        shape_(data.sample_shape()),
        first_epoch_(first_epoch),
        first_step_(first_step),
        epochs_(epochs),
        max_batches_(max_batches),
        ring_(depth),
        records_(static_cast<size_t>(sampler.batch())) {
    free_.reserve(depth + 2);  // every buffer in flight: the ring, the one filling, the consumer's
    thread_ = std::thread([this] { run(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    space_.notify_all();
    thread_.join();
  }

  bool next(Batch& out, bool wake) {
    std::unique_lock<std::mutex> lock(mu_);
    if (count_ == 0 && !done_ && !wake) {  // the reader may be waiting for a wake_reader()
      lock.unlock();
      space_.notify_one();
      lock.lock();
    }
    ready_.wait(lock, [this] { return count_ > 0 || done_; });
    if (count_ == 0) {
      if (failed_) throw Error(error_);
      return false;
    }
    Batch& slot = ring_[head_];
    std::swap(out, slot);
    if (free_.size() < free_.capacity()) free_.push_back(std::move(slot));
    head_ = (head_ + 1) % ring_.size();
    --count_;
    lock.unlock();
    if (wake) space_.notify_one();
    return true;
  }

  void wake_reader() { space_.notify_one(); }

 private:
  void run() {
    bool failed = true;
    std::string error;
    try {
      produce();
      failed = false;
    } catch (const Error& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = std::string("data reader thread: ") + e.what();
    } catch (...) {
      error = "data reader thread: unknown exception";
    }
    finish(failed, error);
  }

  void produce() {
    uint64_t produced = 0;
    for (uint64_t i = 0; i < epochs_; ++i) {
      const uint64_t e = first_epoch_ + i;
      for (uint64_t s = i == 0 ? first_step_ : 0; s < sampler_.steps_per_epoch(); ++s) {
        if (max_batches_ != 0 && produced == max_batches_) return;
        for (int j = 0; j < sampler_.micro_batches(); ++j) {
          Batch batch;
          if (!acquire(batch)) return;
          fill(batch, e, s, j);
          publish(std::move(batch));
        }
        ++produced;
      }
    }
  }

  // Waits for queue space, then hands out a recycled buffer if there is one.
  bool acquire(Batch& batch) {
    std::unique_lock<std::mutex> lock(mu_);
    space_.wait(lock, [this] { return stop_ || count_ < ring_.size(); });
    if (stop_) return false;
    if (!free_.empty()) {
      batch = std::move(free_.back());
      free_.pop_back();
    }
    return true;
  }

  void fill(Batch& batch, uint64_t epoch, uint64_t step, int micro) {
    const size_t size = static_cast<size_t>(sampler_.micro_size(micro));
    batch.epoch = epoch;
    batch.step = step;
    batch.micro = micro;
    batch.micro_batches = sampler_.micro_batches();
    batch.size = static_cast<int>(size);
    batch.x.resize(size * data_.feature_dim());
    batch.y.resize(size);
    sampler_.micro_records(epoch, step, micro, records_.data());
    if (data_.id_fields() > 0) {
      data_.read_with_ids(records_.data(), size, batch.x.data(), batch.y.data(), &batch.ids);
    } else {
      data_.read(records_.data(), size, batch.x.data(), batch.y.data());
    }
    batch.records.assign(records_.begin(), records_.begin() + size);
    augment_batch(augment_, shape_, epoch, batch.records.data(), size, batch.x.data(), &augment_scratch_);
    if (data_.target_width() > 0) {
      batch.t.resize(size * data_.target_width());
      if (data_.targets_are_labels()) {  // the labels just read, as floats
        for (size_t i = 0; i < size; ++i) batch.t[i] = batch.y[i] == 1 ? 1.0f : 0.0f;
      } else {
        data_.read_targets(records_.data(), size, batch.t.data());
      }
    }
  }

  void publish(Batch&& batch) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ring_[(head_ + count_) % ring_.size()] = std::move(batch);
      ++count_;
    }
    ready_.notify_one();
  }

  void finish(bool failed, const std::string& error) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      failed_ = failed;
      error_ = error;
      done_ = true;
    }
    ready_.notify_one();
  }

  const Dataset& data_;
  const ShardSampler& sampler_;
  const AugmentOptions augment_;
  const std::vector<size_t> shape_;  // one record's, for augment_
  std::vector<float> augment_scratch_;
  const uint64_t first_epoch_, first_step_, epochs_, max_batches_;

  std::mutex mu_;
  std::condition_variable space_;  // the reader waits for queue space (or stop)
  std::condition_variable ready_;  // the consumer waits for a batch (or the end)
  std::vector<Batch> ring_;        // queued batches: ring_[head_], ... count_ of them
  size_t head_ = 0, count_ = 0;
  std::vector<Batch> free_;        // buffers handed back by the consumer
  bool stop_ = false, done_ = false, failed_ = false;
  std::string error_;              // the reader's failure, set with done_

  std::vector<size_t> records_;    // the reader thread's record indices for one batch
  std::thread thread_;             // last: started after everything above exists
};

Prefetcher::Prefetcher(const Dataset& data, const ShardSampler& sampler, uint64_t first_epoch,
                       uint64_t epochs, uint64_t max_batches, int depth, uint64_t first_step,
                       const AugmentOptions& augment) {
  if (depth < 1) throw Error("prefetcher: depth must be >= 1, got " + std::to_string(depth));
  const std::string refusal = augment_refusal(augment, data.sample_shape());
  if (!refusal.empty()) throw UsageError(refusal);
  impl_ = std::make_unique<Impl>(data, sampler, first_epoch, epochs, max_batches,
                                 static_cast<size_t>(depth), first_step, augment);
}

Prefetcher::~Prefetcher() = default;

bool Prefetcher::next(Batch& out) { return impl_->next(out, true); }
bool Prefetcher::take(Batch& out) { return impl_->next(out, false); }
void Prefetcher::wake_reader() { impl_->wake_reader(); }

}  // namespace pstrain
