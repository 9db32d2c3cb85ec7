// worker/data/augment.h: each training image mirrored and moved as drawn from (seed, epoch,
// record) alone; the pixels moved in are 0; the draws cover what the flags allow; data that are
// not images are refused with a message.
#include "worker/data/augment.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <utility>
#include <vector>

namespace pstrain {
namespace {

// Image i of n images 2 x 4 x 5: pixel (c, y, x) = 1000 i + 100 c + 10 y + x + 1 (never 0).
std::vector<float> images(size_t n) {
  std::vector<float> x;
  for (size_t i = 0; i < n; ++i) {
    for (int c = 0; c < 2; ++c) {
      for (int y = 0; y < 4; ++y) {
        for (int col = 0; col < 5; ++col) x.push_back(static_cast<float>(1000 * i + 100 * c + 10 * y + col + 1));
      }
    }
  }
  return x;
}

const std::vector<size_t> kShape = {2, 4, 5};

AugmentOptions options(bool flip, int shift) {
  AugmentOptions o;
  o.flip = flip;
  o.shift = shift;
  o.seed = 7;
  return o;
}

TEST(AugmentTest, EachPixelIsTheDrawnMoveOfTheMirroredImageOrZero) {
  const AugmentOptions o = options(true, 2);
  const size_t n = 64;
  std::vector<uint64_t> records(n);
  for (size_t i = 0; i < n; ++i) records[i] = 1000 + 3 * i;
  std::vector<float> x = images(n), scratch;
  const std::vector<float> original = x;
  augment_batch(o, kShape, 5, records.data(), n, x.data(), &scratch);
  int flipped = 0, moved = 0;
  for (size_t i = 0; i < n; ++i) {
    const AugmentDraw d = augment_draw(o, 5, records[i]);
    flipped += d.flip;
    moved += d.dx != 0 || d.dy != 0;
    for (int c = 0; c < 2; ++c) {
      for (int y = 0; y < 4; ++y) {
        for (int col = 0; col < 5; ++col) {
          const int sy = y - d.dy, sx = col - d.dx;
          float want = 0;
          if (sy >= 0 && sy < 4 && sx >= 0 && sx < 5) {
            want = original[i * 40 + static_cast<size_t>(c * 20 + sy * 5 + (d.flip ? 4 - sx : sx))];
          }
          ASSERT_EQ(x[i * 40 + static_cast<size_t>(c * 20 + y * 5 + col)], want)
              << "image " << i << " c " << c << " y " << y << " x " << col << " flip " << d.flip << " dx " << d.dx
              << " dy " << d.dy;
        }
      }
    }
  }
  EXPECT_GT(flipped, 16);  // half of 64, give or take
  EXPECT_LT(flipped, 48);
  EXPECT_GT(moved, 48);    // 24 of the 25 moves move
}

TEST(AugmentTest, ADrawDependsOnSeedEpochAndRecordOnly) {
  const AugmentOptions o = options(true, 3);
  // The same record in another batch, at another place, gives the same image.
  std::vector<float> a = images(3), b = images(3), scratch;
  std::swap_ranges(b.begin(), b.begin() + 40, b.begin() + 80);  // b holds image 2 first, image 0 last
  const std::vector<uint64_t> ra = {11, 12, 13}, rb = {13, 12, 11};
  augment_batch(o, kShape, 2, ra.data(), 3, a.data(), &scratch);
  augment_batch(o, kShape, 2, rb.data(), 3, b.data(), &scratch);
  EXPECT_EQ(std::vector<float>(a.begin(), a.begin() + 40), std::vector<float>(b.begin() + 80, b.end()));
  EXPECT_EQ(std::vector<float>(a.begin() + 80, a.end()), std::vector<float>(b.begin(), b.begin() + 40));

  // Epochs and seeds give other draws; the draws cover the moves the flags allow.
  std::set<std::pair<int, int>> moves;
  int differ_by_epoch = 0, differ_by_seed = 0;
  AugmentOptions other = o;
  other.seed = 8;
  for (uint64_t record = 0; record < 2000; ++record) {
    const AugmentDraw d = augment_draw(o, 1, record), e = augment_draw(o, 2, record), s = augment_draw(other, 1, record);
    moves.insert({d.dx, d.dy});
    differ_by_epoch += d.flip != e.flip || d.dx != e.dx || d.dy != e.dy;
    differ_by_seed += d.flip != s.flip || d.dx != s.dx || d.dy != s.dy;
    EXPECT_GE(d.dx, -3);
    EXPECT_LE(d.dx, 3);
    EXPECT_GE(d.dy, -3);
    EXPECT_LE(d.dy, 3);
  }
  EXPECT_EQ(moves.size(), 49u);
  EXPECT_GT(differ_by_epoch, 1800);
  EXPECT_GT(differ_by_seed, 1800);
}

TEST(AugmentTest, WithoutFlagsNothingChangesAndFlipAloneDoesNotMove) {
  std::vector<float> x = images(8), scratch;
  const std::vector<float> original = x;
  std::vector<uint64_t> records = {0, 1, 2, 3, 4, 5, 6, 7};
  augment_batch(options(false, 0), kShape, 0, records.data(), 8, x.data(), &scratch);
  EXPECT_EQ(x, original);
  for (uint64_t r = 0; r < 100; ++r) {
    const AugmentDraw d = augment_draw(options(true, 0), 0, r);
    EXPECT_EQ(d.dx, 0);
    EXPECT_EQ(d.dy, 0);
    EXPECT_FALSE(augment_draw(options(false, 2), 0, r).flip);
  }
}

TEST(AugmentTest, DataThatAreNotImagesAreRefusedSayingWhy) {
  EXPECT_EQ(augment_refusal(options(false, 0), {13}), "");
  EXPECT_NE(augment_refusal(options(true, 0), {13}).find("apply to images"), std::string::npos);
  EXPECT_NE(augment_refusal(options(true, 0), {13}).find("vectors of 13 features"), std::string::npos);
  EXPECT_EQ(augment_refusal(options(true, 3), {1, 28, 28}), "");
  EXPECT_EQ(augment_refusal(options(false, 4), {2, 4, 5}),
            "--augment-shift 4 moves an image of 4x5 pixels out of itself: it must be less than 4");
  EXPECT_EQ(options(true, 2).text(), "flip shift 2");
  EXPECT_EQ(options(false, 1).text(), "shift 1");
  EXPECT_EQ(options(true, 0).text(), "flip");
}

}  // namespace
}  // namespace pstrain
