// Shared-memory all-reduce (docs/collective.md, "Same host"). Segment layout, in 64-byte lines:
//   line 0        Identity: magic, version, world, float and scalar capacity, a random token
//   line 1        wake (futex word) and sleepers
//   line 2..9     abort: the first failing rank + 1 and its reason
//   line 10 + r   rank r's arrival count and the (n, k) it is reducing
//   then          world slots of `floats` floats, world scalar slots
// Call number c (from 1): every rank copies its buffer into its slot (unless it computed it there:
// input_buffer) and arrives at barrier 2c-1; rank r sums segment r of every slot, in rank order,
// block by block, writes each block's sum into segment r of every slot, and arrives at 2c; every
// rank then holds the whole sum in its own slot (and copies it out unless that is its buffer).
// Segment r of the slots is touched only by rank r between the two barriers and by no one else
// until every rank arrived at 2c+1, so one segment serves every call. Every rank gets identical
// bits.
#include "worker/collective/shm_allreduce.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <random>
#include <sstream>

#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"
#include "shared/net/shared_memory.h"
#include "shared/net/transport.h"

namespace pstrain {
namespace {

constexpr uint64_t kMagic = 0x50535452534d4152ull;  // "PSTRSMAR"
constexpr uint32_t kVersion = 2;
constexpr size_t kSumBlock = 4096;  // floats summed at a time before they are scattered (16 KiB)
constexpr size_t kLine = 64;
constexpr size_t kAbortLines = 8;
constexpr size_t kReasonBytes = kAbortLines * kLine - 2 * sizeof(uint32_t) - 1;
constexpr size_t kFirstRankLine = 2 + kAbortLines;
constexpr double kWaitReportSeconds = 5;
// A waiting rank spins this long before it sleeps on the futex: long enough to catch a peer that
// is about to arrive (both ranks computing on their own cores), short enough not to steal a
// core from a peer that shares it.
constexpr double kSpinSeconds = 50e-6;

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free");

struct Identity {
  uint64_t magic;
  uint32_t version, world;
  uint64_t floats, scalars;
  uint64_t token[2];
};

struct Wake {
  std::atomic<uint32_t> word;
  std::atomic<uint32_t> sleepers;
};

struct Abort {
  std::atomic<uint32_t> claimed;  // set by the first rank that fails, before it writes `reason`
  std::atomic<uint32_t> by;       // 0, or that rank + 1 once `reason` is written
  char reason[kReasonBytes + 1];
};

struct Arrival {
  std::atomic<uint64_t> count;
  std::atomic<uint64_t> n, k;
};

static_assert(sizeof(Identity) <= kLine && sizeof(Wake) <= kLine && sizeof(Arrival) <= kLine &&
                  sizeof(Abort) <= kAbortLines * kLine,
              "control lines overflow");

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

class ShmCollective final : public Collective {
 public:
  ShmCollective(std::unique_ptr<Collective> ring, double timeout_s, bool try_shm)
      : ring_(std::move(ring)), timeout_s_(timeout_s), try_shm_(try_shm), rank_(ring_->rank()), world_(ring_->world()) {}

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string broadcast(const std::string& blob) override {
    check_not_failed();
    return ring_->broadcast(blob);
  }

  float* input_buffer(size_t n) override {
    return decided_ && segment_.mapped() && n <= floats_ && failed_.empty() ? slot(rank_) : nullptr;
  }

  void allreduce_sum(float* data, size_t n, double* scalars, size_t k) override {
    PSTRAIN_CHECK(data != nullptr || n == 0);
    PSTRAIN_CHECK(scalars != nullptr || k == 0);
    PSTRAIN_CHECK_LE(k, kMaxScalars);
    check_not_failed();
    // A call of scalars alone (batch norm's statistics, before the first gradient) does not size
    // the segment: the ring carries it.
    if (!decided_ && n > 0) decide(n);
    if (!decided_ || !segment_.mapped() || n > floats_) {
      ring_->allreduce_sum(data, n, scalars, k);
      return;
    }
    ++calls_;
    operation_ = "allreduce #" + std::to_string(calls_) + " (shared memory)";
    try {
      reduce(data, n, scalars, k);
    } catch (const Error& e) {
      fail(e.what());
      throw;
    }
  }

 private:
  // Collective: rank 0 makes a segment for `n` floats and broadcasts its name; every rank maps
  // it and the ranks sum their failures over the ring. Shared memory only if every rank could.
  void decide(size_t n) {
    decided_ = true;
    floats_ = std::max<size_t>(n, 1);
    std::string error, name;
    bool ok = try_shm_;
    if (!ok) error = "--shared-memory off";
    uint64_t token[2] = {0, 0};
    if (rank_ == 0 && ok) {
      std::random_device device;
      for (uint64_t& t : token) t = (static_cast<uint64_t>(device()) << 32) | device();
      ok = SharedMemory::create("pstrain-allreduce", bytes(), &segment_, &error);
      if (ok) {
        auto* id = static_cast<Identity*>(segment_.data());
        new (wake()) Wake{};
        new (abort_state()) Abort{};
        for (int r = 0; r < world_; ++r) new (arrival(r)) Arrival{};
        *id = Identity{kMagic, kVersion, static_cast<uint32_t>(world_), floats_, kMaxScalars, {token[0], token[1]}};
        name = segment_.name();
      }
    }
    // Rank 0 always broadcasts (an empty name when it has no segment), so the ranks stay in step.
    std::string blob = name;
    blob.append(reinterpret_cast<const char*>(token), sizeof(token));
    blob = ring_->broadcast(blob);
    if (blob.size() < sizeof(token)) throw Error("shared-memory all-reduce: malformed segment name from rank 0");
    name = blob.substr(0, blob.size() - sizeof(token));
    std::memcpy(token, blob.data() + name.size(), sizeof(token));
    if (rank_ != 0 && ok) {
      if (name.empty()) {
        ok = false;
        error = "rank 0 made no segment";
      } else if ((ok = SharedMemory::open(name, bytes(), &segment_, &error))) {
        const auto* id = static_cast<const Identity*>(segment_.data());
        ok = id->magic == kMagic && id->version == kVersion && id->world == static_cast<uint32_t>(world_) &&
             id->floats == floats_ && id->token[0] == token[0] && id->token[1] == token[1];
        if (!ok) error = name + " is not this ring's segment";
      }
    }
    double failures = ok ? 0 : 1;
    ring_->allreduce_sum(nullptr, 0, &failures, 1);
    segment_.unlink();  // rank 0: every rank has opened it (or given up)
    if (failures > 0) {
      segment_ = SharedMemory();
      PSLOG(INFO) << "ring rank " << rank_ << ": all-reduce over the ring" << (error.empty() ? "" : " (" + error + ")")
                  << "; " << failures << " of " << world_ << " rank(s) cannot share memory with the others";
    } else {
      PSLOG(INFO) << "ring rank " << rank_ << ": all-reduce through shared memory (" << world_
                  << " ranks on this host, " << bytes() / (1 << 20) << " MiB segment)";
    }
  }

  void reduce(float* data, size_t n, double* scalars, size_t k) {
    Arrival* me = arrival(rank_);
    me->n.store(n);
    me->k.store(k);
    const bool in_place = data == slot(rank_);
    if (n > 0 && !in_place) std::memcpy(slot(rank_), data, n * sizeof(float));  // data may be null when n is 0
    if (k > 0) std::memcpy(scalar_slot(rank_), scalars, k * sizeof(double));
    arrive_and_wait(2 * calls_ - 1);
    bool same = true;
    for (int r = 0; r < world_; ++r) same = same && arrival(r)->n.load() == n && arrival(r)->k.load() == k;
    if (!same) {
      std::string sizes;
      for (int r = 0; r < world_; ++r) {
        sizes += (r == 0 ? "rank " : "; rank ") + std::to_string(r) + ": " + std::to_string(arrival(r)->n.load()) +
                 " floats, " + std::to_string(arrival(r)->k.load()) + " scalars";
      }
      throw Error(operation_ + ": the ranks call it with different sizes (" + sizes +
                  "); every rank must call the same collectives with the same sizes");
    }
    // This rank's segment; the first n % world segments hold one float more.
    const size_t base = n / static_cast<size_t>(world_), extra = n % static_cast<size_t>(world_);
    const auto r = static_cast<size_t>(rank_);
    const size_t begin = r * base + std::min(r, extra), length = base + (r < extra ? 1 : 0);
    alignas(kLine) float sum[kSumBlock];
    for (size_t b = begin; b < begin + length; b += kSumBlock) {
      const size_t len = std::min(kSumBlock, begin + length - b);
      std::memcpy(sum, slot(0) + b, len * sizeof(float));
      for (int j = 1; j < world_; ++j) {
        const float* in = slot(j) + b;
        for (size_t i = 0; i < len; ++i) sum[i] += in[i];
      }
      for (int j = 0; j < world_; ++j) std::memcpy(slot(j) + b, sum, len * sizeof(float));
    }
    // The scalar slots too are read before the second barrier: after it a rank may begin the
    // next call and overwrite its slot.
    double sums[kMaxScalars];
    for (size_t i = 0; i < k; ++i) {
      sums[i] = scalar_slot(0)[i];
      for (int j = 1; j < world_; ++j) sums[i] += scalar_slot(j)[i];
    }
    arrive_and_wait(2 * calls_);
    if (n > 0 && !in_place) std::memcpy(data, slot(rank_), n * sizeof(float));
    std::copy(sums, sums + k, scalars);
  }

  // Marks this rank at barrier `target` and waits until every rank is, or one aborted.
  void arrive_and_wait(uint64_t target) {
    arrival(rank_)->count.store(target);
    Wake* w = wake();
    w->word.fetch_add(1);
    if (w->sleepers.load() > 0) futex(&w->word, FUTEX_WAKE, INT_MAX, nullptr);
    if (all_arrived(target)) return;
    const auto start = Clock::now();
    const auto spin_until = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kSpinSeconds));
    while (Clock::now() < spin_until) {
      for (int i = 0; i < 64; ++i) cpu_relax();
      if (all_arrived(target)) return;
    }
    const auto deadline = deadline_after(timeout_s_);
    auto report = deadline_after(kWaitReportSeconds);
    for (;;) {
      const uint32_t seen = w->word.load();
      w->sleepers.fetch_add(1);
      if (all_arrived(target)) {
        w->sleepers.fetch_sub(1);
        return;
      }
      const auto now = Clock::now();
      const auto until = std::min(deadline, report);
      if (now < until) {
        const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - now).count();
        const timespec ts{static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
        futex(&w->word, FUTEX_WAIT, seen, &ts);
      }
      w->sleepers.fetch_sub(1);
      if (all_arrived(target)) return;
      if (Clock::now() >= deadline) {
        std::ostringstream os;
        os << operation_ << " timed out after " << timeout_s_ << " s: no arrival from " << missing(target);
        throw Error(os.str());
      }
      if (Clock::now() >= report) {
        PSLOG(INFO) << "ring rank " << rank_ << ": " << operation_ << " waiting for " << missing(target);
        report = deadline_after(kWaitReportSeconds);
      }
    }
  }

  // Whether every rank reached `target`; throws if a rank aborted instead.
  bool all_arrived(uint64_t target) {
    const uint32_t by = abort_state()->by.load();
    if (by != 0) {
      const std::string reason(abort_state()->reason, strnlen(abort_state()->reason, kReasonBytes));
      cause_ = reason;
      throw Error(operation_ + " aborted: " + reason);
    }
    for (int r = 0; r < world_; ++r) {
      if (arrival(r)->count.load() < target) return false;
    }
    return true;
  }

  std::string missing(uint64_t target) {
    std::string text;
    for (int r = 0; r < world_; ++r) {
      if (arrival(r)->count.load() < target) text += (text.empty() ? "rank " : ", rank ") + std::to_string(r);
    }
    return text;
  }

  // Stays failed; the first failing rank tells the others why and wakes them.
  void fail(const std::string& what) {
    failed_ = what;
    const std::string reason = cause_.empty() ? "rank " + std::to_string(rank_) + ": " + what : cause_;
    uint32_t expected = 0;
    Abort* a = abort_state();
    if (a->claimed.compare_exchange_strong(expected, 1)) {
      const size_t len = std::min(reason.size(), kReasonBytes);
      std::memcpy(a->reason, reason.data(), len);
      a->reason[len] = '\0';
      a->by.store(static_cast<uint32_t>(rank_ + 1));  // publishes the reason
    }
    wake()->word.fetch_add(1);
    futex(&wake()->word, FUTEX_WAKE, INT_MAX, nullptr);
  }

  void check_not_failed() const {
    if (!failed_.empty()) {
      throw Error("shared-memory collective rank " + std::to_string(rank_) + " failed earlier: " + failed_);
    }
  }

  size_t slot_floats() const { return round_up(floats_, kLine / sizeof(float)); }
  size_t slots_offset() const { return (kFirstRankLine + static_cast<size_t>(world_)) * kLine; }
  size_t bytes() const {
    return slots_offset() + static_cast<size_t>(world_) * slot_floats() * sizeof(float) +
           static_cast<size_t>(world_) * kMaxScalars * sizeof(double);
  }
  char* base() const { return static_cast<char*>(segment_.data()); }
  Wake* wake() const { return reinterpret_cast<Wake*>(base() + kLine); }
  Abort* abort_state() const { return reinterpret_cast<Abort*>(base() + 2 * kLine); }
  Arrival* arrival(int r) const {
    return reinterpret_cast<Arrival*>(base() + (kFirstRankLine + static_cast<size_t>(r)) * kLine);
  }
  float* slot(int r) const {
    return reinterpret_cast<float*>(base() + slots_offset()) + static_cast<size_t>(r) * slot_floats();
  }
  double* scalar_slot(int r) const {
    return reinterpret_cast<double*>(slot(world_)) + static_cast<size_t>(r) * kMaxScalars;
  }

  std::unique_ptr<Collective> ring_;
  const double timeout_s_;
  const bool try_shm_;
  const int rank_, world_;
  bool decided_ = false;
  size_t floats_ = 0;
  SharedMemory segment_;
  uint64_t calls_ = 0;
  std::string operation_;
  std::string failed_;
  std::string cause_;
};

}  // namespace

std::unique_ptr<Collective> make_shared_memory_collective(std::unique_ptr<Collective> ring, double timeout_s,
                                                          bool try_shared_memory) {
  if (ring->world() == 1) return ring;
  return std::make_unique<ShmCollective>(std::move(ring), timeout_s, try_shared_memory);
}

}  // namespace pstrain
