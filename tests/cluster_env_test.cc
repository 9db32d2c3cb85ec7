// Roles from the environment (shared/config/cluster_env.h): TF_CONFIG, Slurm and Open MPI variables
// are passed as maps, never set in this process.
#include "shared/config/cluster_env.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "shared/util/error.h"
#include "test_util/idx_writer.h"

namespace pstrain {
namespace {

using Hosts = std::vector<std::string>;

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

// ------------------------------------------------------------------ Slurm host lists

// Expected values as `scontrol show hostnames` (Slurm 22.05, Debian 12) printed them.
const std::vector<std::pair<std::string, Hosts>> kHostlists = {
    {"node[01-03,7],gpu[1-2]", {"node01", "node02", "node03", "node7", "gpu1", "gpu2"}},
    {"a,b,c", {"a", "b", "c"}},
    {"a,,b", {"a", "b"}},
    {"x y", {"x", "y"}},
    {",n1", {"n1"}},
    {"n[1-2],", {"n1", "n2"}},
    {"x[5]", {"x5"}},
    {"[1-2]", {"1", "2"}},
    {"n[0-0]", {"n0"}},
    {"n[1-]", {"n1"}},
    {"n[8-10]", {"n8", "n9", "n10"}},
    {"n[9-10]", {"n9", "n10"}},
    {"n[008-010]", {"n008", "n009", "n010"}},
    {"n[01-3]", {"n01", "n02", "n03"}},
    {"n[1-010]", {"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"}},
    {"n[01-02,010]", {"n01", "n02", "n010"}},
    {"n[99999-100001]", {"n99999", "n100000", "n100001"}},
    {"h[1-3,5-6]", {"h1", "h2", "h3", "h5", "h6"}},
    {"node1[0-1]", {"node10", "node11"}},
    {"n-[1-2]", {"n-1", "n-2"}},
    {"a.b[1-2]", {"a.b1", "a.b2"}},
    {"n[1-2],gpu1x", {"n1", "n2", "gpu1x"}},
    {"n[1-2],n[1-2]", {"n1", "n2", "n1", "n2"}},
    {"n[0-2],m[3]", {"n0", "n1", "n2", "m3"}},
    {"a[1-2]b[3-4],c", {"a1b3", "a1b4", "a2b3", "a2b4", "c"}},
    {"rack[1-2]-n[01-02]", {"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}},
    {"n[1-2]x[3]", {"n1x3", "n2x3"}},
    {"a[1-2][3-4]", {"a13", "a14", "a23", "a24"}},
    {"x[1-3]y[4-5]", {"x1y4", "x1y5", "x2y4", "x2y5", "x3y4", "x3y5"}},
    {"a[1-2]b[3-5]c[6-7]",
     {"a1b3c6", "a1b3c7", "a2b3c6", "a2b3c7", "a1b4c6", "a1b4c7", "a2b4c6", "a2b4c7", "a1b5c6", "a1b5c7", "a2b5c6",
      "a2b5c7"}},
    {"a[1-2]b[3-4]c[5-6]d[7-8]",
     {"a1b3c5d7", "a1b3c5d8", "a2b3c5d7", "a2b3c5d8", "a1b4c5d7", "a1b4c5d8", "a2b4c5d7", "a2b4c5d8", "a1b3c6d7",
      "a1b3c6d8", "a2b3c6d7", "a2b3c6d8", "a1b4c6d7", "a1b4c6d8", "a2b4c6d7", "a2b4c6d8"}},
};

// scontrol answers "Invalid hostlist" (or garbage, for the unmatched brackets) to these.
const std::vector<std::string> kBadHostlists = {"node[01-03,7],gpu-[1-2]x", "n[1-3]-ib", "a[1-2]b", "a[1-2].b",
                                                "n[3-1]", "n[a-b]", "n[[1]]", "n[1,,2]", "n[]", "n[1-2]]",
                                                "n[-2]", "n[1-2-3]", "n[1-2", "n1-2]", "", ","};

TEST(SlurmHostlistTest, ExpandsAsScontrolDoes) {
  for (const auto& [list, hosts] : kHostlists) EXPECT_EQ(expand_slurm_hostlist(list), hosts) << list;
}

TEST(SlurmHostlistTest, MalformedListsAreUsageErrorsNamingTheList) {
  for (const auto& list : kBadHostlists) {
    const std::string error = usage_error([&] { expand_slurm_hostlist(list); });
    EXPECT_NE(error.find("Slurm host list '" + list + "'"), std::string::npos) << list << ": " << error;
  }
  EXPECT_EQ(usage_error([] { expand_slurm_hostlist("a[1-2]b"); }),
            "Slurm host list 'a[1-2]b': 'a[1-2]b' has text after its last ']' (scontrol rejects it too)");
  EXPECT_EQ(usage_error([] { expand_slurm_hostlist("n[3-1]"); }), "Slurm host list 'n[3-1]': range '3-1' ends before it starts");
  EXPECT_NE(usage_error([] { expand_slurm_hostlist("n[1-2000000]"); }).find("more than 2^20 hosts"), std::string::npos);
}

// The same cases against the real scontrol, where Slurm's client is installed (it expands host
// lists locally; a two-line slurm.conf is enough).
TEST(SlurmHostlistTest, AgreesWithTheRealScontrol) {
  if (std::system("command -v scontrol >/dev/null 2>&1") != 0) GTEST_SKIP() << "scontrol is not installed";
  const std::string dir = make_temp_dir("scontrol");
  std::ofstream(dir + "/slurm.conf") << "ClusterName=test\nSlurmctldHost=localhost\n";
  for (const auto& [list, hosts] : kHostlists) {
    const std::string command = "SLURM_CONF=" + dir + "/slurm.conf scontrol show hostnames '" + list + "' 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string out;
    char buffer[256];
    while (fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
    const int status = pclose(pipe);
    if (out.find("configuration source") != std::string::npos) GTEST_SKIP() << "scontrol wants a configuration: " << out;
    std::string expected;
    for (const auto& h : hosts) expected += h + "\n";
    EXPECT_EQ(WEXITSTATUS(status), 0) << list;
    EXPECT_EQ(out, expected) << list;
  }
  std::filesystem::remove_all(dir);
}

TEST(SlurmHostlistTest, TasksPerNode) {
  EXPECT_EQ(expand_slurm_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_slurm_tasks_per_node("4"), (std::vector<int>{4}));
  EXPECT_EQ(expand_slurm_tasks_per_node("1,2(x2),3"), (std::vector<int>{1, 2, 2, 3}));
  EXPECT_EQ(expand_slurm_tasks_per_node("16(x1)"), (std::vector<int>{16}));
  for (const char* bad : {"", "x", "2(x)", "2(3)", "2(x3", "2(x0)", "2,", ",2", "-1", "2(x3)x", "1.5"}) {
    EXPECT_NE(usage_error([&] { expand_slurm_tasks_per_node(bad); }).find("Slurm tasks per node '"), std::string::npos)
        << bad;
  }
}

// ------------------------------------------------------------------ JSON and TF_CONFIG

std::string tf_config(const std::string& cluster, const std::string& type, int index) {
  return "{\"cluster\": {" + cluster + "}, \"task\": {\"type\": \"" + type + "\", \"index\": " + std::to_string(index) +
         "}, \"environment\": \"cloud\"}";
}

const std::string kWithChief =
    R"("chief": ["chief-0:2222"], "worker": ["worker-0:2222", "worker-1:2222"], "ps": ["ps-0:2222", "ps-1:2223"])";
const std::string kWithoutChief = R"("worker": ["127.0.0.1:7000", "127.0.0.1:7001"], "ps": ["127.0.0.1:7100"])";

// nlohmann's parser reads the JSON; what it refuses, and what pstrain refuses beyond RFC 8259
// (a key twice in one object, nesting deeper than 64), is a usage error naming TF_CONFIG.
TEST(TfConfigTest, MalformedJsonIsAUsageErrorWithItsPosition) {
  EXPECT_EQ(usage_error([] { parse_tf_config("[1, 2"); }),
            "TF_CONFIG is not valid JSON: parse error at line 1, column 6: syntax error while parsing array - "
            "unexpected end of input; expected ']'");
  EXPECT_EQ(usage_error([] { parse_tf_config("{} x"); }),
            "TF_CONFIG is not valid JSON: parse error at line 1, column 4: syntax error while parsing value - invalid "
            "literal; last read: '{} x'; expected end of input");
  EXPECT_EQ(usage_error([] { parse_tf_config(R"({"cluster": {"worker": ["w:1"]}, "cluster": {"ps": ["p:1"]}})"); }),
            "TF_CONFIG: the key \"cluster\" appears twice in one object");
  EXPECT_EQ(usage_error([] { parse_tf_config(R"({"cluster": {"worker": ["w:1"], "worker": ["w:2"]}})"); }),
            "TF_CONFIG: the key \"worker\" appears twice in one object");
  EXPECT_EQ(usage_error([] { parse_tf_config(std::string(100, '[')); }),
            "TF_CONFIG is not valid JSON: nested deeper than 64 levels");
  EXPECT_CONTAINS(usage_error([] { parse_tf_config("\"\\ud800\""); }),
                  "TF_CONFIG is not valid JSON: parse error at line 1, column 8: syntax error while parsing value - "
                  "invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF");
  for (const char* bad : {"", "01", "1.", "-", "{'a': 1}", "[1,]", "\"a\tb\"", "\"\\x\"", "tru", "{\"a\" 1}", "\"abc",
                          "\"\xff\"", "1e999", "{\"a\": 1} // comment"}) {
    EXPECT_CONTAINS(usage_error([&] { parse_tf_config(bad); }), "TF_CONFIG is not valid JSON: ") << bad;
  }
  // 64 levels are read (and an unknown top-level member is ignored, as "environment" is).
  const std::string deep = std::string(62, '[') + std::string(62, ']');
  EXPECT_EQ(parse_tf_config(R"({"cluster": {"worker": ["w:1"]}, "task": {"type": "worker"}, "x": )" + deep + "}").worker,
            (Hosts{"w:1"}));
}

TEST(TfConfigTest, ParsesKubeflowsDocument) {
  const TfConfig tf = parse_tf_config(tf_config(kWithChief + R"(, "evaluator": ["eval-0:2222"])", "worker", 1));
  EXPECT_EQ(tf.chief, (Hosts{"chief-0:2222"}));
  EXPECT_EQ(tf.worker, (Hosts{"worker-0:2222", "worker-1:2222"}));
  EXPECT_EQ(tf.ps, (Hosts{"ps-0:2222", "ps-1:2223"}));
  EXPECT_EQ(tf.evaluators, 1u);
  EXPECT_EQ(tf.task_type, "worker");
  EXPECT_EQ(tf.task_index, 1);
  const TfConfig master = parse_tf_config(R"({"cluster": {"master": ["m:1"]}, "task": {"type": "master"}})");
  EXPECT_EQ(master.chief, (Hosts{"m:1"}));
  EXPECT_EQ(master.task_type, "chief");
  EXPECT_EQ(master.task_index, 0);
  // Escapes are decoded; members may come in any order.
  const TfConfig escaped = parse_tf_config(R"({"task": {"index": 0, "type": "w\u006frker"}, "cluster": {"worker": ["w\u002d0:1"]}})");
  EXPECT_EQ(escaped.worker, (Hosts{"w-0:1"}));
  EXPECT_EQ(escaped.task_type, "worker");
}

TEST(TfConfigTest, MalformedOrInconsistentIsAUsageError) {
  EXPECT_EQ(usage_error([] { parse_tf_config(R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker" "index": 0}})"); }),
            "TF_CONFIG is not valid JSON: parse error at line 1, column 66: syntax error while parsing object - "
            "unexpected string literal; expected '}'");
  EXPECT_EQ(usage_error([] { parse_tf_config("{\"cluster\": {\"ps\": [\"p:1\"],\n  \"worker\": [\"w:1\",]}}"); }),
            "TF_CONFIG is not valid JSON: parse error at line 2, column 20: syntax error while parsing value - "
            "unexpected ']'; expected '[', '{', or a literal");
  EXPECT_EQ(usage_error([] { parse_tf_config(tf_config(kWithoutChief, "worker", 2)); }),
            "TF_CONFIG: task worker 2 is not in cluster.worker, which has 2 task(s)");
  EXPECT_EQ(usage_error([] { parse_tf_config(tf_config(R"("worker": ["w:1"], "tpu": ["t:1"])", "worker", 0)); }),
            "TF_CONFIG: unknown job \"tpu\" in cluster (known: chief, worker, ps, evaluator)");
  EXPECT_EQ(usage_error([] { parse_tf_config(tf_config(R"("worker": ["w1"])", "worker", 0)); }),
            "TF_CONFIG: cluster.worker[0]: 'w1' is not host:port");
  EXPECT_EQ(usage_error([] { parse_tf_config(tf_config(R"("worker": "w:1")", "worker", 0)); }),
            "TF_CONFIG: cluster.worker must be an array of \"host:port\" strings, not a string");
  EXPECT_EQ(usage_error([] { parse_tf_config(tf_config(R"("worker": ["w:1"])", "trainer", 0)); }),
            "TF_CONFIG: task.type \"trainer\" is not one of chief, worker, ps, evaluator");
  EXPECT_EQ(usage_error([] { parse_tf_config(tf_config(R"("chief": ["a:1", "b:1"])", "chief", 0)); }),
            "TF_CONFIG: cluster.chief has more than one task");
  EXPECT_EQ(usage_error([] { parse_tf_config(tf_config(R"("ps": ["p:1"])", "ps", 0)); }),
            "TF_CONFIG: cluster has no chief and no worker");
  for (const char* index : {"-1", "1.0", "1e0", "-0", "true", "\"1\"", "1000000000"}) {
    EXPECT_EQ(usage_error([&] {
                parse_tf_config(std::string(R"({"cluster": {"worker": ["w:1"]}, "task": {"type": "worker", "index": )") +
                                index + "}}");
              }),
              "TF_CONFIG: task.index must be a non-negative integer")
        << index;
  }
  EXPECT_EQ(usage_error([] { parse_tf_config(R"({"cluster": {"worker": ["w:1"]}})"); }), "TF_CONFIG has no \"task\" object");
  EXPECT_EQ(usage_error([] { parse_tf_config("[]"); }), "TF_CONFIG must be a JSON object, not an array");
}

// ------------------------------------------------------------------ resolution

JobOptions parse(Role binary, const EnvMap& env, std::vector<const char*> args = {}) {
  args.insert(args.begin(), binary == Role::kPs ? "pstrain-ps" : "pstrain-worker");
  return parse_job_options(binary, static_cast<int>(args.size()), args.data(), env).value();
}

std::string parse_error(Role binary, const EnvMap& env, std::vector<const char*> args = {}) {
  return usage_error([&] { parse(binary, env, args); });
}

EnvMap tf_env(const std::string& cluster, const std::string& type, int index) {
  return {{"TF_CONFIG", tf_config(cluster, type, index)}};
}

TEST(ClusterEnvTest, NoEnvironmentKeepsFlagsAndDefaults) {
  const JobOptions o = parse(Role::kWorker, {}, {"--ps-hosts", "h:1"});
  EXPECT_EQ(o.origin.role, Role::kWorker);
  EXPECT_EQ(o.origin.role_from, "binary");
  EXPECT_EQ(o.origin.index_from, "default");
  EXPECT_EQ(o.origin.peers_from, "flag");
  EXPECT_EQ(o.local_rank, 0);
  EXPECT_EQ(o.origin.local_rank_from, "the index");
  EXPECT_EQ(o.bind, "127.0.0.1");
  EXPECT_DOUBLE_EQ(o.start_timeout_s, o.timeout_s);
}

TEST(ClusterEnvTest, TfConfigWithoutChief) {
  const EnvMap env = tf_env(kWithoutChief, "worker", 1);
  const JobOptions w = parse(Role::kWorker, env);
  EXPECT_EQ(w.origin.role, Role::kWorker);
  EXPECT_EQ(w.index, 1);
  EXPECT_EQ(w.num_workers, 2);
  EXPECT_EQ(w.num_ps, 1);
  EXPECT_EQ(w.ps_hosts, (Hosts{"127.0.0.1:7100"}));
  EXPECT_EQ(w.origin.index_from, "TF_CONFIG");
  EXPECT_EQ(w.origin.counts_from, "TF_CONFIG");
  EXPECT_EQ(w.origin.peers_from, "TF_CONFIG");
  EXPECT_EQ(parse(Role::kWorker, tf_env(kWithoutChief, "worker", 0)).index, 0);  // worker 0 is the chief
  const JobOptions ps = parse(Role::kPs, tf_env(kWithoutChief, "ps", 0));
  EXPECT_EQ(ps.origin.role, Role::kPs);
  EXPECT_EQ(ps.index, 0);
  EXPECT_EQ(ps.port, 7100);
  EXPECT_EQ(ps.bind, "127.0.0.1");  // a loopback entry binds as given
}

TEST(ClusterEnvTest, TfConfigWithChief) {
  const JobOptions chief = parse(Role::kWorker, tf_env(kWithChief, "chief", 0));
  EXPECT_EQ(chief.index, 0);
  EXPECT_EQ(chief.num_workers, 3);
  EXPECT_EQ(chief.num_ps, 2);
  EXPECT_EQ(chief.ps_hosts, (Hosts{"ps-0:2222", "ps-1:2223"}));
  EXPECT_EQ(parse(Role::kWorker, tf_env(kWithChief, "worker", 0)).index, 1);
  EXPECT_EQ(parse(Role::kWorker, tf_env(kWithChief, "worker", 1)).index, 2);
  const JobOptions ps = parse(Role::kPs, tf_env(kWithChief, "ps", 1));
  EXPECT_EQ(ps.index, 1);
  EXPECT_EQ(ps.port, 2223);
  EXPECT_EQ(ps.bind, "0.0.0.0");  // ps-1 is a name another host resolves; it need not be bindable here
  EXPECT_EQ(parse(Role::kPs, tf_env(kWithChief, "ps", 1), {"--bind", "10.0.0.5"}).bind, "10.0.0.5");
  const EnvMap localhost = tf_env(R"("worker": ["localhost:1"], "ps": ["localhost:2"])", "ps", 0);
  EXPECT_EQ(parse(Role::kPs, localhost).bind, "127.0.0.1");
}

TEST(ClusterEnvTest, TfConfigAllreduceUsesWorkerZeroAsTheCoordinator) {
  const std::string cluster = R"("chief": ["c:3000"], "worker": ["w:3001"])";
  const JobOptions other = parse(Role::kWorker, tf_env(cluster, "worker", 0), {"--mode", "allreduce"});
  EXPECT_EQ(other.index, 1);
  EXPECT_EQ(other.coordinator, "c:3000");
  const JobOptions chief = parse(Role::kWorker, tf_env(cluster, "chief", 0), {"--mode", "allreduce"});
  EXPECT_EQ(chief.coordinator, "0.0.0.0:3000");  // it binds its own entry's port
  EXPECT_EQ(parse_error(Role::kWorker, tf_env(kWithChief, "chief", 0), {"--mode", "allreduce"}),
            "TF_CONFIG lists 2 ps task(s), but --mode allreduce uses no parameter servers: remove the PS replicas");
  EXPECT_EQ(parse_error(Role::kWorker, tf_env(cluster, "chief", 0)),
            "TF_CONFIG lists no ps tasks: --mode sync needs at least one (or use --mode allreduce)");
}

TEST(ClusterEnvTest, EvaluatorHasNothingToDo) {
  const std::string cluster = kWithChief + R"(, "evaluator": ["eval-0:2222"])";
  EXPECT_TRUE(parse(Role::kWorker, tf_env(cluster, "evaluator", 0)).origin.evaluator);
  EXPECT_TRUE(parse(Role::kPs, tf_env(cluster, "evaluator", 0)).origin.evaluator);
  // The evaluator job does not count as workers.
  const JobOptions w = parse(Role::kWorker, tf_env(cluster, "worker", 1));
  EXPECT_FALSE(w.origin.evaluator);
  EXPECT_EQ(w.num_workers, 3);
}

TEST(ClusterEnvTest, WrongBinaryForTheTaskIsAUsageError) {
  EXPECT_EQ(parse_error(Role::kPs, tf_env(kWithChief, "worker", 1)),
            "TF_CONFIG's task is worker 1, but this is pstrain-ps: start pstrain-worker for it, or give --role auto to "
            "switch binaries");
  EXPECT_EQ(parse_error(Role::kWorker, tf_env(kWithChief, "ps", 0)),
            "TF_CONFIG's task is ps 0, but this is pstrain-worker: start pstrain-ps for it, or give --role auto to "
            "switch binaries");
  // --role auto takes the environment's role (main() then runs the other binary).
  const JobOptions o = parse(Role::kPs, tf_env(kWithChief, "worker", 1), {"--role", "auto"});
  EXPECT_EQ(o.origin.role, Role::kWorker);
  EXPECT_EQ(o.index, 2);
  EXPECT_EQ(parse_error(Role::kWorker, tf_env(kWithChief, "ps", 0), {"--role", "worker"}),
            "--role worker contradicts TF_CONFIG: its task is ps 0");
  EXPECT_EQ(parse_error(Role::kWorker, {}, {"--role", "chief"}), "--role: 'chief' is not one of auto, ps, worker");
}

EnvMap slurm_env(int rank, int world, const std::string& nodes, const std::string& per_node, int local) {
  return {{"SLURM_PROCID", std::to_string(rank)}, {"SLURM_NTASKS", std::to_string(world)},
          {"SLURM_LOCALID", std::to_string(local)}, {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NODELIST", nodes}, {"SLURM_STEP_TASKS_PER_NODE", per_node},
          {"SLURM_JOB_NODELIST", "unused[1-9]"}};
}

TEST(ClusterEnvTest, SlurmRanks) {
  // 5 tasks over 2 nodes (3 + 2), block distribution: ranks 0-2 on n01, 3-4 on n02; 2 PS.
  const auto env = [](int rank, int local) { return slurm_env(rank, 5, "n[01-02]", "3,2", local); };
  const JobOptions ps1 = parse(Role::kPs, env(1, 1), {"--num-ps", "2"});
  EXPECT_EQ(ps1.origin.role, Role::kPs);
  EXPECT_EQ(ps1.index, 1);
  EXPECT_EQ(ps1.port, 29501);
  EXPECT_EQ(ps1.bind, "0.0.0.0");
  EXPECT_EQ(ps1.num_workers, 3);
  const JobOptions w2 = parse(Role::kWorker, env(4, 1), {"--num-ps", "2", "--base-port", "4000"});
  EXPECT_EQ(w2.index, 2);
  EXPECT_EQ(w2.num_workers, 3);
  EXPECT_EQ(w2.local_rank, 1);
  EXPECT_EQ(w2.origin.local_rank_from, "Slurm");
  EXPECT_EQ(w2.ps_hosts, (Hosts{"n01:4000", "n01:4001"}));
  EXPECT_EQ(w2.origin.peers_from, "Slurm");
  // Cyclic: ranks 0, 2, 4 on n01 and 1, 3 on n02.
  EnvMap cyclic = env(3, 1);
  cyclic["SLURM_DISTRIBUTION"] = "cyclic:block";
  EXPECT_EQ(parse(Role::kWorker, cyclic, {"--num-ps", "2"}).ps_hosts, (Hosts{"n01:29500", "n02:29501"}));
  EXPECT_EQ(parse_error(Role::kWorker, env(0, 0), {"--num-ps", "2"}),
            "Slurm rank 0 is parameter server 0 (the first 2 rank(s) are parameter servers, --num-ps), but this is "
            "pstrain-worker: start pstrain-ps for it, or give --role auto to switch binaries");
  EXPECT_EQ(parse(Role::kWorker, env(0, 0), {"--num-ps", "2", "--role", "auto"}).origin.role, Role::kPs);
  EXPECT_EQ(parse_error(Role::kWorker, slurm_env(0, 1, "n1", "1", 0), {"--role", "auto"}),
            "Slurm runs 1 rank(s) and the first 1 are parameter servers (--num-ps): no rank is left for a worker");
}

TEST(ClusterEnvTest, SlurmOnOneNodeUsesLoopback) {
  const JobOptions w = parse(Role::kWorker, slurm_env(2, 3, "gpu7", "3", 2));
  EXPECT_EQ(w.index, 1);
  EXPECT_EQ(w.ps_hosts, (Hosts{"127.0.0.1:29500"}));
  const JobOptions ps = parse(Role::kPs, slurm_env(0, 3, "gpu7", "3", 0));
  EXPECT_EQ(ps.bind, "127.0.0.1");
  EXPECT_EQ(ps.port, 29500);
}

TEST(ClusterEnvTest, SlurmAllreduceHasNoPsRanks) {
  const auto env = [](int rank) { return slurm_env(rank, 4, "a,b", "2(x2)", rank % 2); };
  const JobOptions w0 = parse(Role::kWorker, env(0), {"--mode", "allreduce"});
  EXPECT_EQ(w0.index, 0);
  EXPECT_EQ(w0.num_workers, 4);
  EXPECT_EQ(w0.coordinator, "0.0.0.0:29500");
  const JobOptions w3 = parse(Role::kWorker, env(3), {"--mode", "allreduce"});
  EXPECT_EQ(w3.index, 3);
  EXPECT_EQ(w3.coordinator, "a:29500");
}

TEST(ClusterEnvTest, SlurmPlacementThatCannotBeComputedNeedsPsHosts) {
  EnvMap env = slurm_env(3, 4, "a,b", "2(x2)", 1);
  env["SLURM_DISTRIBUTION"] = "arbitrary";
  const std::string error = parse_error(Role::kWorker, env);
  EXPECT_EQ(error,
            "cannot tell where rank 0 runs: SLURM_DISTRIBUTION=arbitrary: which node runs which rank is known only for "
            "block and cyclic distributions; give --ps-hosts HOST:PORT,... (PS s listens on --base-port + s)");
  EXPECT_EQ(parse(Role::kWorker, env, {"--ps-hosts", "a:5"}).ps_hosts, (Hosts{"a:5"}));
  EnvMap wrong_node = slurm_env(3, 4, "a,b", "2(x2)", 1);
  wrong_node["SLURMD_NODENAME"] = "a";  // block places rank 3 on b
  EXPECT_NE(parse_error(Role::kWorker, wrong_node).find("SLURMD_NODENAME is a but the step's node list and task "
                                                        "counts place rank 3 on b"),
            std::string::npos);
  EXPECT_NE(parse_error(Role::kWorker, slurm_env(3, 4, "a,b", "3,3", 1)).find("does not fit"), std::string::npos);
  EnvMap bad = slurm_env(0, 2, "a", "2", 0);
  bad["SLURM_PROCID"] = "one";
  EXPECT_EQ(parse_error(Role::kPs, bad), "SLURM_PROCID='one' is not a non-negative integer");
  EXPECT_EQ(parse_error(Role::kPs, slurm_env(2, 2, "a", "2", 0)), "SLURM_PROCID=2 is not below SLURM_NTASKS=2");
}

TEST(ClusterEnvTest, SlurmBatchScriptVariablesAreIgnored) {
  EnvMap batch = slurm_env(0, 4, "a,b", "2(x2)", 0);
  batch.erase("SLURM_STEP_ID");  // a batch script or salloc shell: not an srun task
  const JobOptions o = parse(Role::kWorker, batch, {"--ps-hosts", "h:1"});
  EXPECT_EQ(o.origin.role_from, "binary");
  EXPECT_EQ(o.num_workers, 1);
  EXPECT_EQ(o.origin.local_rank_from, "the index");
}

EnvMap mpi_env(int rank, int world, int local, int local_size) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)}, {"OMPI_COMM_WORLD_SIZE", std::to_string(world)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)}};
}

TEST(ClusterEnvTest, OpenMpiRanks) {
  const JobOptions ps = parse(Role::kPs, mpi_env(1, 6, 1, 6), {"--num-ps", "2"});
  EXPECT_EQ(ps.index, 1);
  EXPECT_EQ(ps.port, 29501);
  EXPECT_EQ(ps.origin.role_from, "Open MPI");
  const JobOptions w = parse(Role::kWorker, mpi_env(5, 6, 5, 6), {"--num-ps", "2"});
  EXPECT_EQ(w.index, 3);
  EXPECT_EQ(w.num_workers, 4);
  EXPECT_EQ(w.local_rank, 5);
  EXPECT_EQ(w.ps_hosts, (Hosts{"127.0.0.1:29500", "127.0.0.1:29501"}));
  // Across hosts Open MPI does not say where rank s runs: --ps-hosts is needed.
  EXPECT_EQ(parse_error(Role::kWorker, mpi_env(5, 6, 1, 2), {"--num-ps", "2"}),
            "cannot tell where rank 0 runs: the ranks run on several hosts (OMPI_COMM_WORLD_LOCAL_SIZE=2 of 6) and "
            "Open MPI's variables do not say which runs where; give --ps-hosts HOST:PORT,... (PS s listens on "
            "--base-port + s)");
  const JobOptions given = parse(Role::kWorker, mpi_env(5, 6, 1, 2), {"--num-ps", "2", "--ps-hosts", "a:1,b:2"});
  EXPECT_EQ(given.index, 3);
  EXPECT_EQ(given.ps_hosts, (Hosts{"a:1", "b:2"}));
  EXPECT_EQ(parse(Role::kPs, mpi_env(0, 6, 0, 2), {"--num-ps", "2"}).bind, "0.0.0.0");
}

TEST(ClusterEnvTest, Precedence) {
  // A flag beats TF_CONFIG.
  const JobOptions flags = parse(Role::kWorker, tf_env(kWithChief, "worker", 1),
                                 {"--index", "4", "--num-workers", "5", "--ps-hosts", "x:1,y:2", "--local-rank", "3"});
  EXPECT_EQ(flags.index, 4);
  EXPECT_EQ(flags.num_workers, 5);
  EXPECT_EQ(flags.num_ps, 2);  // not given: TF_CONFIG's
  EXPECT_EQ(flags.ps_hosts, (Hosts{"x:1", "y:2"}));
  EXPECT_EQ(flags.local_rank, 3);
  EXPECT_EQ(flags.origin.index_from, "flag");
  EXPECT_EQ(flags.origin.counts_from, "ps: TF_CONFIG, workers: flag");
  EXPECT_EQ(flags.origin.local_rank_from, "flag");
  // TF_CONFIG beats Slurm (whose rank 0 would be a PS).
  EnvMap tf_and_slurm = slurm_env(0, 4, "a", "4", 0);
  tf_and_slurm["TF_CONFIG"] = tf_config(kWithChief, "worker", 0);
  const JobOptions tf = parse(Role::kWorker, tf_and_slurm);
  EXPECT_EQ(tf.index, 1);
  EXPECT_EQ(tf.num_workers, 3);
  EXPECT_EQ(tf.origin.role_from, "TF_CONFIG");
  // Slurm's variables beat the defaults; Open MPI's and Slurm's together mean mpirun inside an
  // allocation, where Slurm's describe mpirun's daemon (here task 0 of 1), not the rank.
  EnvMap slurm = slurm_env(0, 1, "a", "1", 0);
  for (const auto& [k, v] : mpi_env(3, 4, 3, 4)) slurm[k] = v;
  const JobOptions mpi = parse(Role::kWorker, slurm);
  EXPECT_EQ(mpi.index, 2);
  EXPECT_EQ(mpi.num_workers, 3);
  EXPECT_EQ(mpi.origin.role_from, "Open MPI");
  EXPECT_EQ(parse(Role::kWorker, slurm_env(3, 4, "a", "4", 3)).origin.role_from, "Slurm");
  // The environment beats a config file, whose cluster values are the job's defaults.
  const std::string dir = make_temp_dir("cluster-env");
  std::ofstream(dir + "/job.cfg") << "num-workers = 2\nnum-ps = 1\nbase-port = 6000\n";
  const std::string config = dir + "/job.cfg";
  const JobOptions env_wins = parse(Role::kWorker, slurm_env(4, 5, "a", "5", 4), {"--config", config.c_str()});
  EXPECT_EQ(env_wins.num_workers, 4);
  EXPECT_EQ(env_wins.index, 3);
  EXPECT_EQ(env_wins.ps_hosts, (Hosts{"127.0.0.1:6000"}));
  EXPECT_EQ(env_wins.origin.counts_from, "ps: config, workers: Slurm");
  const JobOptions config_only = parse(Role::kWorker, {}, {"--config", config.c_str(), "--ps-hosts", "h:1"});
  EXPECT_EQ(config_only.num_workers, 2);
  EXPECT_EQ(config_only.origin.counts_from, "config");
  std::filesystem::remove_all(dir);
}

TEST(ClusterEnvTest, PlacementLineSaysWhereEachPartCameFrom) {
  const JobOptions o = parse(Role::kWorker, slurm_env(4, 5, "n[1-2]", "3,2", 1), {"--num-ps", "2", "--index", "2"});
  const std::string line = describe_placement(o, "cuda:1");
  EXPECT_NE(line.find("role worker (binary), index 2 of 3 (flag), host "), std::string::npos) << line;
  EXPECT_NE(line.find(", local rank 1 (Slurm), device cuda:1; 2 PS, 3 worker(s) (ps: flag, workers: Slurm); PS at n1:29500,n1:29501 (Slurm)"),
            std::string::npos)
      << line;
  const JobOptions ps = parse(Role::kPs, tf_env(kWithChief, "ps", 1));
  EXPECT_NE(describe_placement(ps, "").find("role ps (TF_CONFIG), index 1 of 2 (TF_CONFIG)"), std::string::npos);
  EXPECT_NE(describe_placement(ps, "").find("device none"), std::string::npos);
}

}  // namespace
}  // namespace pstrain
