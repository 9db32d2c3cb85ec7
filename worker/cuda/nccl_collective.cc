#include "worker/cuda/nccl_collective.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "shared/util/clock.h"
#include "shared/util/error.h"
#include "shared/util/log.h"
#include "shared/net/transport.h"
#include "worker/cuda/cuda_check.h"

namespace pstrain {
namespace {

// ncclInProgress is not a failure of a non-blocking communicator: the caller waits for it.
#define PSTRAIN_NCCL_CHECK(comm, call)                                          \
  do {                                                                          \
    const ncclResult_t pstrain_nccl_r_ = (call);                                \
    if (pstrain_nccl_r_ != ncclSuccess && pstrain_nccl_r_ != ncclInProgress)    \
      throw_nccl_error(pstrain_nccl_r_, (comm), #call, __FILE__, __LINE__);     \
  } while (0)

[[noreturn]] void throw_nccl_error(ncclResult_t r, ncclComm_t comm, const char* call, const char* file, int line) {
  const char* last = ncclGetLastError(comm);
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + ncclGetErrorString(r) +
              (last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : std::string()));
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(std::unique_ptr<Collective> bootstrap, int device, double timeout_s)
      : bootstrap_(std::move(bootstrap)), timeout_s_(timeout_s), device_(device) {
    // The communicator, its stream and buffers belong to this device, whatever is current.
    ScopedDevice on(device_);
    warn_if_blocking_forced();
    ncclUniqueId id;
    std::string blob;
    if (rank() == 0) {
      PSTRAIN_NCCL_CHECK(nullptr, ncclGetUniqueId(&id));
      blob.assign(reinterpret_cast<const char*>(&id), sizeof id);
    }
    blob = bootstrap_->broadcast(blob);
    if (blob.size() != sizeof id) throw Error("NCCL unique id from rank 0 has " + std::to_string(blob.size()) + " bytes");
    std::memcpy(&id, blob.data(), sizeof id);

    try {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;  // every wait below is ours, bounded by the deadline
      const auto deadline = deadline_after(timeout_s_);
      PSTRAIN_NCCL_CHECK(nullptr, ncclCommInitRankConfig(&comm_, world(), id, rank(), &config));
      wait_for_comm("creating the NCCL communicator", deadline);
      PSTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      PSTRAIN_CUDA_CHECK(cudaMalloc(&device_scalars_, kMaxScalars * sizeof(double)));
      PSTRAIN_CUDA_CHECK(cudaMallocHost(&host_scalars_, kMaxScalars * sizeof(double)));
    } catch (...) {
      failed_ = true;  // the destructor does not run for a throwing constructor: abort here
      release();
      throw;
    }
    PSLOG(INFO) << "w" << rank() << ": NCCL communicator of " << world() << " rank(s) on cuda:" << device_;
  }

  ~NcclCollective() override { release(); }

  int rank() const override { return bootstrap_->rank(); }
  int world() const override { return bootstrap_->world(); }
  bool on_device() const override { return true; }

  void allreduce_sum(float* data, size_t n, double* scalars, size_t k) override {
    if (failed_) throw Error("the NCCL communicator failed earlier");
    PSTRAIN_CHECK(k <= kMaxScalars);
    PSTRAIN_CHECK(data != nullptr || n == 0);
    failed_ = true;  // until this call completes
    ScopedDevice on(device_);
    const auto deadline = deadline_after(timeout_s_);
    // The backward pass ran on the backend's stream: all of it must be done before NCCL reads.
    PSTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
    if (k > 0) {
      std::memcpy(host_scalars_, scalars, k * sizeof(double));
      PSTRAIN_CUDA_CHECK(cudaMemcpyAsync(device_scalars_, host_scalars_, k * sizeof(double), cudaMemcpyHostToDevice, stream_));
    }
    PSTRAIN_NCCL_CHECK(comm_, ncclGroupStart());
    try {
      if (n > 0) PSTRAIN_NCCL_CHECK(comm_, ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, stream_));
      if (k > 0) {
        PSTRAIN_NCCL_CHECK(comm_, ncclAllReduce(device_scalars_, device_scalars_, k, ncclFloat64, ncclSum, comm_, stream_));
      }
    } catch (...) {
      ncclGroupEnd();  // never leave the thread inside a group; the communicator is aborted later
      throw;
    }
    PSTRAIN_NCCL_CHECK(comm_, ncclGroupEnd());
    wait_for_comm("enqueueing the all-reduce", deadline);
    if (k > 0) {
      PSTRAIN_CUDA_CHECK(cudaMemcpyAsync(host_scalars_, device_scalars_, k * sizeof(double), cudaMemcpyDeviceToHost, stream_));
    }
    wait_for_stream(deadline);
    if (k > 0) std::memcpy(scalars, host_scalars_, k * sizeof(double));
    failed_ = false;
  }

  std::string broadcast(const std::string& blob_from_rank0) override { return bootstrap_->broadcast(blob_from_rank0); }

 private:
  // Waits until the non-blocking communicator has no operation in progress.
  void wait_for_comm(const char* what, Clock::time_point deadline) {
    for (;;) {
      ncclResult_t state = ncclSuccess;
      PSTRAIN_NCCL_CHECK(comm_, ncclCommGetAsyncError(comm_, &state));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(std::string(what) + " failed: " + ncclGetErrorString(state));
      if (Clock::now() >= deadline) fail(std::string(what) + " did not finish within " + std::to_string(timeout_s_) + " s");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // Waits until the stream's work is done, checking the communicator for errors of peers.
  void wait_for_stream(Clock::time_point deadline) {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) PSTRAIN_CUDA_CHECK(e);
      ncclResult_t state = ncclSuccess;
      PSTRAIN_NCCL_CHECK(comm_, ncclCommGetAsyncError(comm_, &state));
      if (state != ncclSuccess && state != ncclInProgress) fail(std::string("NCCL all-reduce failed: ") + ncclGetErrorString(state));
      if (Clock::now() >= deadline) {
        fail("NCCL all-reduce did not complete within " + std::to_string(timeout_s_) +
             " s (--timeout): a peer died, stalls or called a different collective");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // NCCL_COMM_BLOCKING=1 in the environment overrides config.blocking = 0: NCCL calls then
  // block inside the library, where no deadline of ours can end them.
  void warn_if_blocking_forced() const {
    const char* forced = std::getenv("NCCL_COMM_BLOCKING");
    if (forced != nullptr && std::strcmp(forced, "0") != 0) {
      PSLOG(WARN) << "NCCL_COMM_BLOCKING=" << forced << " is set: NCCL calls block, so --timeout cannot end a "
                  << "wait for a dead peer inside NCCL; unset it to keep the deadlines";
    }
  }

  // Frees everything held; a failed communicator (or one whose peers are gone) is aborted first,
  // as finalising it, or waiting for its stream, could wait forever for a dead peer. Never
  // throws; safe to call twice.
  void release() noexcept {
    ScopedDevice on(device_, std::nothrow);
    if (!failed_ && stream_ != nullptr) PSTRAIN_CUDA_WARN(cudaStreamSynchronize(stream_));
    if (comm_ != nullptr) {
      if (failed_ || !finalize()) {
        const ncclResult_t r = ncclCommAbort(comm_);
        if (r != ncclSuccess) PSLOG(WARN) << "ncclCommAbort: " << ncclGetErrorString(r);
      } else {
        const ncclResult_t r = ncclCommDestroy(comm_);
        if (r != ncclSuccess) PSLOG(WARN) << "ncclCommDestroy: " << ncclGetErrorString(r);
      }
      comm_ = nullptr;
    }
    if (stream_ != nullptr) PSTRAIN_CUDA_WARN(cudaStreamDestroy(stream_));
    if (device_scalars_ != nullptr) PSTRAIN_CUDA_WARN(cudaFree(device_scalars_));
    if (host_scalars_ != nullptr) PSTRAIN_CUDA_WARN(cudaFreeHost(host_scalars_));
    stream_ = nullptr;
    device_scalars_ = nullptr;
    host_scalars_ = nullptr;
  }

  [[noreturn]] void fail(const std::string& message) {
    failed_ = true;
    throw Error("w" + std::to_string(rank()) + ": " + message);
  }

  // Flushes the communicator before it is destroyed; false when that does not finish in time.
  bool finalize() noexcept {
    const ncclResult_t r = ncclCommFinalize(comm_);
    if (r != ncclSuccess && r != ncclInProgress) return false;
    const auto deadline = deadline_after(timeout_s_);
    for (;;) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return false;
      if (state == ncclSuccess) return true;
      if (state != ncclInProgress || Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::unique_ptr<Collective> bootstrap_;
  const double timeout_s_;
  const int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  double* device_scalars_ = nullptr;
  double* host_scalars_ = nullptr;  // pinned: the copies stay asynchronous
  bool failed_ = false;
};

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<Collective> make_nccl_collective(std::unique_ptr<Collective> bootstrap, int device,
                                                 double timeout_s) {
  PSTRAIN_CHECK(bootstrap != nullptr);
  PSTRAIN_CHECK(device >= 0);
  return std::make_unique<NcclCollective>(std::move(bootstrap), device, timeout_s);
}

}  // namespace pstrain
