// shared/util/text.h: trim, and the "did you mean" guess of usage errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "shared/util/text.h"

namespace pstrain {
namespace {

const std::vector<std::string> kFlags = {"lr", "batch-size", "checkpoint-every", "checkpoint-secs", "epochs", "steps"};

TEST(TextTest, ClosestFindsTyposOfEveryKind) {
  EXPECT_EQ(closest("batch-szie", kFlags), "batch-size");        // two letters swapped
  EXPECT_EQ(closest("chekpoint-every", kFlags), "checkpoint-every");  // one left out
  EXPECT_EQ(closest("epochss", kFlags), "epochs");               // one too many
  EXPECT_EQ(closest("STEPS", kFlags), "steps");                  // case
  EXPECT_EQ(closest("lt", kFlags), "lr");                        // short words: one edit
}

TEST(TextTest, ClosestGuessesNothingFarOrAmbiguous) {
  EXPECT_EQ(closest("frobnicate", kFlags), "");
  EXPECT_EQ(closest("xy", kFlags), "");                          // two edits of a two-letter word
  EXPECT_EQ(closest("checkpoint-evry", {"checkpoint-every", "checkpoint-evrz"}), "");  // a tie
  EXPECT_EQ(closest("anything", {}), "");
  EXPECT_EQ(did_you_mean("stpes", kFlags, "--"), " (did you mean '--steps'?)");
  EXPECT_EQ(did_you_mean("frobnicate", kFlags, "--"), "");
}

TEST(TextTest, TrimRemovesSpaceAtBothEnds) {
  EXPECT_EQ(trim(" \t a b \r\n"), "a b");
  EXPECT_EQ(trim(" \t\n"), "");
}

}  // namespace
}  // namespace pstrain
