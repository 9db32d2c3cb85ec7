// A process's place in the cluster from its environment (docs/cluster.md, "Roles from the
// environment"): Kubeflow's TF_CONFIG, a Slurm job step, or Open MPI's mpirun. The parsers are
// pure functions of strings or of an environment map, so tests pass maps instead of setenv.
// Precedence per field: command-line flags > TF_CONFIG > Slurm > Open MPI > config file > defaults.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "shared/config/options.h"

namespace pstrain {

const char* role_name(Role role);  // "ps" | "worker"

// This process's environment variables.
EnvMap process_environment();

// A Slurm host list as `scontrol show hostnames` expands it: "node[01-03,7],gpu[1-2]" -> node01
// node02 node03 node7 gpu1 gpu2. Zero padding is the low bound's; items are separated by commas
// or blanks; several bracket groups in one name give every combination in scontrol's order; a
// name may not go on after its last ']' (scontrol: "Invalid hostlist"). Throws
// pstrain::UsageError naming the list.
std::vector<std::string> expand_slurm_hostlist(const std::string& list);

// SLURM_TASKS_PER_NODE: "2(x3),1" -> 2 2 2 1. Throws pstrain::UsageError.
std::vector<int> expand_slurm_tasks_per_node(const std::string& text);

// Kubeflow's TF_CONFIG: {"cluster": {"chief": [..], "worker": [..], "ps": [..]},
//                        "task": {"type": "worker", "index": 1}}.
struct TfConfig {
  std::vector<std::string> chief, worker, ps;  // "host:port", as listed ("master" counts as chief)
  size_t evaluators = 0;                       // entries of an "evaluator" job (ignored)
  std::string task_type;                       // chief | worker | ps | evaluator
  int task_index = 0;
};
// Throws pstrain::UsageError naming TF_CONFIG and, for malformed JSON, the position.
TfConfig parse_tf_config(const std::string& json);

// What the environment says about this process; source "default" when it says nothing.
struct EnvCluster {
  std::string source = "default";  // "TF_CONFIG" | "Slurm" | "Open MPI" | "default"
  TfConfig tf;                     // source TF_CONFIG
  int rank = -1, world = 0;        // Slurm / Open MPI
  int local_rank = -1;             // Slurm / Open MPI: this process's rank on its host
  bool one_host = false;           // every rank runs on this host (Slurm: one node; Open MPI: LOCAL_SIZE == SIZE)
  std::vector<std::string> rank_hosts;  // Slurm: the node of every rank; empty if unknown, then:
  std::string rank_hosts_problem;       // why
  std::vector<std::string> notes;       // what was ignored, for the log
};
// Throws pstrain::UsageError for a malformed variable of the source it uses.
EnvCluster read_cluster_env(const EnvMap& env);

// Fills the cluster fields of *o (role, index, counts, PS addresses, coordinator, bind, port,
// local rank) that the command line did not give from `env`, and o->origin with where each
// came from. `binary` is the role of the running binary. Throws pstrain::UsageError when the
// environment is inconsistent, names the other binary's role without --role auto, or lacks what
// this process needs (e.g. PS addresses under Open MPI across hosts).
void resolve_cluster(Role binary, const EnvCluster& env, const GivenOptions& given, JobOptions* o);

// The start line: role, index, host, local rank, device and where each came from.
std::string describe_placement(const JobOptions& o, const std::string& device);

// Decides what this process does after its options were parsed: true = go on as `binary`;
// false = nothing to do (a TF_CONFIG evaluator; logged); a process whose role is the other
// binary's (--role auto, or an explicit --role) is replaced by that binary, found beside this
// one, with the same arguments (execv; throws pstrain::Error if that fails).
bool dispatch_role(Role binary, const JobOptions& o, char** argv);

}  // namespace pstrain
