// ps/peer_log.h: a peer whose replies cannot go is logged once, not with every reply the PS
// tries (a gone worker's WAITING reports, one a second), and again after a reply to it went.
#include <gtest/gtest.h>

#include <string>

#include "ps/peer_log.h"

namespace pstrain {
namespace {

TEST(ReplyDropsTest, APeersDropsAreLoggedOnceUntilAReplyGoes) {
  ReplyDrops drops;
  const std::string gone("\x00\x6b\x8b\x45\x67", 5), other("\x00\x6b\x8b\x45\x68", 5);
  EXPECT_TRUE(drops.dropped(gone));
  EXPECT_FALSE(drops.dropped(gone));
  EXPECT_FALSE(drops.dropped(gone));
  EXPECT_TRUE(drops.dropped(other));  // each peer its own first line
  drops.sent(gone);
  EXPECT_TRUE(drops.dropped(gone));  // it came back, then failed again: worth a line
  EXPECT_FALSE(drops.dropped(other));
}

TEST(ReplyDropsTest, APeerIsNamedByItsRoutingIdInHex) {
  EXPECT_EQ(peer_name(std::string("\x00\x6b\x8b\x45\x67", 5)), "peer 0x006b8b4567");
  EXPECT_EQ(peer_name(std::string("\xff", 1)), "peer 0xff");
}

}  // namespace
}  // namespace pstrain
