// shared/shared_memory.h: what same-host peers rely on. A segment a peer opens shows the creator's
// writes; a read-only mapping (the PS's parameter area in a worker) cannot change them; a wrong
// size or a removed name is a clear error.
#include "shared/shared_memory.h"

#include <gtest/gtest.h>

#include <string>

namespace pstrain {
namespace {

TEST(SharedMemoryTest, PeerSeesTheCreatorsWritesAndTheNameGoesAtUnlink) {
  SharedMemory created;
  std::string error;
  ASSERT_TRUE(SharedMemory::create("pstrain-test", 4096, &created, &error)) << error;
  EXPECT_EQ(created.name().rfind("/pstrain-test-", 0), 0u) << created.name();
  auto* floats = static_cast<float*>(created.data());
  EXPECT_EQ(floats[1023], 0.0f);  // zero-filled

  SharedMemory peer;
  ASSERT_TRUE(SharedMemory::open(created.name(), 4096, &peer, &error, /*read_only=*/true)) << error;
  floats[7] = 2.5f;
  EXPECT_EQ(static_cast<const float*>(peer.data())[7], 2.5f);

  SharedMemory wrong;
  EXPECT_FALSE(SharedMemory::open(created.name(), 8192, &wrong, &error));
  EXPECT_NE(error.find("holds 4096 bytes, expected 8192"), std::string::npos) << error;

  created.unlink();
  EXPECT_FALSE(SharedMemory::open(created.name(), 4096, &wrong, &error));
  EXPECT_NE(error.find("shm_open(" + created.name() + ")"), std::string::npos) << error;
  floats[8] = 3.0f;  // the mappings outlive the name
  EXPECT_EQ(static_cast<const float*>(peer.data())[8], 3.0f);
}

TEST(SharedMemoryDeathTest, ReadOnlyMappingCannotBeWritten) {
  SharedMemory created, peer;
  std::string error;
  ASSERT_TRUE(SharedMemory::create("pstrain-test", 4096, &created, &error)) << error;
  ASSERT_TRUE(SharedMemory::open(created.name(), 4096, &peer, &error, /*read_only=*/true)) << error;
  volatile float* through_peer = static_cast<float*>(peer.data());
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(through_peer[0] = 1.0f, "");  // SIGSEGV
  EXPECT_EQ(static_cast<const float*>(created.data())[0], 0.0f);
}

}  // namespace
}  // namespace pstrain
