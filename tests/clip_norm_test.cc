// Gradient clipping by global norm (--clip-norm, docs/models.md "Gradient clipping"): the exact
// sum of squares it rests on, and jobs where the norm spans every PS shard.
#include "shared/train/clip_norm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "test_util/idx_writer.h"
#include "test_util/params.h"
#include "test_util/process.h"

namespace pstrain::test {
namespace {

// Values over the whole float range: normal ones of every magnitude from 2^-60 to 2^60, both
// signs, a few subnormals, zeros and some near FLT_MAX's square root's square.
std::vector<float> wide_values(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-60, 60);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = std::ldexp(mantissa(rng), exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
    if (i % 997 == 0) v[i] = std::ldexp(mantissa(rng), -140);  // subnormal
    if (i % 1009 == 0) v[i] = 0.0f;
    if (i % 4099 == 0) v[i] = 1e30f;
  }
  return v;
}

TEST(ExactSquaresTest, SmallIntegersSumExactly) {
  const float v[] = {3.0f, -4.0f, 0.0f};
  ExactSquares s;
  EXPECT_TRUE(s.zero());
  s.add(v, 3);
  EXPECT_FALSE(s.zero());
  EXPECT_EQ(s.value(), 25.0);
}

// The point of it: however a gradient is cut (shards, chunks) and in whatever order the pieces
// are added and merged, the sum is the same to the bit, and its rounding is the exact value's.
TEST(ExactSquaresTest, TheSumDoesNotDependOnHowTheVectorIsCutOrInWhatOrder) {
  const std::vector<float> v = wide_values(100000, 1);
  ExactSquares whole;
  whole.add(v.data(), v.size());
  long double reference = 0;  // 64-bit mantissa: near enough to check the rounding
  for (float x : v) reference += static_cast<long double>(x) * static_cast<long double>(x);
  EXPECT_LE(std::fabs(static_cast<long double>(whole.value()) - reference) / reference, 1e-15L);

  std::mt19937 rng(2);
  double forward = 0, backward = 0;  // what plain double sums of the same squares give
  for (float x : v) forward += static_cast<double>(x) * x;
  for (size_t i = v.size(); i-- > 0;) backward += static_cast<double>(v[i]) * v[i];
  std::printf("sum of squares: exact %.17g; double sums forward %.17g, backward %.17g\n", whole.value(), forward,
              backward);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<size_t> cuts = {0, v.size()};
    for (int k = 0; k < 1 + trial * 3; ++k) cuts.push_back(rng() % v.size());
    std::sort(cuts.begin(), cuts.end());
    std::vector<ExactSquares> pieces;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      pieces.emplace_back();
      pieces.back().add(v.data() + cuts[i], cuts[i + 1] - cuts[i]);
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    ExactSquares merged;
    for (const ExactSquares& piece : pieces) merged.merge(piece);
    EXPECT_TRUE(merged == whole) << "trial " << trial << ": " << pieces.size() << " pieces";
    EXPECT_EQ(merged.value(), whole.value());
  }
}

TEST(ExactSquaresTest, TheSmallestAndLargestFloatsKeepTheirSquares) {
  const float tiny = std::nextafter(0.0f, 1.0f);  // 2^-149, the smallest subnormal
  ExactSquares a;
  a.add(&tiny, 1);
  EXPECT_EQ(a.value(), std::ldexp(1.0, -298));
  const float huge = FLT_MAX;
  ExactSquares b;
  b.add(&huge, 1);
  EXPECT_EQ(b.value(), static_cast<double>(FLT_MAX) * static_cast<double>(FLT_MAX));
  ExactSquares both = b;
  both.merge(a);
  EXPECT_FALSE(both == b);  // the tiny square is still in the integer, below the double's rounding
  EXPECT_EQ(both.value(), b.value());
  const std::vector<float> many(1 << 16, FLT_MAX);  // carries across limbs
  ExactSquares c;
  c.add(many.data(), many.size());
  EXPECT_EQ(c.value(), 65536.0 * static_cast<double>(FLT_MAX) * static_cast<double>(FLT_MAX));
}

TEST(ExactSquaresTest, LimbsRoundTrip) {
  const std::vector<float> v = wide_values(1000, 3);
  ExactSquares s;
  s.add(v.data(), v.size());
  EXPECT_TRUE(ExactSquares::from_limbs(s.limbs().data()) == s);
}

TEST(ClipFactorTest, ScalesTheMeanGradientDownToTheNorm) {
  const float v[] = {30.0f, 40.0f};  // a summed gradient of norm 50 over 10 samples: mean's norm 5
  ExactSquares s;
  s.add(v, 2);
  EXPECT_DOUBLE_EQ(clip_factor(s, 10, 2.5), 0.5);
  EXPECT_EQ(clip_factor(s, 10, 5.0), 1.0);  // at the norm: not scaled
  EXPECT_EQ(clip_factor(s, 10, 0.0), 1.0);  // off
  EXPECT_EQ(clipped_scale(0.1f, 1.0), 0.1f);
  EXPECT_EQ(clipped_scale(0.25f, 0.5), 0.125f);
}

// Jobs: a 16-8 MLP on 8x8 synthetic images, 20 steps (as tests/mirrored_test.cc).
constexpr int kBatch = 8;
constexpr int kSteps = 20;

class ClipNormJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_dir_ = new std::string(make_temp_dir("clip-norm"));
    write_synthetic_mnist(*data_dir_, "train", 300, 8, 8, 11, false);
    write_synthetic_mnist(*data_dir_, "t10k", 100, 8, 8, 12, false);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*data_dir_);
    delete data_dir_;
    data_dir_ = nullptr;
  }

  // num_ps 0: allreduce mode (ring). `logs`: every process's log.
  static SavedParams train(int num_ps, int num_workers, int batch, double clip, const std::string& optimizer,
                           std::string* logs = nullptr, const std::string& sgd_lr = "0.1", bool ipc = false) {
    const std::string dir = make_temp_dir("clip-norm-job");
    Job job;
    job.num_ps = std::max(num_ps, 1);
    job.num_workers = num_workers;
    job.dir = dir;
    job.ipc = ipc;
    const std::string lr = optimizer == "adam" ? "0.01" : sgd_lr;
    job.args = {"--data-dir", *data_dir_, "--cache-dir", dir, "--hidden", "16,8", "--steps", std::to_string(kSteps),
                "--epochs", "100", "--optimizer", optimizer, "--lr", lr, "--seed", "7", "--timeout", "30", "--batch-size",
                std::to_string(batch), "--clip-norm", std::to_string(clip), "--save-params", dir + "/params"};
    const JobResult result = num_ps == 0 ? run_allreduce_job(job, "ring") : run_job(job);
    EXPECT_TRUE(result.ok()) << result.logs;
    if (logs != nullptr) *logs = result.logs;
    SavedParams params = load_saved_params(dir + "/params");
    std::filesystem::remove_all(dir);
    return params;
  }

  // What each PS shard's last line says about clipping (docs/models.md, "Gradient clipping").
  struct Clipping {
    int scaled = -1, steps = -1;
    double smallest = 0, largest = 0, part = 0;
  };
  static std::vector<Clipping> clipping_of(const std::string& logs) {
    static const std::regex line(
        R"(--clip-norm [0-9.e+-]+: (\d+) of (\d+) step\(s\) scaled down; gradient norm ([0-9.e+-]+) to ([0-9.e+-]+) \(this shard's part at most ([0-9.e+-]+)\))");
    std::vector<Clipping> out;
    for (auto it = std::sregex_iterator(logs.begin(), logs.end(), line); it != std::sregex_iterator(); ++it) {
      const std::smatch& m = *it;
      out.push_back({std::stoi(m[1]), std::stoi(m[2]), std::stod(m[3]), std::stod(m[4]), std::stod(m[5])});
    }
    return out;
  }

  static std::string* data_dir_;
};
std::string* ClipNormJobTest::data_dir_ = nullptr;

// The acceptance of issue 31's clipping: a bound that neither shard's part of the gradient ever
// reaches, but the whole gradient's norm always passes. Every step is clipped, the result is
// not the unclipped one, and it equals one worker on the concatenated batch.
TEST_F(ClipNormJobTest, TheGlobalNormClipsWhereNoShardAloneWould) {
  std::string logs;
  // Full-batch steps (3 x 100 of the 300 records) and a small learning rate (0.002): the gradient, and so
  // its norm, changes little from step to step.
  const int batch = 100;
  const SavedParams unclipped = train(2, 3, batch, 1e9, "sgd", &logs, "0.002");
  std::vector<Clipping> shards = clipping_of(logs);
  ASSERT_EQ(shards.size(), 2u) << logs;
  // Between the largest part and the smallest whole norm of the unclipped run's steps.
  const double part = std::max(shards[0].part, shards[1].part);
  ASSERT_LT(part, shards[0].smallest) << "no bound lies between the shards' parts and the whole gradient's norm";
  const double bound = (part + shards[0].smallest) / 2;
  const SavedParams clipped = train(2, 3, batch, bound, "sgd", &logs, "0.002");
  shards = clipping_of(logs);
  ASSERT_EQ(shards.size(), 2u) << logs;
  for (const Clipping& shard : shards) {
    EXPECT_EQ(shard.scaled, kSteps) << "every step's global norm passes the bound " << bound;
    EXPECT_EQ(shard.steps, kSteps);
    EXPECT_LT(shard.part, bound) << "this shard alone would have clipped";
  }
  // Each update about 10% shorter at lr 0.002: far beyond the 1e-5 that equal runs stay within.
  EXPECT_GT(relative_difference(unclipped, clipped), 1e-4) << "clipping changed nothing";
  const SavedParams one = train(1, 1, 3 * batch, bound, "sgd", nullptr, "0.002");
  const double rel = relative_difference(one, clipped);
  EXPECT_LE(rel, 1e-5);
  std::printf("--clip-norm %.4g (shards' parts at most %.4g, whole norms from %.4g): N=3 S=2 vs one worker: "
              "max |difference| / max |parameter| = %.3g; vs unclipped %.3g\n",
              bound, part, shards[0].smallest, rel, relative_difference(unclipped, clipped));
}

// The norm is summed exactly, so the shard count changes no bit (the PS sums pushes in worker
// order, element by element, whatever the slicing); allreduce mode clips the same norm.
TEST_F(ClipNormJobTest, ShardCountChangesNoBitAndAllreduceClipsAlike) {
  const double bound = 0.5;
  std::string logs;
  const SavedParams one = train(1, 1, 3 * kBatch, bound, "adam");
  const SavedParams s1 = train(1, 3, kBatch, bound, "adam", &logs);
  std::vector<Clipping> shards = clipping_of(logs);
  ASSERT_EQ(shards.size(), 1u) << logs;
  EXPECT_GT(shards[0].scaled, 0) << "the bound clipped no step";
  const SavedParams s2 = train(2, 3, kBatch, bound, "adam");
  const SavedParams s3 = train(3, 3, kBatch, bound, "adam");
  EXPECT_TRUE(bit_identical(s1, s2)) << relative_difference(s1, s2);
  EXPECT_TRUE(bit_identical(s1, s3)) << relative_difference(s1, s3);
  // On one host (ipc, shared memory: as launch.sh runs a job) PARAMS take the local channel and a
  // NORM's payload ZeroMQ, so a NORM may come after its step's PARAMS, even after the last one.
  const SavedParams same_host = train(2, 3, kBatch, bound, "adam", nullptr, "0.1", true);
  EXPECT_TRUE(bit_identical(s1, same_host)) << relative_difference(s1, same_host);
  EXPECT_LE(relative_difference(one, s1), 1e-4);  // adam's tolerance in tests/mirrored_test.cc
  const SavedParams ring = train(0, 3, kBatch, bound, "adam");
  EXPECT_LE(relative_difference(one, ring), 1e-4);
  std::printf("--clip-norm %.2g, adam: S=1,2,3 bit-identical; vs one worker %.3g; ring all-reduce vs one worker %.3g\n",
              bound, relative_difference(one, s1), relative_difference(one, ring));
}

}  // namespace
}  // namespace pstrain::test
