#include "worker/backend/replica.h"

#include <gtest/gtest.h>

#include <vector>

#include "shared/util/error.h"

namespace pstrain {
namespace {

TEST(ReplicaTest, CpuReplicaSharesHostMemory) {
  BackendOptions o;
  o.device = DeviceKind::kCpu;
  auto backend = make_backend(o);
  EXPECT_TRUE(backend->host_accessible());
  Replica replica(*backend, 10, 4);
  EXPECT_EQ(replica.host_params(), replica.params());
  EXPECT_EQ(replica.host_grad(), replica.grad());
  const float x[4] = {1, 2, 3, 4};
  EXPECT_EQ(replica.input(x, 4), x);
  EXPECT_EQ(backend->bytes_allocated(), 2 * 10 * sizeof(float));
}

// place_host_grad moves where backward writes the gradient (a shared-memory slot, say); the
// parameters stay where they were.
TEST(ReplicaTest, CpuReplicaComputesTheGradientWhereItIsPlaced) {
  BackendOptions o;
  o.device = DeviceKind::kCpu;
  auto backend = make_backend(o);
  Replica replica(*backend, 10, 4);
  const float* params = replica.params();
  std::vector<float> elsewhere(10);
  replica.place_host_grad(elsewhere.data());
  EXPECT_EQ(replica.grad(), elsewhere.data());
  EXPECT_EQ(replica.host_grad(), elsewhere.data());
  EXPECT_EQ(replica.params(), params);
  EXPECT_EQ(replica.host_params(), params);
}

// compute_from points the parameters at a same-host PS's parameter area (plain sync), which holds
// the current values already: forward and backward read them there, the gradient stays.
TEST(ReplicaTest, CpuReplicaComputesFromTheAreaItIsGiven) {
  BackendOptions o;
  o.device = DeviceKind::kCpu;
  auto backend = make_backend(o);
  Replica replica(*backend, 10, 4);
  float* grad = replica.grad();
  std::vector<float> area(10);
  for (int i = 0; i < 10; ++i) area[static_cast<size_t>(i)] = replica.host_params()[i] = static_cast<float>(i) + 0.5f;
  replica.compute_from(area.data());
  EXPECT_EQ(replica.params(), area.data());
  EXPECT_EQ(replica.host_params(), area.data());
  EXPECT_EQ(replica.grad(), grad);
}

TEST(ReplicaTest, GpuRequestWithoutGpuIsAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  BackendOptions o;
  for (const auto& [index, flag] : {std::pair{-1, "--device cuda:"}, std::pair{1, "--device cuda:1:"}}) {
    o.device = DeviceKind::kCuda;
    o.device_index = index;
    try {
      make_backend(o);
      ADD_FAILURE() << flag << " did not fail";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("no CUDA device is visible"), std::string::npos) << what;
      EXPECT_EQ(what.rfind(flag, 0), 0u) << what;
    }
  }
  o.device = DeviceKind::kAuto;
  EXPECT_TRUE(make_backend(o)->host_accessible());  // auto falls back to the CPU
}

TEST(ReplicaTest, GpuReplicaStagesThroughHostBuffers) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  BackendOptions o;
  o.device = DeviceKind::kCuda;
  o.device_index = 0;
  auto backend = make_backend(o);
  Replica replica(*backend, 1000, 64);
  EXPECT_NE(replica.host_params(), replica.params());
  for (int i = 0; i < 1000; ++i) replica.host_params()[i] = static_cast<float>(i);
  replica.params_to_device();
  std::vector<float> back(1000);
  backend->download(back.data(), replica.params(), 1000);
  EXPECT_EQ(back[999], 999.0f);
  backend->upload(replica.grad(), back.data(), 1000);
  replica.grad_to_host(500, 1000);
  EXPECT_EQ(replica.host_grad()[999], 999.0f);
  EXPECT_EQ(replica.host_grad()[0], 0.0f);  // outside the range: not copied
}

}  // namespace
}  // namespace pstrain
