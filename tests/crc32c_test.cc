// CRC-32C (shared/util/crc32c.h) against published check values: the CRC catalogue's "123456789"
// and the iSCSI vectors of RFC 3720 B.4; TFRecord's mask against values worked out by its formula.
#include "shared/util/crc32c.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pstrain {
namespace {

uint32_t crc_of(const std::vector<unsigned char>& bytes) { return crc32c::value(bytes.data(), bytes.size()); }

TEST(Crc32cTest, KnownVectors) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c::value(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(crc32c::value(nullptr, 0), 0u);
  // RFC 3720 B.4: 32 bytes of zeros, of ones, ascending, descending.
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[static_cast<size_t>(i)] = static_cast<unsigned char>(i);
    down[static_cast<size_t>(i)] = static_cast<unsigned char>(31 - i);
  }
  EXPECT_EQ(crc_of(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc_of(ones), 0x62A8AB43u);
  EXPECT_EQ(crc_of(up), 0x46DD794Eu);
  EXPECT_EQ(crc_of(down), 0x113FDB5Cu);
  // RFC 3720 B.4: an iSCSI Read (10) command PDU.
  const std::vector<unsigned char> pdu = {
      0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
      0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(crc_of(pdu), 0xD9963A56u);
}

TEST(Crc32cTest, ExtendingInPiecesIsTheCrcOfTheWhole) {
  const std::string text = "The quick brown fox jumps over the lazy dog";
  const uint32_t whole = crc32c::value(text.data(), text.size());
  EXPECT_EQ(whole, 0x22620404u);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    const uint32_t head = crc32c::value(text.data(), cut);
    EXPECT_EQ(crc32c::extend(head, text.data() + cut, text.size() - cut), whole) << "cut at " << cut;
  }
}

TEST(Crc32cTest, TfRecordMask) {
  EXPECT_EQ(crc32c::mask(0), 0xa282ead8u);
  EXPECT_EQ(crc32c::mask(0xE3069283u), 0xc78ab0e5u);  // "123456789"
  EXPECT_EQ(crc32c::mask(0x8A9136AAu), 0x0fd7fffau);  // 32 zeros
  EXPECT_EQ(crc32c::mask(0x62A8AB43u), 0xf909b029u);  // 32 ones
  for (uint32_t crc : {0u, 1u, 0x80000000u, 0xffffffffu, 0x5d7f6a31u, 0xE3069283u}) {
    EXPECT_EQ(crc32c::unmask(crc32c::mask(crc)), crc) << crc;
    EXPECT_NE(crc32c::mask(crc), crc) << crc;
  }
}

}  // namespace
}  // namespace pstrain
