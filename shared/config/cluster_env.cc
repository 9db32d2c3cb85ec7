#include "shared/config/cluster_env.h"

#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "shared/util/error.h"
#include "shared/util/log.h"

extern char** environ;

namespace pstrain {
namespace {

constexpr size_t kMaxHosts = 1 << 20;  // an expanded host list longer than this is refused
constexpr const char* kDispatchedFrom = "PSTRAIN_ROLE_DISPATCHED_FROM";

// Non-negative decimal integer of at most 9 digits, else -1.
int small_int(const std::string& text) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(text);
}

// ---------------------------------------------------------------- Slurm host lists

// "01-03,7" -> 01 02 03 7 (the width of a range is its low bound's, as Slurm prints it; "N-"
// is N, as in scontrol).
std::vector<std::string> expand_ranges(const std::string& ranges, const std::string& list) {
  const auto bad = [&](const std::string& why) { return UsageError("Slurm host list '" + list + "': " + why); };
  std::vector<std::string> out;
  std::stringstream ss(ranges + ",");
  std::string range;
  while (std::getline(ss, range, ',')) {
    const size_t dash = range.find('-');
    const std::string lo = range.substr(0, dash);
    const std::string hi = dash == std::string::npos || dash + 1 == range.size() ? lo : range.substr(dash + 1);
    const int first = small_int(lo), last = small_int(hi);
    if (first < 0 || last < 0) throw bad("'" + range + "' in '[" + ranges + "]' is not a number or a range N-M");
    if (last < first) throw bad("range '" + range + "' ends before it starts");
    if (out.size() + static_cast<size_t>(last - first) >= kMaxHosts) throw bad("more than 2^20 hosts");
    for (int n = first; n <= last; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(digits);
    }
  }
  return out;
}

// One host expression with bracket groups, e.g. "rack[1-2]n[01-02]". Several groups give every
// combination in scontrol's order: the last group varies fastest, then the first, the second,
// ... (for two groups: the first slowest).
std::vector<std::string> expand_one(const std::string& item, const std::string& list) {
  const auto bad = [&](const std::string& why) { return UsageError("Slurm host list '" + list + "': " + why); };
  std::vector<std::string> texts;                 // texts[k] precedes group k; the last follows them all
  std::vector<std::vector<std::string>> groups;
  size_t at = 0;
  for (;;) {
    const size_t open = item.find('[', at);
    texts.push_back(item.substr(at, open == std::string::npos ? std::string::npos : open - at));
    if (texts.back().find(']') != std::string::npos) throw bad("unmatched ']' in '" + item + "'");
    if (open == std::string::npos) break;
    const size_t close = item.find(']', open);
    if (close == std::string::npos) throw bad("unmatched '[' in '" + item + "'");
    const std::string inner = item.substr(open + 1, close - open - 1);
    if (inner.find('[') != std::string::npos) throw bad("nested '[' in '" + item + "'");
    groups.push_back(expand_ranges(inner, list));
    at = close + 1;
  }
  if (!groups.empty() && !texts.back().empty()) {
    throw bad("'" + item + "' has text after its last ']' (scontrol rejects it too)");
  }
  size_t total = 1;
  for (const auto& g : groups) {
    total *= g.size();
    if (total > kMaxHosts) throw bad("more than 2^20 hosts");
  }
  std::vector<size_t> order;  // groups from the fastest-varying to the slowest
  if (!groups.empty()) order.push_back(groups.size() - 1);
  for (size_t k = 0; k + 1 < groups.size(); ++k) order.push_back(k);
  std::vector<size_t> pick(groups.size(), 0);
  std::vector<std::string> hosts;
  for (size_t n = 0; n < total; ++n) {
    std::string host = texts[0];
    for (size_t k = 0; k < groups.size(); ++k) host += groups[k][pick[k]] + texts[k + 1];
    hosts.push_back(std::move(host));
    for (size_t k : order) {
      if (++pick[k] < groups[k].size()) break;
      pick[k] = 0;
    }
  }
  return hosts;
}

// ---------------------------------------------------------------- TF_CONFIG

using Json = nlohmann::ordered_json;  // members in document order, so the first problem is reported

constexpr int kMaxJsonDepth = 64;

// TF_CONFIG's document. Beyond RFC 8259, as strict as before nlohmann's parser took over: a key
// that appears twice in one object (nlohmann would keep the last) and nesting deeper than
// kMaxJsonDepth are refused.
Json parse_json(const std::string& text) {
  std::vector<std::set<std::string>> keys;  // of each object being read
  const auto check = [&keys](int depth, Json::parse_event_t event, Json& parsed) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth) {
      throw UsageError("TF_CONFIG is not valid JSON: nested deeper than " + std::to_string(kMaxJsonDepth) +
                       " levels");
    }
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end) keys.pop_back();
    if (event == Json::parse_event_t::key && !keys.back().insert(parsed.get<std::string>()).second) {
      throw UsageError("TF_CONFIG: the key \"" + parsed.get<std::string>() +
                       "\" appears twice in one object");
    }
    return true;
  };
  try {
    return Json::parse(text, check);
  } catch (const Json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 6: ...", less the id.
    const std::string what = e.what();
    const size_t id_end = what.find("] ");
    throw UsageError("TF_CONFIG is not valid JSON: " +
                     (id_end == std::string::npos ? what : what.substr(id_end + 2)));
  }
}

const char* kind_of(const Json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  if (value.is_string()) return "a string";
  if (value.is_number()) return "a number";
  if (value.is_boolean()) return "a boolean";
  return "null";
}

// The member `key` of an object, or nullptr.
const Json* member(const Json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::vector<std::string> address_list(const Json& value, const std::string& job) {
  if (!value.is_array()) {
    throw UsageError(std::string("TF_CONFIG: cluster.") + job +
                     " must be an array of \"host:port\" strings, not " + kind_of(value));
  }
  std::vector<std::string> out;
  for (const Json& item : value) {
    const std::string where = "TF_CONFIG: cluster." + job + "[" + std::to_string(out.size()) + "]";
    if (!item.is_string()) throw UsageError(where + " must be a \"host:port\" string, not " + kind_of(item));
    const std::string& address = item.get_ref<const std::string&>();
    try {
      parse_host_port(address);
    } catch (const UsageError& e) {
      throw UsageError(where + ": " + e.what());
    }
    out.push_back(address);
  }
  return out;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1" || host == "[::1]";
}

std::string host_of(const std::string& address) { return address.substr(0, address.rfind(':')); }

// ---------------------------------------------------------------- environments

const std::string* lookup(const EnvMap& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

int env_int(const EnvMap& env, const char* name) {
  const std::string* value = lookup(env, name);
  if (value == nullptr) return -1;
  const int n = small_int(*value);
  if (n < 0) throw UsageError(std::string(name) + "='" + *value + "' is not a non-negative integer");
  return n;
}

// The first of `names` that is set, or nullptr; *which names it.
const std::string* first_of(const EnvMap& env, std::initializer_list<const char*> names, std::string* which) {
  for (const char* name : names) {
    if (const std::string* v = lookup(env, name)) {
      *which = name;
      return v;
    }
  }
  return nullptr;
}

void read_slurm(const EnvMap& env, EnvCluster* e) {
  e->source = "Slurm";
  e->rank = env_int(env, "SLURM_PROCID");
  e->world = env_int(env, "SLURM_STEP_NUM_TASKS");
  if (e->world < 0) e->world = env_int(env, "SLURM_NTASKS");
  if (e->world < 1) throw UsageError("SLURM_PROCID is set but SLURM_NTASKS (or SLURM_STEP_NUM_TASKS) is not, or is 0");
  if (e->rank >= e->world) {
    throw UsageError("SLURM_PROCID=" + std::to_string(e->rank) + " is not below SLURM_NTASKS=" + std::to_string(e->world));
  }
  e->local_rank = env_int(env, "SLURM_LOCALID");
  std::string nodes_var, tasks_var;
  const std::string* nodes = first_of(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &nodes_var);
  const std::string* tasks = first_of(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &tasks_var);
  if (nodes == nullptr) {
    e->rank_hosts_problem = "Slurm sets no SLURM_STEP_NODELIST or SLURM_JOB_NODELIST";
    return;
  }
  const std::vector<std::string> hosts = expand_slurm_hostlist(*nodes);
  e->one_host = hosts.size() == 1;
  if (tasks == nullptr) {
    e->rank_hosts_problem = "Slurm sets no SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE";
    return;
  }
  const std::vector<int> per_node = expand_slurm_tasks_per_node(*tasks);
  int sum = 0;
  for (int n : per_node) sum += n;
  if (per_node.size() != hosts.size() || sum != e->world) {
    e->rank_hosts_problem = tasks_var + "='" + *tasks + "' does not fit " + nodes_var + "='" + *nodes + "' (" +
                            std::to_string(hosts.size()) + " node(s)) and " + std::to_string(e->world) + " task(s)";
    return;
  }
  std::string distribution = "block";
  if (const std::string* d = lookup(env, "SLURM_DISTRIBUTION")) {
    distribution = d->substr(0, d->find_first_of(":,"));
    if (distribution.empty() || distribution == "*") distribution = "block";
  }
  if (distribution == "block") {
    for (size_t n = 0; n < hosts.size(); ++n) e->rank_hosts.insert(e->rank_hosts.end(), per_node[n], hosts[n]);
  } else if (distribution == "cyclic") {
    std::vector<int> left = per_node;
    while (static_cast<int>(e->rank_hosts.size()) < e->world) {
      for (size_t n = 0; n < hosts.size(); ++n) {
        if (left[n]-- > 0) e->rank_hosts.push_back(hosts[n]);
      }
    }
  } else {
    e->rank_hosts_problem = "SLURM_DISTRIBUTION=" + *lookup(env, "SLURM_DISTRIBUTION") +
                            ": which node runs which rank is known only for block and cyclic distributions";
    return;
  }
  const std::string* me = lookup(env, "SLURMD_NODENAME");
  if (me != nullptr && *me != e->rank_hosts[static_cast<size_t>(e->rank)]) {
    e->rank_hosts_problem = "SLURMD_NODENAME is " + *me + " but the step's node list and task counts place rank " +
                            std::to_string(e->rank) + " on " + e->rank_hosts[static_cast<size_t>(e->rank)];
    e->rank_hosts.clear();
  }
}

void read_open_mpi(const EnvMap& env, EnvCluster* e) {
  e->source = "Open MPI";
  e->rank = env_int(env, "OMPI_COMM_WORLD_RANK");
  e->world = env_int(env, "OMPI_COMM_WORLD_SIZE");
  if (e->world < 1) throw UsageError("OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not, or is 0");
  if (e->rank >= e->world) {
    throw UsageError("OMPI_COMM_WORLD_RANK=" + std::to_string(e->rank) + " is not below OMPI_COMM_WORLD_SIZE=" +
                     std::to_string(e->world));
  }
  e->local_rank = env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK");
  const int local_size = env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE");
  e->one_host = local_size == e->world;
  e->rank_hosts_problem = local_size < 0 ? "OMPI_COMM_WORLD_LOCAL_SIZE is not set, so the ranks may be on several hosts"
                                         : "the ranks run on several hosts (OMPI_COMM_WORLD_LOCAL_SIZE=" +
                                               std::to_string(local_size) + " of " + std::to_string(e->world) +
                                               ") and Open MPI's variables do not say which runs where";
}

// ---------------------------------------------------------------- resolution

class Resolver {
 public:
  Resolver(Role binary, const EnvCluster& env, const GivenOptions& given, JobOptions* o)
      : binary_(binary), env_(env), given_(given), o_(*o), tf_(env.source == "TF_CONFIG"),
        ranks_(env.source == "Slurm" || env.source == "Open MPI") {}

  void run() {
    if (!role_and_index()) return;  // an evaluator
    counts();
    bind_and_port();
    peers();
    local_rank();
  }

 private:
  bool flag(const char* name) const { return given_.command_line.count(name) > 0; }
  std::string from(const char* name) const {
    return flag(name) ? "flag" : given_.config.count(name) > 0 ? "config" : "default";
  }
  // The first ranks are parameter servers, except in allreduce mode, which has none.
  int ps_ranks() const { return o_.mode == Mode::kAllreduce ? 0 : o_.num_ps; }

  std::string task() const { return env_.tf.task_type + " " + std::to_string(env_.tf.task_index); }
  std::string rank_text() const { return env_.source + " rank " + std::to_string(env_.rank); }

  // This task's own TF_CONFIG entry.
  const std::string& own_entry() const {
    const TfConfig& tf = env_.tf;
    const auto& list = tf.task_type == "ps" ? tf.ps : tf.task_type == "chief" ? tf.chief : tf.worker;
    return list[static_cast<size_t>(tf.task_index)];
  }

  bool role_and_index() {
    std::optional<Role> asked;
    if (o_.role == "ps") asked = Role::kPs;
    if (o_.role == "worker") asked = Role::kWorker;
    if (!o_.role.empty() && o_.role != "auto" && !asked) {
      throw UsageError("--role: '" + o_.role + "' is not one of auto, ps, worker");
    }
    std::optional<Role> env_role;
    int env_index = -1;
    std::string what;  // what the environment says this process is, for messages
    if (tf_) {
      const TfConfig& tf = env_.tf;
      if (tf.task_type == "evaluator") {
        o_.origin.evaluator = true;
        o_.origin.role_from = "TF_CONFIG";
        return false;
      }
      env_role = tf.task_type == "ps" ? Role::kPs : Role::kWorker;
      env_index = tf.task_type == "ps" || tf.task_type == "chief"
                      ? tf.task_index
                      : tf.task_index + static_cast<int>(tf.chief.size());
      what = "TF_CONFIG's task is " + task();
      if (asked && *asked != *env_role) throw UsageError("--role " + o_.role + " contradicts TF_CONFIG: its task is " + task());
    } else if (ranks_ && !flag("index")) {
      const int s = ps_ranks();
      env_role = env_.rank < s ? Role::kPs : Role::kWorker;
      env_index = env_.rank < s ? env_.rank : env_.rank - s;
      what = rank_text() + " is " + (env_.rank < s ? "parameter server " : "worker ") + std::to_string(env_index) +
             " (the first " + std::to_string(s) + " rank(s) are parameter servers" +
             (o_.mode == Mode::kAllreduce ? " in sync mode; allreduce mode has none)" : ", --num-ps)");
      if (asked && *asked != *env_role) throw UsageError("--role " + o_.role + " contradicts " + what);
    }
    if (asked) {
      o_.origin.role = *asked;
      o_.origin.role_from = from("role");
    } else if (env_role) {
      o_.origin.role = *env_role;
      o_.origin.role_from = env_.source;
      if (o_.role.empty() && *env_role != binary_) {
        throw UsageError(what + ", but this is pstrain-" + role_name(binary_) + ": start pstrain-" +
                         role_name(*env_role) + " for it, or give --role auto to switch binaries");
      }
    } else {
      o_.origin.role = binary_;
      o_.origin.role_from = o_.role.empty() ? "binary" : from("role");
    }
    o_.origin.index_from = from("index");
    if (!flag("index") && env_index >= 0) {
      o_.index = env_index;
      o_.origin.index_from = env_.source;
    }
    return true;
  }

  void counts() {
    std::string ps_from = from("num-ps"), workers_from = from("num-workers");
    if (tf_) {
      const TfConfig& tf = env_.tf;
      if (o_.mode == Mode::kAllreduce && !tf.ps.empty()) {
        throw UsageError("TF_CONFIG lists " + std::to_string(tf.ps.size()) +
                         " ps task(s), but --mode allreduce uses no parameter servers: remove the PS replicas");
      }
      if (o_.mode != Mode::kAllreduce && tf.ps.empty() && !flag("ps-hosts")) {
        throw UsageError("TF_CONFIG lists no ps tasks: --mode sync needs at least one (or use --mode allreduce)");
      }
      if (!flag("num-ps") && !tf.ps.empty()) {
        o_.num_ps = static_cast<int>(tf.ps.size());
        ps_from = "TF_CONFIG";
      }
      if (!flag("num-workers")) {
        o_.num_workers = static_cast<int>(tf.chief.size() + tf.worker.size());
        workers_from = "TF_CONFIG";
      }
    } else if (ranks_ && !flag("num-workers")) {
      const int workers = env_.world - ps_ranks();
      if (workers < 1) {
        throw UsageError(env_.source + " runs " + std::to_string(env_.world) + " rank(s) and the first " +
                         std::to_string(ps_ranks()) + " are parameter servers (--num-ps): no rank is left for a worker");
      }
      o_.num_workers = workers;
      workers_from = env_.source;
    }
    o_.origin.counts_from = ps_from == workers_from || o_.mode == Mode::kAllreduce
                                ? workers_from
                                : "ps: " + ps_from + ", workers: " + workers_from;
  }

  void bind_and_port() {
    const bool bind_given = flag("bind") || given_.config.count("bind") > 0;
    if (tf_) {
      const std::string host = host_of(own_entry());
      if (!bind_given) o_.bind = !is_loopback(host) ? "0.0.0.0" : host == "localhost" ? "127.0.0.1" : host;
      if (!flag("port") && o_.origin.role == Role::kPs) o_.port = parse_host_port(own_entry()).port;
    } else if (ranks_) {
      if (!bind_given && !env_.one_host) o_.bind = "0.0.0.0";
      if (!flag("port") && o_.origin.role == Role::kPs) o_.port = o_.base_port + o_.index;
    }
  }

  // Where rank r runs, as the other ranks reach it; `flag` names what to give instead.
  std::string host_of_rank(int r, const char* flag_name) const {
    if (env_.one_host) return "127.0.0.1";
    if (!env_.rank_hosts.empty()) return env_.rank_hosts[static_cast<size_t>(r)];
    throw UsageError("cannot tell where rank " + std::to_string(r) + " runs: " + env_.rank_hosts_problem + "; give " +
                     flag_name);
  }

  void peers() {
    if (o_.origin.role != Role::kWorker) return;
    if (o_.mode == Mode::kAllreduce) {
      o_.origin.peers_from = from("coordinator");
      if (flag("coordinator") || !(tf_ || ranks_)) return;
      std::string port;
      if (tf_) {
        const std::string& first = env_.tf.chief.empty() ? env_.tf.worker.at(0) : env_.tf.chief[0];
        o_.coordinator = o_.index == 0 ? o_.bind + first.substr(first.rfind(':')) : first;
      } else {
        o_.coordinator = (o_.index == 0 ? o_.bind : host_of_rank(0, "--coordinator HOST:PORT (worker 0's host)")) + ":" +
                         std::to_string(o_.base_port);
      }
      o_.origin.peers_from = env_.source;
      return;
    }
    o_.origin.peers_from = from("ps-hosts");
    if (flag("ps-hosts")) return;
    if (tf_) {
      o_.ps_hosts = env_.tf.ps;
      o_.origin.peers_from = "TF_CONFIG";
    } else if (ranks_) {
      o_.ps_hosts.clear();
      for (int s = 0; s < o_.num_ps; ++s) {
        o_.ps_hosts.push_back(host_of_rank(s, "--ps-hosts HOST:PORT,... (PS s listens on --base-port + s)") + ":" +
                              std::to_string(o_.base_port + s));
      }
      o_.origin.peers_from = env_.source;
    }
  }

  void local_rank() {
    o_.origin.local_rank_from = from("local-rank");
    if (flag("local-rank")) return;
    if (env_.local_rank >= 0) {
      o_.local_rank = env_.local_rank;
      o_.origin.local_rank_from = env_.source;
    } else if (o_.local_rank < 0) {
      o_.local_rank = o_.index;
      o_.origin.local_rank_from = "the index";
    }
  }

  const Role binary_;
  const EnvCluster& env_;
  const GivenOptions& given_;
  JobOptions& o_;
  const bool tf_, ranks_;
};

}  // namespace

const char* role_name(Role role) { return role == Role::kPs ? "ps" : "worker"; }

EnvMap process_environment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

std::vector<std::string> expand_slurm_hostlist(const std::string& list) {
  std::vector<std::string> hosts;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {  // items end at a comma or blank outside brackets
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    const bool blank = c == ' ' || c == '\t' || c == '\n';
    if (depth > 0 && blank) throw UsageError("Slurm host list '" + list + "': blank inside '[...]'");
    if ((c != ',' && !blank) || depth > 0) continue;
    const std::string item = list.substr(start, i - start);
    start = i + 1;
    if (item.empty()) continue;  // "a,,b" is a and b, as in scontrol
    for (auto& h : expand_one(item, list)) {
      if (hosts.size() >= kMaxHosts) throw UsageError("Slurm host list '" + list + "': more than 2^20 hosts");
      hosts.push_back(std::move(h));
    }
  }
  if (hosts.empty()) throw UsageError("Slurm host list '" + list + "' names no host");
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& text) {
  std::vector<int> counts;
  std::stringstream ss(text);
  std::string item;
  const auto bad = [&](const std::string& why) {
    return UsageError("Slurm tasks per node '" + text + "': " + why);
  };
  while (std::getline(ss, item, ',')) {
    const size_t paren = item.find('(');
    const int count = small_int(item.substr(0, paren));
    int repeat = 1;
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')') {
        throw bad("'" + item + "' is not N or N(xK)");
      }
      repeat = small_int(item.substr(paren + 2, item.size() - paren - 3));
    }
    if (count < 0 || repeat < 1) throw bad("'" + item + "' is not N or N(xK)");
    if (counts.size() + static_cast<size_t>(repeat) > kMaxHosts) throw bad("more than 2^20 nodes");
    counts.insert(counts.end(), static_cast<size_t>(repeat), count);
  }
  if (counts.empty() || text.back() == ',') throw bad("empty entry");
  return counts;
}

TfConfig parse_tf_config(const std::string& json) {
  const Json root = parse_json(json);
  if (!root.is_object()) {
    throw UsageError(std::string("TF_CONFIG must be a JSON object, not ") + kind_of(root));
  }
  TfConfig tf;
  const Json* cluster = member(root, "cluster");
  if (cluster == nullptr || !cluster->is_object()) throw UsageError("TF_CONFIG has no \"cluster\" object");
  for (const auto& [job, value] : cluster->items()) {
    if (job == "chief" || job == "master") {
      if (!tf.chief.empty()) throw UsageError("TF_CONFIG: cluster lists both \"chief\" and \"master\" (the same job)");
      tf.chief = address_list(value, job);
      if (tf.chief.size() > 1) throw UsageError("TF_CONFIG: cluster." + job + " has more than one task");
    } else if (job == "worker") {
      tf.worker = address_list(value, job);
    } else if (job == "ps") {
      tf.ps = address_list(value, job);
    } else if (job == "evaluator") {
      tf.evaluators = address_list(value, job).size();
    } else {
      throw UsageError("TF_CONFIG: unknown job \"" + job + "\" in cluster (known: chief, worker, ps, evaluator)");
    }
  }
  if (tf.chief.empty() && tf.worker.empty()) throw UsageError("TF_CONFIG: cluster has no chief and no worker");
  const Json* task = member(root, "task");
  if (task == nullptr || !task->is_object()) throw UsageError("TF_CONFIG has no \"task\" object");
  const Json* type = member(*task, "type");
  if (type == nullptr || !type->is_string()) {
    throw UsageError("TF_CONFIG: task.type must be a string (chief, worker, ps or evaluator)");
  }
  const std::string& type_text = type->get_ref<const std::string&>();
  tf.task_type = type_text == "master" ? "chief" : type_text;
  if (const Json* index = member(*task, "index")) {
    // As before: at most 9 digits, so the index is an int; 1.0 and -0 are not indices.
    tf.task_index =
        index->is_number_unsigned() && index->get<uint64_t>() <= 999999999 ? index->get<int>() : -1;
    if (tf.task_index < 0) throw UsageError("TF_CONFIG: task.index must be a non-negative integer");
  }
  const std::vector<std::string>* list = tf.task_type == "chief"    ? &tf.chief
                                         : tf.task_type == "worker" ? &tf.worker
                                         : tf.task_type == "ps"     ? &tf.ps
                                                                    : nullptr;
  if (list == nullptr && tf.task_type != "evaluator") {
    throw UsageError("TF_CONFIG: task.type \"" + type_text + "\" is not one of chief, worker, ps, evaluator");
  }
  if (list != nullptr && static_cast<size_t>(tf.task_index) >= list->size()) {
    throw UsageError("TF_CONFIG: task " + tf.task_type + " " + std::to_string(tf.task_index) + " is not in cluster." +
                     tf.task_type + ", which has " + std::to_string(list->size()) + " task(s)");
  }
  return tf;
}

EnvCluster read_cluster_env(const EnvMap& env) {
  EnvCluster e;
  const bool slurm = lookup(env, "SLURM_PROCID") != nullptr;
  const bool slurm_step = slurm && lookup(env, "SLURM_STEP_ID") != nullptr;
  const bool mpi = lookup(env, "OMPI_COMM_WORLD_RANK") != nullptr;
  const std::string* tf = lookup(env, "TF_CONFIG");
  if (tf != nullptr && tf->find_first_not_of(" \t\r\n") != std::string::npos) {
    e.source = "TF_CONFIG";
    e.tf = parse_tf_config(*tf);
    if (e.tf.evaluators > 0) {
      e.notes.push_back("TF_CONFIG: ignoring the evaluator job (" + std::to_string(e.tf.evaluators) +
                        " task(s)): pstrain's chief (worker 0) evaluates the test set");
    }
    if (slurm || mpi) e.notes.push_back("TF_CONFIG is set: Slurm's and Open MPI's variables are ignored");
    return e;
  }
  if (mpi) {
    if (slurm) {
      e.notes.push_back("Open MPI's and Slurm's variables are both set: mpirun inside a Slurm allocation; "
                        "Slurm's describe mpirun's daemons, so Open MPI's are used");
    }
    read_open_mpi(env, &e);
  } else if (slurm_step) {
    read_slurm(env, &e);
  } else if (slurm) {
    e.notes.push_back("SLURM_PROCID without SLURM_STEP_ID (a batch script or an salloc shell, not a task of an "
                      "srun step): Slurm's variables are ignored");
  }
  return e;
}

void resolve_cluster(Role binary, const EnvCluster& env, const GivenOptions& given, JobOptions* o) {
  for (const auto& note : env.notes) PSLOG(INFO) << note;
  Resolver(binary, env, given, o).run();
}

std::string describe_placement(const JobOptions& o, const std::string& device) {
  char host[HOST_NAME_MAX + 1] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  const ClusterOrigin& from = o.origin;
  const bool ps = from.role == Role::kPs;
  std::ostringstream os;
  os << "role " << role_name(from.role) << " (" << from.role_from << "), index " << o.index << " of "
     << (ps ? o.num_ps : o.num_workers) << " (" << from.index_from << "), host " << host << ", local rank "
     << o.local_rank << " (" << from.local_rank_from << "), device " << (device.empty() ? "none" : device) << "; ";
  if (o.mode == Mode::kAllreduce) {
    os << o.num_workers << " worker(s), no PS (" << from.counts_from << ")";
    if (o.num_workers > 1) os << "; rendezvous at " << o.coordinator << " (" << from.peers_from << ")";
  } else {
    os << o.num_ps << " PS, " << o.num_workers << " worker(s) (" << from.counts_from << ")";
    if (!ps) {
      os << "; PS at ";
      for (size_t s = 0; s < o.ps_hosts.size(); ++s) os << (s ? "," : "") << o.ps_hosts[s];
      os << " (" << from.peers_from << ")";
    }
  }
  return os.str();
}

bool dispatch_role(Role binary, const JobOptions& o, char** argv) {
  if (o.origin.evaluator) {
    PSLOG(INFO) << "TF_CONFIG: this task is an evaluator; pstrain evaluates the test set on its chief (worker 0), "
                   "so an evaluator has nothing to do: exiting";
    return false;
  }
  const Role role = o.origin.role;
  if (role == binary) return true;
  const std::string self = std::string("pstrain-") + role_name(binary);
  if (const char* previous = std::getenv(kDispatchedFrom)) {
    throw Error(self + " was started by " + previous + " to be a " + role_name(binary) + ", but its options say " +
                role_name(role) + ": not switching binaries twice");
  }
  char exe[PATH_MAX + 1] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, PATH_MAX);
  if (n <= 0) throw Error("--role: cannot find this binary's directory (/proc/self/exe)");
  std::string path(exe, static_cast<size_t>(n));
  path = path.substr(0, path.rfind('/') + 1) + "pstrain-" + role_name(role);
  PSLOG(INFO) << "role " << role_name(role) << " (" << o.origin.role_from << "): running " << path;
  setenv(kDispatchedFrom, self.c_str(), 1);
  argv[0] = path.data();
  execv(path.c_str(), argv);
  throw Error("--role " + std::string(role_name(role)) + ": cannot run " + path + ": " + std::strerror(errno));
}

}  // namespace pstrain
