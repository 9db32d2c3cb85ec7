// --batch-size auto's arithmetic (worker/model/memory_plan.h): the micro-batch it picks is the largest
// whose plan fits the limit, and its micro-batches add up to the worker's share of the global
// batch. (The whole-job check, on the CPU, is MirroredBatchTest.AutoBatchKeepsTheGlobalBatch.)
#include <gtest/gtest.h>

#include <string>

#include "shared/util/error.h"
#include "worker/model/memory_plan.h"

namespace pstrain {
namespace {

// A plan like a worker's: fixed parameters and workspace, activations and input per row.
MemoryPlan linear_plan(int rows) {
  MemoryPlan p;
  p.params = p.grads = 1.5;
  p.workspace = 4;
  p.activations = 0.01 * rows;
  p.input = 0.003 * rows;
  return p;
}

TEST(MemoryPlan, AutoPicksTheLargestFittingMicroBatchAndKeepsTheShare) {
  for (const double limit : {7.02, 8.0, 9.5, 20.0, 1000.0}) {
    for (const int share : {1, 7, 64, 100, 1000}) {
      for (const bool chief : {false, true}) {
        const BatchChoice c = choose_batch(share, 500, chief, limit, linear_plan);
        const std::string what = "limit " + std::to_string(limit) + " share " + std::to_string(share);
        ASSERT_GE(c.micro, 1) << what;
        ASSERT_LE(c.micro, share) << what;
        EXPECT_LE(linear_plan(c.micro).total(), limit) << what;
        EXPECT_LE(linear_plan(c.eval_batch).total(), limit) << what;
        if (c.micro < share) {
          EXPECT_GT(linear_plan(c.micro + 1).total(), limit) << what;  // the largest
        }
        EXPECT_GE(c.micro * c.micro_batches, share) << what;                                // keeps the share
        EXPECT_LT((c.micro_batches - 1) * c.micro, share) << what;                         // no empty one
        if (chief && c.eval_batch < 500) {
          EXPECT_GT(linear_plan(c.eval_batch + 1).total(), limit) << what;
        }
      }
    }
  }
  const BatchChoice c = choose_batch(100, 500, false, 0, linear_plan);  // no limit: all at once
  EXPECT_EQ(c.micro, 100);
  EXPECT_EQ(c.micro_batches, 1);
  const BatchChoice d = choose_batch(100, 500, false, 7.5, linear_plan);  // 0.5 MiB / 0.013 per row
  EXPECT_EQ(d.micro, 38);
  EXPECT_EQ(d.micro_batches, 3);
}

TEST(MemoryPlan, AutoRefusesALimitThatNoMicroBatchFits) {
  try {
    choose_batch(64, 500, false, 7.0, linear_plan);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--batch-size auto: not even a micro-batch of 1 sample fits the memory limit of 7.00 MiB (its plan: "
              "params 1.50 + grads 1.50 + activations 0.01 + input 0.00 + workspace 4.00 = 7.01 MiB)");
  }
}

}  // namespace
}  // namespace pstrain
