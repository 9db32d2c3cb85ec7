#include "shared/config/options.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "shared/net/zmq_util.h"  // kMaxIpcName
#include "shared/util/error.h"
#include "test_util/idx_writer.h"

namespace pstrain {
namespace {

std::optional<JobOptions> parse(Role role, std::vector<const char*> args) {
  args.insert(args.begin(), "prog");
  return parse_job_options(role, static_cast<int>(args.size()), args.data());
}

// The usage error `args` make, or "no error".
std::string usage_message(Role role, std::vector<const char*> args) {
  try {
    parse(role, std::move(args));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(OptionsTest, DefaultsAndFlags) {
  const auto o = parse(Role::kWorker, {"--ps-hosts", "127.0.0.1:5000,ipc://@job-ps1", "--num-ps", "2",
                                       "--hidden", "32,16,8", "--optimizer", "momentum", "--shuffle", "false"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->ps_hosts.size(), 2u);
  EXPECT_EQ(o->ps_hosts[0], "127.0.0.1:5000");
  EXPECT_EQ(o->ps_hosts[1], "ipc://@job-ps1");
  EXPECT_EQ(o->hidden, (std::vector<int>{32, 16, 8}));
  EXPECT_EQ(o->optimizer.kind, OptimizerKind::kMomentum);
  EXPECT_FALSE(o->shuffle);
  EXPECT_EQ(o->batch_size, 64);
  EXPECT_EQ(o->bind, "127.0.0.1");
}

TEST(OptionsTest, ConfigFileAndFlagsWin) {
  const std::string dir = make_temp_dir("options");
  std::ofstream(dir + "/job.cfg") << "# comment\nbatch-size = 32\nlr = 0.5\nnum-workers = 3\n";
  const auto o = parse(Role::kPs, {"--config", (dir + "/job.cfg").c_str(), "--lr", "0.25"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->batch_size, 32);
  EXPECT_EQ(o->num_workers, 3);
  EXPECT_DOUBLE_EQ(o->optimizer.lr, 0.25);
  std::filesystem::remove_all(dir);
}

// --check-config is for the command line (launch.sh --dry-run): a config file that says it is
// refused, so that no start is quietly turned into a check.
TEST(OptionsTest, CheckConfigOnlyOnTheCommandLine) {
  const std::string dir = make_temp_dir("options");
  std::ofstream(dir + "/job.cfg") << "check-config = true\n";
  EXPECT_THROW(parse(Role::kPs, {"--config", (dir + "/job.cfg").c_str()}), UsageError);
  const auto o = parse(Role::kPs, {"--check-config"});
  ASSERT_TRUE(o);
  EXPECT_TRUE(o->check_config);
  std::filesystem::remove_all(dir);
}

TEST(OptionsTest, WorkerBatchOnTheCommandLineOverridesTheConfigsBatchSize) {
  const std::string dir = make_temp_dir("options");
  std::ofstream(dir + "/job.cfg") << "batch-size = 64\nnum-workers = 3\n";
  const std::string cfg = dir + "/job.cfg";
  const auto o = parse(Role::kPs, {"--config", cfg.c_str(), "--worker-batch", "10,20,30", "--accum-steps", "2"});
  ASSERT_TRUE(o);
  EXPECT_EQ(worker_shares(*o), (std::vector<int>{10, 20, 30}));
  EXPECT_EQ(micro_batch(*o, 30), 15);
  const auto g = parse(Role::kPs, {"--config", cfg.c_str(), "--global-batch", "96"});
  ASSERT_TRUE(g);
  EXPECT_EQ(worker_shares(*g), (std::vector<int>{32, 32, 32}));
  // Both on the command line, or both in one file, still contradict each other.
  EXPECT_THROW(parse(Role::kPs, {"--config", cfg.c_str(), "--batch-size", "8", "--global-batch", "96"}),
               UsageError);
  std::ofstream(dir + "/both.cfg") << "batch-size = 64\nnum-workers = 3\nglobal-batch = 96\n";
  const std::string both = dir + "/both.cfg";
  EXPECT_THROW(parse(Role::kPs, {"--config", both.c_str()}), UsageError);
  std::filesystem::remove_all(dir);
}

TEST(OptionsTest, BadInputIsAUsageErrorNamingTheFlag) {
  const auto message = [](std::vector<const char*> args) { return usage_message(Role::kPs, std::move(args)); };
  EXPECT_NE(message({"--optimizer", "rmsprop"}).find("--optimizer"), std::string::npos);
  EXPECT_NE(message({"--batch-size", "0"}).find("--batch-size"), std::string::npos);
  EXPECT_NE(message({"--lr", "-1"}).find("--lr"), std::string::npos);
  EXPECT_NE(message({"--hidden", "16,x"}).find("--hidden"), std::string::npos);
  EXPECT_NE(message({"--index", "1"}).find("--index"), std::string::npos);
  EXPECT_NE(message({"--mode", "magic"}).find("--mode"), std::string::npos);
  EXPECT_NE(message({"--no-such-flag"}).find("no-such-flag"), std::string::npos);
  EXPECT_NE(message({"--config", "/nonexistent/job.cfg"}).find("--config"), std::string::npos);
  EXPECT_NE(message({"--shuffle", "maybe"}).find("--shuffle"), std::string::npos);
  EXPECT_EQ(message({"--lr-schedule", "step"}), "--lr-schedule step needs --lr-decay-steps (at least 1)");
  EXPECT_EQ(message({"--lr-schedule", "cosine-restarts"}), "--lr-schedule cosine-restarts needs --lr-decay-steps (at least 1)");
  EXPECT_EQ(message({"--lr-schedule", "linear"}), "--lr-schedule: 'linear' is not one of constant, cosine, step, cosine-restarts");
  EXPECT_EQ(message({"--optimizer", "rmsprop"}), "--optimizer: 'rmsprop' is not one of sgd, momentum, adam, adamw");
  EXPECT_EQ(message({"--lr-decay-rate", "0"}), "--lr-decay-rate must be in (0, 1]");
  EXPECT_EQ(message({"--lr-cycle-mult", "0.5"}), "--lr-cycle-mult must be in [1, 100]");
  EXPECT_EQ(message({"--optimizer", "adamw", "--weight-decay", "0.01", "--warmup-steps", "100"}), "no error");
  EXPECT_EQ(message({"--clip-norm", "1.5"}), "no error");
  EXPECT_EQ(message({"--clip-norm", "1", "--mode", "allreduce"}), "no error");
  EXPECT_EQ(message({"--clip-norm", "-1"}), "--clip-norm must be a number >= 0 (0: no clipping)");
  EXPECT_EQ(message({"--clip-norm", "1", "--num-workers", "3", "--backup-workers", "1"}),
            "--clip-norm: not with --backup-workers (each chunk's step may sum another set of workers)");
  EXPECT_EQ(message({"--clip-norm", "nan"}), "--clip-norm must be a number >= 0 (0: no clipping)");
  EXPECT_EQ(message({"--clip-norm", "1", "--mode", "async"}),
            "--clip-norm clips each step's global gradient: sync and allreduce modes only (in async each push is "
            "applied alone)");
  EXPECT_THROW(parse(Role::kWorker, {"--ps-hosts", "nohostport"}), UsageError);
  EXPECT_THROW(parse(Role::kWorker, {"--num-ps", "2", "--ps-hosts", "h:1"}), UsageError);
  EXPECT_THROW(parse(Role::kWorker, {"--ps-hosts", "ipc://"}), UsageError);
  EXPECT_THROW(parse(Role::kWorker, {"--ps-hosts", ("ipc://" + std::string(kMaxIpcName + 1, 'x')).c_str()}), UsageError);
  EXPECT_NE(message({"--ipc", std::string(kMaxIpcName + 1, 'x').c_str()}).find("--ipc"), std::string::npos);
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {


TEST(OptionsTest, AMistypedFlagOrChoiceSuggestsTheClosestName) {
  const auto message = [](std::vector<const char*> args) { return usage_message(Role::kWorker, std::move(args)); };
  EXPECT_EQ(message({"--chekpoint-every", "5"}), "unrecognised option '--chekpoint-every' (did you mean '--checkpoint-every'?)");
  EXPECT_EQ(message({"--batch-szie", "5"}), "unrecognised option '--batch-szie' (did you mean '--batch-size'?)");
  EXPECT_EQ(message({"--frobnicate"}), "unrecognised option '--frobnicate'");  // nothing close: no guess
  EXPECT_EQ(message({"--mode", "asnyc"}), "--mode: 'asnyc' is not one of sync, async, ssp, allreduce (did you mean 'async'?)");
  EXPECT_EQ(message({"--loss", "BCE"}), "--loss: 'BCE' is not one of softmax, bce, mse, huber (did you mean 'bce'?)");
}
TEST(OptionsTest, DeviceFlag) {
  const char* ok[] = {"auto", "cpu", "cuda", "cuda:0", "cuda:12", "cuda:1023"};
  for (const char* d : ok) {
    const char* argv[] = {"prog", "--device", d};
    EXPECT_EQ(parse_job_options(Role::kPs, 3, argv).value().device, d);
  }
  for (const char* d : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:99999999999"}) {
    const char* argv[] = {"prog", "--device", d};
    EXPECT_THROW(parse_job_options(Role::kPs, 3, argv), UsageError) << d;
  }
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

// --model "embedding D [tables=...], <layers>": the entry sets --embedding-dim and
// --embedding-tables and leaves the layers; the PS (which reads no layers) sees the same tables.
TEST(ModelEmbeddingTest, TheEntrySetsTheTablesAndLeavesTheLayers) {
  for (const Role role : {Role::kPs, Role::kWorker}) {
    const auto o = parse(role, {"--model", "Embedding 8 tables=per-field pool=mean,dense 16, relu,  residual(dense 16, relu), dense 1",
                                "--loss", "bce", "--ps-hosts", "127.0.0.1:1", "--train-data", "t.tsv", "--test-data", "v.tsv"});
    ASSERT_TRUE(o);
    EXPECT_EQ(o->embedding_dim, 8);
    EXPECT_EQ(o->embedding_tables, "per-field");
    EXPECT_EQ(o->embedding_pool, "mean");
    EXPECT_EQ(o->model, "dense 16, relu, residual(dense 16, relu), dense 1");
    EXPECT_EQ(embedding_table_names(*o).size(), 26u);
  }
  const auto plain = parse(Role::kPs, {"--model", "dense 16, relu, dense 2"});
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->model, "dense 16, relu, dense 2");  // untouched without an entry
  EXPECT_EQ(plain->embedding_dim, 0);
  // The same values given twice agree.
  const auto same = parse(Role::kPs, {"--model", "embedding 4, dense 1", "--embedding-dim", "4", "--loss", "bce"});
  ASSERT_TRUE(same);
  EXPECT_EQ(same->embedding_tables, "shared");
  EXPECT_EQ(same->embedding_pool, "sum");
}

// The command line wins over the config file, either way round; given in one place, two values
// contradict each other.
TEST(ModelEmbeddingTest, TheCommandLineWinsOverTheConfigFile) {
  const std::string dir = make_temp_dir("options");
  const std::string cfg = dir + "/ctr.cfg";
  std::ofstream(cfg) << "model = embedding 8 tables=per-field, dense 16, relu, dense 1\nloss = bce\n";
  const auto flag_wins = parse(Role::kPs, {"--config", cfg.c_str(), "--embedding-dim", "16"});
  ASSERT_TRUE(flag_wins);
  EXPECT_EQ(flag_wins->embedding_dim, 16);
  EXPECT_EQ(flag_wins->embedding_tables, "per-field");
  EXPECT_EQ(flag_wins->model, "dense 16, relu, dense 1");
  const std::string flags_cfg = dir + "/flags.cfg";
  std::ofstream(flags_cfg) << "embedding-dim = 16\nembedding-tables = per-field\nloss = bce\n";
  const auto entry_wins = parse(Role::kPs, {"--config", flags_cfg.c_str(), "--model", "embedding 4 tables=shared, dense 1"});
  ASSERT_TRUE(entry_wins);
  EXPECT_EQ(entry_wins->embedding_dim, 4);
  EXPECT_EQ(entry_wins->embedding_tables, "shared");
  try {
    parse(Role::kPs, {"--model", "embedding 8 pool=mean, dense 1", "--embedding-pool", "sum", "--loss", "bce"});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--model's 'embedding 8 pool=mean' and --embedding-pool sum contradict each other (both on the command "
              "line): give the tables' setup once");
  }
  std::ofstream(dir + "/both.cfg") << "model = embedding 8, dense 1\nembedding-dim = 4\nloss = bce\n";
  const std::string both = dir + "/both.cfg";
  try {
    parse(Role::kPs, {"--config", both.c_str()});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--model's 'embedding 8' and --embedding-dim 4 contradict each other (both in the config file): give the "
              "tables' setup once");
  }
  std::filesystem::remove_all(dir);
}

TEST(ModelEmbeddingTest, BadEntriesAreUsageErrorsNamingTheLayer) {
  const auto message = [](const char* model) {
    try {
      parse(Role::kPs, {"--model", model, "--loss", "bce"});
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("embedding, dense 1"),
            "--model: layer 1 'embedding': needs the rows' floats, e.g. 'embedding 8' (docs/models.md, \"Embedding "
            "tables\")");
  EXPECT_EQ(message("embedding tables=shared, dense 1"),
            "--model: layer 1 'embedding tables=shared': needs the rows' floats, e.g. 'embedding 8' (docs/models.md, "
            "\"Embedding tables\")");
  EXPECT_EQ(message("embedding 0, dense 1"),
            "--model: layer 1 'embedding 0': the rows' floats must be a whole number in [1, 4096], not '0'");
  EXPECT_EQ(message("embedding 4097, dense 1"),
            "--model: layer 1 'embedding 4097': the rows' floats must be a whole number in [1, 4096], not '4097'");
  EXPECT_EQ(message("embedding 8x, dense 1"),
            "--model: layer 1 'embedding 8x': the rows' floats must be a whole number in [1, 4096], not '8x'");
  EXPECT_EQ(message("embedding 8 tables=some, dense 1"),
            "--model: layer 1 'embedding 8 tables=some': tables='some' is not one of shared, per-field");
  EXPECT_EQ(message("embedding 8 size=3, dense 1"),
            "--model: layer 1 'embedding 8 size=3': 'size=3' is not an option of embedding (tables=shared|per-field, "
            "pool=sum|mean)");
  EXPECT_EQ(message("embedding 8 pool=max, dense 1"),
            "--model: layer 1 'embedding 8 pool=max': pool='max' is not one of sum, mean");
  EXPECT_EQ(message("dense 4, embedding 8, dense 1"),
            "--model: layer 2 'embedding 8': an embedding entry must come first (it makes the model's input: the dense "
            "features, then one row per categorical field)");
  EXPECT_EQ(message("embedding 8"),
            "--model: layer 1 'embedding 8' needs the layers that read its rows after it, e.g. 'embedding 8, dense 256, "
            "relu, dense 1'");
  EXPECT_EQ(message("embedding 8, dense 1"), "no error");
}

}  // namespace
}  // namespace pstrain

namespace pstrain {
namespace {

// A switch with an implicit value takes its value as the next word too: `--augment-flip false`
// is `--augment-flip=false`, `--augment-flip` alone is true, and `--resume auto` is auto.
TEST(OptionsTest, SwitchesTakeTheirValueAsTheNextWord) {
  const auto flip = [](std::vector<const char*> args) {
    const auto o = parse(Role::kPs, args);
    return o && o->augment_flip;
  };
  EXPECT_TRUE(flip({"--augment-flip"}));
  EXPECT_TRUE(flip({"--augment-flip", "--lr", "0.5"}));
  EXPECT_TRUE(flip({"--augment-flip", "true"}));
  EXPECT_FALSE(flip({"--augment-flip", "false"}));
  EXPECT_FALSE(flip({"--augment-flip=false"}));
  EXPECT_FALSE(flip({}));
  const auto o = parse(Role::kPs, {"--augment-flip", "false", "--lr", "0.5"});
  ASSERT_TRUE(o);
  EXPECT_DOUBLE_EQ(o->optimizer.lr, 0.5);
}

}  // namespace
}  // namespace pstrain
