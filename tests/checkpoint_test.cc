// Checkpoint files: the shard codec and manifest against flipped, truncated and extended bytes
// (exact errors), and --resume's choice among checkpoints on disk: a flipped byte, a truncated
// file, a missing shard file, a missing manifest and a checkpoint of another model each make it
// fall back to the previous complete checkpoint, naming the reason; none usable is an error.
// Whole jobs stopped and resumed: LaunchTest.StoppedBySigtermAndResumedEqualsAnUninterruptedRun.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "shared/checkpoint/checkpoint_store.h"
#include "shared/checkpoint/job_fingerprint.h"
#include "shared/checkpoint/checkpoint.h"
#include "shared/checkpoint/table_file.h"
#include "shared/config/part_options.h"  // the jobs here are flags, made into the parts' options
#include "shared/util/error.h"
#include "shared/util/file_util.h"
#include "test_util/idx_writer.h"

namespace pstrain::test {
namespace {

ShardCheckpoint sample(uint32_t shard, uint32_t shards, uint64_t version, uint64_t total = 10) {
  const auto slices = balance_slices(total, static_cast<int>(shards));
  ShardCheckpoint c;
  c.shard = shard;
  c.num_shards = shards;
  c.version = version;
  c.total = total;
  c.total_steps = 100;
  c.offset = slices[shard].offset;
  c.optimizer = "momentum";
  for (size_t i = 0; i < slices[shard].length; ++i) c.values.push_back(static_cast<float>(version * 100 + c.offset + i));
  c.slots.push_back(std::vector<float>(c.values.size(), 0.5f + static_cast<float>(version)));
  return c;
}

std::string decode_error(const std::string& bytes) {
  ShardCheckpoint c;
  std::string error;
  EXPECT_FALSE(decode_shard_checkpoint(bytes, &c, &error));
  return error;
}

TEST(CheckpointCodecTest, RoundTrip) {
  const ShardCheckpoint c = sample(1, 2, 7);
  ShardCheckpoint d;
  std::string error;
  ASSERT_TRUE(decode_shard_checkpoint(encode_shard_checkpoint(c), &d, &error)) << error;
  EXPECT_EQ(d.shard, 1u);
  EXPECT_EQ(d.num_shards, 2u);
  EXPECT_EQ(d.version, 7u);
  EXPECT_EQ(d.offset, 5u);
  EXPECT_EQ(d.optimizer, "momentum");
  EXPECT_EQ(d.values, c.values);
  EXPECT_EQ(d.slots, c.slots);
}

TEST(CheckpointCodecTest, EveryFlippedBitTruncationAndExtensionIsRefused) {
  const std::string good = encode_shard_checkpoint(sample(0, 2, 3));
  for (size_t bit = 0; bit < good.size() * 8; ++bit) {
    std::string bad = good;
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    EXPECT_FALSE(decode_error(bad).empty()) << "bit " << bit;
  }
  for (size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(decode_error(good.substr(0, n)).empty()) << n << " bytes";
  EXPECT_EQ(decode_error(good.substr(0, good.size() - 4)), "truncated: 116 bytes, the header promises 120");
  EXPECT_EQ(decode_error(good + "x"), "extended: 121 bytes, the header promises 120");
  EXPECT_EQ(decode_error(std::string(200, 'x')), "not a pstrain checkpoint (bad magic)");
  EXPECT_EQ(decode_error("PSTR"), "truncated: 4 bytes, shorter than any checkpoint");
  std::string flipped = good;
  flipped[85] ^= 1;  // a byte of a parameter (they start at byte 80): only the checksum can tell
  EXPECT_EQ(decode_error(flipped), "checksum mismatch (corrupted)");
}

// Format 2: a shard file with embedding tables (docs/checkpoints.md). Without tables the bytes
// are format 1's, as before; with them the tables come back as they were, and every flipped bit,
// truncation and extension is refused.
TEST(CheckpointCodecTest, FormatTwoCarriesTheEmbeddingTables) {
  ShardCheckpoint c = sample(0, 1, 4);
  const std::string plain = encode_shard_checkpoint(c);
  EXPECT_EQ(plain[8], 1);  // the format, after the magic
  c.tables = {std::string("first table's bytes"), std::string(), std::string(1000, '\x7f')};
  const std::string good = encode_shard_checkpoint(c);
  EXPECT_EQ(good[8], 2);
  ShardCheckpoint d;
  std::string error;
  ASSERT_TRUE(decode_shard_checkpoint(good, &d, &error)) << error;
  EXPECT_EQ(d.tables, c.tables);
  EXPECT_EQ(d.values, c.values);
  EXPECT_EQ(d.slots, c.slots);
  for (size_t bit = 0; bit < good.size() * 8; bit += 7) {
    std::string bad = good;
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    EXPECT_FALSE(decode_error(bad).empty()) << "bit " << bit;
  }
  for (size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(decode_error(good.substr(0, n)).empty()) << n << " bytes";
  EXPECT_FALSE(decode_error(good + "x").empty());
  std::string no_tables = plain;  // format 2 claimed, no tables' section
  no_tables[8] = 2;
  EXPECT_EQ(decode_error(no_tables), "truncated: no embedding tables");
}

TEST(CheckpointCodecTest, ManifestRoundTripAndErrors) {
  CheckpointManifest m;
  m.version = 12;
  m.total = 10;
  m.total_steps = 100;
  m.shards = {{"shard0of2.ckpt", 90, 1}, {"shard1of2.ckpt", 90, 2}};
  m.layout = "w 0 2x3\nb 6 4\n";
  CheckpointManifest d;
  std::string error;
  const std::string text = encode_manifest(m);
  ASSERT_TRUE(decode_manifest(text, &d, &error)) << error;
  EXPECT_EQ(d.version, 12u);
  EXPECT_EQ(d.shards.size(), 2u);
  EXPECT_EQ(d.shards[1].crc, 2u);
  EXPECT_EQ(d.layout, m.layout);
  EXPECT_FALSE(decode_manifest(text.substr(0, text.size() - 4), &d, &error));
  EXPECT_EQ(error, "manifest: truncated (no end line)");
  EXPECT_FALSE(decode_manifest("hello", &d, &error));
  EXPECT_EQ(error, "manifest: not a pstrain manifest");
}

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("resume");
    o_.checkpoint_dir = dir_;
    o_.optimizer.kind = OptimizerKind::kMomentum;
    o_.num_ps = 2;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A complete checkpoint of `version` saved by 2 shards, as the PS and the chief write it.
  void save(uint64_t version, uint64_t total = 10) {
    JobOptions o = o_;
    CheckpointManifest m;
    m.version = version;
    m.total = total;
    m.total_steps = 100;
    if (record_fingerprint_) m.job = job_fingerprint(job_identity(o_));
    for (uint32_t s = 0; s < 2; ++s) {
      o.index = static_cast<int>(s);
      ShardCheckpoint c = sample(s, 2, version, total);
      if (edit_) edit_(&c);
      CheckpointStore(checkpoint_options(o), "ps" + std::to_string(s)).write(c);
      const std::string bytes = encode_shard_checkpoint(c);
      m.shards.push_back({shard_file_name(s, 2), bytes.size(), file_crc(bytes)});
    }
    write_file_durably(checkpoint_version_dir(dir_, version) + "/MANIFEST", encode_manifest(m));
  }
  std::string file(uint64_t version, const std::string& name) const {
    return checkpoint_version_dir(dir_, version) + "/" + name;
  }
  // --resume as shard `index` of `num_ps` of the job `job` (default: the one that saved); the
  // version loaded, or the error.
  std::string load(int index, int num_ps, ShardCheckpoint* out = nullptr, const JobOptions* job = nullptr) {
    JobOptions o = job != nullptr ? *job : o_;
    o.index = index;
    o.num_ps = num_ps;
    ShardCheckpoint c;
    std::string error;
    const Slice slice = balance_slices(10, num_ps)[static_cast<size_t>(index)];
    const CheckpointStore store(checkpoint_options(o), "ps" + std::to_string(index));
    if (!store.load(10, 100, slice, 1, &c, &error)) return error;
    if (out != nullptr) *out = c;
    return "v" + std::to_string(c.version);
  }

  std::string dir_;
  JobOptions o_;
  bool record_fingerprint_ = true;  // false: a manifest as pstrain wrote them before fingerprints
  std::function<void(ShardCheckpoint*)> edit_;  // what save() changes in each shard's file
};

TEST_F(ResumeTest, NewestCompleteCheckpointIsUsedAndReslicedForAnotherShardCount) {
  save(10);
  save(20);
  EXPECT_EQ(load(0, 2), "v20");
  ShardCheckpoint c;
  ASSERT_EQ(load(1, 3, &c), "v20");  // shard 1 of 3 holds [4, 7): from both saved shards
  EXPECT_EQ(c.offset, 4u);
  EXPECT_EQ(c.values, (std::vector<float>{2004, 2005, 2006}));
  EXPECT_EQ(c.slots[0], std::vector<float>(3, 20.5f));
}

TEST_F(ResumeTest, EachDamagedNewestCheckpointFallsBackToThePreviousOne) {
  const auto damaged = [&](const std::function<void()>& damage) {
    std::filesystem::remove_all(dir_);
    save(10);
    save(20);
    damage();
    return load(0, 2);
  };
  EXPECT_EQ(damaged([&] {
              std::fstream f(file(20, "shard1of2.ckpt"), std::ios::in | std::ios::out | std::ios::binary);
              f.seekp(70);
              f.put('\x7f');
            }),
            "v10");
  EXPECT_EQ(damaged([&] { std::filesystem::resize_file(file(20, "shard0of2.ckpt"), 50); }), "v10");
  EXPECT_EQ(damaged([&] { std::filesystem::remove(file(20, "shard1of2.ckpt")); }), "v10");
  EXPECT_EQ(damaged([&] { std::filesystem::remove(file(20, "MANIFEST")); }), "v10");
  EXPECT_EQ(damaged([&] {
              std::filesystem::remove_all(checkpoint_version_dir(dir_, 20));
              save(20, 12);  // another model: 12 parameters
            }),
            "v10");
}

// A table's own checks run when a checkpoint is chosen: a table with one flipped weight byte inside
// a shard file whose CRC-32 and manifest line are consistent with it (only the table's CRC-32C
// catches it) passes that checkpoint over, naming the file, and the previous one is used.
TEST_F(ResumeTest, ADamagedTableInAConsistentShardFileFallsBackToThePreviousOne) {
  SavedTable t;
  t.header.table = 0;
  t.header.dim = 2;
  t.header.name = "ids";
  t.header.optimizer = "sgd";
  t.rows = {SavedRow{3, 1, 1}, SavedRow{8, 1, 1}};
  t.values = {0.25f, 0.5f, 0.75f, 1.0f};
  const std::string good = encode_saved_table(t);
  std::string bad = good;
  bad[bad.size() - 4 - 2] ^= 0x01;  // the last weight's second byte: still finite
  edit_ = [&](ShardCheckpoint* c) { c->tables = {c->version == 20 && c->shard == 1 ? bad : good}; };
  save(10);
  save(20);
  testing::internal::CaptureStderr();
  EXPECT_EQ(load(0, 2), "v10");
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("ps0: --resume: skipping checkpoint " + checkpoint_version_dir(dir_, 20) +
                     ": shard1of2.ckpt: embedding table 1 of 1 in it: checksum mismatch (corrupted)"),
            std::string::npos)
      << log;
  std::filesystem::remove_all(checkpoint_version_dir(dir_, 10));
  EXPECT_EQ(load(1, 3), "--resume: no usable checkpoint in '" + dir_ +
                            "'; v20: shard1of2.ckpt: embedding table 1 of 1 in it: checksum mismatch (corrupted)");
}

TEST_F(ResumeTest, NoUsableCheckpointIsAClearError) {
  EXPECT_EQ(load(0, 2), "--resume: no usable checkpoint in '" + dir_ + "' (it holds none; --resume auto starts fresh where there is none)");
  save(10);
  std::filesystem::remove(file(10, "MANIFEST"));
  EXPECT_EQ(load(0, 2), "--resume: no usable checkpoint in '" + dir_ +
                            "'; v10: incomplete: MANIFEST cannot open: No such file or directory");
  save(20, 12);
  EXPECT_EQ(load(0, 2), "--resume: no usable checkpoint in '" + dir_ +
                            "'; v20: of another model: 12 parameters, this job has 10; v10: incomplete: MANIFEST "
                            "cannot open: No such file or directory");
}

// A checkpoint records its job's fingerprint; --resume refuses another job's, naming every
// difference, unless --resume-allow accepts them. Steps and shard counts are not in it.
TEST_F(ResumeTest, AnotherJobsCheckpointIsRefusedNamingWhatDiffers) {
  save(10);
  JobOptions other = o_;
  other.optimizer.lr = 0.01;
  other.seed = 7;
  EXPECT_EQ(load(0, 2, nullptr, &other),
            "--resume: no usable checkpoint in '" + dir_ + "'; v10: of another job: lr 0.001 (this job: 0.01); "
            "seed 42 (this job: 7) (--resume-allow KEY,... accepts a difference)");
  other.resume_allow = {"lr"};
  EXPECT_EQ(load(0, 2, nullptr, &other),
            "--resume: no usable checkpoint in '" + dir_ + "'; v10: of another job: seed 42 (this job: 7) "
            "(--resume-allow KEY,... accepts a difference)");
  other.resume_allow = {"lr", "seed"};
  EXPECT_EQ(load(0, 2, nullptr, &other), "v10");
  other.resume_allow = {"all"};
  EXPECT_EQ(load(1, 3, nullptr, &other), "v10");
  other.resume_allow = {"learning-rate"};
  EXPECT_THROW(load(0, 2, nullptr, &other), UsageError);
  JobOptions same = o_;
  same.num_ps = 3;
  same.steps = 500;
  EXPECT_EQ(load(2, 3, nullptr, &same), "v10");
}

// --resume=auto resumes where a complete checkpoint exists (usable or not: a damaged one is an
// error then, not a silent fresh start) and starts fresh where none is.
TEST_F(ResumeTest, ResumeAutoStartsFreshOnlyWithoutACompleteCheckpoint) {
  JobOptions o = o_;
  o.resume = o.resume_auto = true;
  EXPECT_FALSE(CheckpointStore(checkpoint_options(o), "ps0").resuming());  // no directory at all
  save(10);
  std::filesystem::remove(file(10, "MANIFEST"));  // an incomplete checkpoint: the job died writing it
  EXPECT_FALSE(CheckpointStore(checkpoint_options(o), "ps0").resuming());
  save(20);
  EXPECT_TRUE(CheckpointStore(checkpoint_options(o), "ps0").resuming());
  o.resume = o.resume_auto = false;
  EXPECT_FALSE(CheckpointStore(checkpoint_options(o), "ps0").resuming());
  o.resume = true;
  std::filesystem::remove_all(dir_);
  // Plain --resume: none is load()'s error.
  EXPECT_TRUE(CheckpointStore(checkpoint_options(o), "ps0").resuming());
}

// A resumed job may be longer or shorter than the one that saved, but not end before the
// checkpoint's step.
TEST_F(ResumeTest, AJobOfAnotherLengthResumesUnlessItEndsBeforeTheCheckpoint) {
  save(10);
  const Slice slice = balance_slices(10, 2)[0];
  ShardCheckpoint c;
  std::string error;
  EXPECT_TRUE(CheckpointStore(checkpoint_options(o_), "ps0").load(10, 500, slice, 1, &c, &error)) << error;
  EXPECT_EQ(c.version, 10u);
  EXPECT_TRUE(CheckpointStore(checkpoint_options(o_), "ps0").load(10, 10, slice, 1, &c, &error)) << error;
  EXPECT_FALSE(CheckpointStore(checkpoint_options(o_), "ps0").load(10, 5, slice, 1, &c, &error));
  EXPECT_EQ(error, "--resume: no usable checkpoint in '" + dir_ + "'; v10: at step 10, past this job's 5 steps");
}

TEST_F(ResumeTest, AManifestWithoutAFingerprintIsStillUsable) {
  record_fingerprint_ = false;
  save(10);
  JobOptions other = o_;
  other.seed = 7;  // not checked: nothing recorded to check it against
  EXPECT_EQ(load(0, 2, nullptr, &other), "v10");
}

TEST(JobFingerprintTest, RecordsWhatMakesTheJobAndRoundTripsThroughTheManifest) {
  JobOptions o;
  o.model = "conv 4 3 pad=1, relu, flatten, dense 10";
  o.num_workers = 3;
  o.worker_batch = {10, 20, 30};
  const Fingerprint f = job_fingerprint(job_identity(o));
  const auto value = [&](const std::string& key) {
    for (const auto& [k, v] : f) {
      if (k == key) return v;
    }
    return std::string("(absent)");
  };
  EXPECT_EQ(value("model"), o.model);
  EXPECT_EQ(value("worker-batches"), "10,20,30");
  EXPECT_EQ(value("optimizer"), "adam");
  EXPECT_EQ(value("beta2"), "0.999");
  EXPECT_EQ(value("momentum"), "(absent)");  // not adam's
  EXPECT_EQ(value("warmup-steps"), "(absent)");  // none: as in checkpoints from before the flag
  // A warm-up recorded by the checkpoint and not in this job (or the other way) is a difference.
  JobOptions warm = o;
  warm.optimizer.warmup_steps = 100;
  const Fingerprint w = job_fingerprint(job_identity(warm));
  std::string accepted;
  EXPECT_EQ(fingerprint_differences(w, f, {}, &accepted), "warmup-steps 100 (this job: none)");
  EXPECT_EQ(fingerprint_differences(f, w, {}, &accepted), "warmup-steps (not recorded) (this job: 100)");
  EXPECT_EQ(fingerprint_differences(w, f, {"warmup-steps"}, &accepted), "");
  for (const auto& [key, v] : f) {
    EXPECT_NE(std::find(fingerprint_keys().begin(), fingerprint_keys().end(), key), fingerprint_keys().end()) << key;
  }
  CheckpointManifest m;
  m.version = 1;
  m.total = 4;
  m.total_steps = 9;
  m.shards = {{"shard0of1.ckpt", 1, 2}};
  m.job = f;
  CheckpointManifest d;
  std::string error;
  ASSERT_TRUE(decode_manifest(encode_manifest(m), &d, &error)) << error;
  EXPECT_EQ(d.job, f);
  std::string text = encode_manifest(m);
  text.replace(text.find("job model "), 10, "job  model ");
  EXPECT_FALSE(decode_manifest(text, &d, &error));
  EXPECT_EQ(error.rfind("manifest: bad job line", 0), 0u) << error;
}

// Every number of the fingerprint is recorded to full precision (issue 50: --embedding-lr was kept
// to 6 decimals, so a 1e-7 checkpoint resumed with 5e-7 without a word): for each job setting
// that is a number, 1e-7 against 5e-7, and a value against the next double, are a difference
// naming the setting's key.
TEST(JobFingerprintTest, EveryNumberIsRecordedToFullPrecision) {
  struct Field {
    const char* key;
    std::function<void(JobOptions*, double)> set;
  };
  const auto adam = [](JobOptions* o) { o->optimizer.kind = OptimizerKind::kAdam; };
  const std::vector<Field> fields = {
      {"lr", [](JobOptions* o, double v) { o->optimizer.lr = v; }},
      {"momentum",
       [](JobOptions* o, double v) {
         o->optimizer.kind = OptimizerKind::kMomentum;
         o->optimizer.momentum = v;
       }},
      {"beta1", [&](JobOptions* o, double v) { adam(o); o->optimizer.beta1 = v; }},
      {"beta2", [&](JobOptions* o, double v) { adam(o); o->optimizer.beta2 = v; }},
      {"epsilon", [&](JobOptions* o, double v) { adam(o); o->optimizer.epsilon = v; }},
      {"weight-decay", [](JobOptions* o, double v) { o->optimizer.weight_decay = v; }},
      {"lr-decay-rate",
       [](JobOptions* o, double v) {
         o->optimizer.schedule = LrSchedule::kStep;
         o->optimizer.decay_rate = v;
       }},
      {"lr-cycle-mult",
       [](JobOptions* o, double v) {
         o->optimizer.schedule = LrSchedule::kCosineRestarts;
         o->optimizer.cycle_mult = v;
       }},
      {"clip-norm", [](JobOptions* o, double v) { o->optimizer.clip_norm = v; }},
      {"label-smoothing", [](JobOptions* o, double v) { o->label_smoothing = v; }},
      {"loss", [](JobOptions* o, double v) { o->loss = Loss::kHuber; o->huber_delta = v; }},
      {"embeddings", [](JobOptions* o, double v) { o->embedding_dim = 8; o->embedding_lr = v; }},
  };
  const auto differences = [](const Field& f, double saved, double ours) {
    JobOptions a, b;
    f.set(&a, saved);
    f.set(&b, ours);
    std::string accepted;
    return fingerprint_differences(job_fingerprint(job_identity(a)), job_fingerprint(job_identity(b)), {},
                                   &accepted);
  };
  for (const Field& f : fields) {
    EXPECT_EQ(differences(f, 1e-7, 1e-7), "") << f.key;
    const std::vector<std::pair<double, double>> pairs = {
        {1e-7, 5e-7}, {0.1, std::nextafter(0.1, 1.0)}, {3.0, 3.0000001}};
    for (const auto& [saved, ours] : pairs) {
      const std::string d = differences(f, saved, ours);
      EXPECT_EQ(d.rfind(std::string(f.key) + " ", 0), 0u)
          << f.key << " " << saved << " against " << ours << ": " << d;
    }
  }
  JobOptions o;
  o.embedding_dim = 8;
  o.embedding_lr = 5e-7;
  const std::string line = job_identity(o).embeddings;
  EXPECT_NE(line.find(" lr 4.9999999999999998e-07 "), std::string::npos) << line;

  // A manifest of before: its lr to 6 decimals. It matches a job whose lr is exactly that number
  // (0: --lr's, 0.05) and no other, also none that rounds to it; --resume-allow embeddings accepts.
  const auto legacy = [](double lr) {
    JobOptions old;
    old.embedding_dim = 8;
    old.embedding_lr = lr;
    Fingerprint f = job_fingerprint(job_identity(old));
    for (auto& [key, value] : f) {
      if (key != "embeddings") continue;
      const size_t at = value.find(" lr ") + 4;
      value.replace(at, value.find(' ', at) - at, std::to_string(lr));
    }
    return f;
  };
  const auto resume = [&](double saved, double ours, const std::vector<std::string>& allowed = {}) {
    JobOptions job;
    job.embedding_dim = 8;
    job.embedding_lr = ours;
    std::string accepted;
    return fingerprint_differences(legacy(saved), job_fingerprint(job_identity(job)), allowed, &accepted);
  };
  EXPECT_EQ(resume(0, 0), "");
  EXPECT_EQ(resume(0.05, 0.05), "");
  EXPECT_EQ(resume(0.05, 0.06).rfind("embeddings dim 8 ", 0), 0u);
  const std::string d = resume(1e-7, 5e-7);
  EXPECT_EQ(d.rfind("embeddings dim 8 ", 0), 0u) << d;
  EXPECT_NE(d.find(" lr 0.000000 "), std::string::npos) << d;
  EXPECT_NE(d.find("that checkpoint recorded the lr to 6 decimals only)"), std::string::npos) << d;
  EXPECT_NE(resume(1e-7, 1e-7), "");  // the same lr, but the record cannot tell it from 5e-7
  EXPECT_EQ(resume(1e-7, 1e-7, {"embeddings"}), "");
  EXPECT_NE(resume(0.05, 0.05000000001), "");
}

// --resume refuses a checkpoint of another --embedding-lr, however small the difference.
TEST_F(ResumeTest, AnEmbeddingLrChangedBelowTheSixthDecimalIsRefused) {
  o_.embedding_dim = 4;
  o_.embedding_lr = 1e-7;
  save(10);
  JobOptions other = o_;
  other.embedding_lr = 5e-7;
  const std::string error = load(0, 2, nullptr, &other);
  EXPECT_NE(error.find("v10: of another job: embeddings dim 4 "), std::string::npos) << error;
  EXPECT_NE(error.find("lr 9.9999999999999995e-08"), std::string::npos) << error;
  EXPECT_NE(error.find("lr 4.9999999999999998e-07"), std::string::npos) << error;
  EXPECT_EQ(load(0, 2), "v10");
}

// A checkpoint that cannot be written (here: the directory's place is taken by a file, which
// stops root too) is an error naming why; earlier checkpoints stay; with warn it is logged only.
TEST_F(ResumeTest, UnwritableCheckpointIsAnErrorAndLeavesThePreviousIntact) {
  save(10);
  { std::ofstream(checkpoint_version_dir(dir_, 20)) << "a file where the directory goes"; }
  CheckpointStore writer(checkpoint_options(o_), "ps0");
  try {
    writer.write(sample(0, 2, 20));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ps0: checkpoint of version 20 failed: cannot create '" +
                                         checkpoint_version_dir(dir_, 20) + "/shard0of2.ckpt.tmp': Not a directory"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(load(0, 2), "v10");
  JobOptions warn = o_;
  warn.checkpoint_errors = OnError::kWarn;
  EXPECT_NO_THROW(CheckpointStore(checkpoint_options(warn), "ps0").write(sample(0, 2, 20)));
}

}  // namespace
}  // namespace pstrain::test
