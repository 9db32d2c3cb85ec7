// bench/comm: what a push+pull round of pstrain costs against the transport's own limit.
//
// For each size B, a raw ZeroMQ round trip of B bytes between two processes (DEALER -> ROUTER
// echo) is measured, then for every (N workers, S shards) a real PS job in separate processes:
// each worker pushes a B-byte gradient and pulls B bytes of parameters back, per round. Each row
// prints both medians and efficiency = raw_time / pstrain_time (1.0 = as fast as the transport).
// For N > 1 workers it also measures N raw clients against one echo server at once (raw_n): the
// bytes that N workers move through one PS, with nothing done to them, and efficiency_n against it.
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "bench/bench_util.h"
#include "ps/options_from_job.h"
#include "ps/server.h"
#include "shared/util/error.h"
#include "shared/util/log.h"
#include "shared/config/options.h"
#include "shared/net/zmq_transport.h"
#include "shared/net/zmq_util.h"
#include "worker/options_from_job.h"
#include "worker/ps_link/channel.h"
#include "worker/ps_link/dense_client.h"

namespace pstrain::bench {
namespace {

struct Config {
  std::vector<size_t> sizes_mib = {1, 16, 64, 256};
  std::vector<int> workers = {1, 2, 4};
  std::vector<int> shards = {1, 2, 4};
  int rounds = 5;
  std::vector<std::string> transports = {"tcp"};
  double link_gbit = 0;  // > 0: every PS shard behind its own emulated link of this rate
  int chunk_kib = JobOptions().chunk_kib;
  bool json = false;
};

// A unique ipc:// name in Linux's abstract namespace (no file to clean up).
std::string ipc_name(const std::string& what) {
  static int counter = 0;
  return "@pstrain-bench-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + what;
}

// --link-gbit: each PS shard in its own network namespace, reached over a veth pair whose two
// ends are rate-limited (tbf), like a server behind its own NIC; the workers stay in this
// process's namespace. Needs root and iproute2. Address of shard s: 10.213.s.2.
class ShardLinks {
 public:
  ShardLinks(int count, double gbit) {
    if (count == 0) return;
    remove_stale();
    std::atexit(remove_all);  // the benchmark also exits through usage_error() and wait_child()
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, on_signal);
    const double bytes_per_s = gbit * 1e9 / 8;
    const std::string rate = std::to_string(static_cast<long>(gbit * 1e6)) + "kbit";
    // The bucket holds 10 ms of traffic (at least 4 MiB): tbf needs more than one timer tick's worth.
    const std::string burst = std::to_string(std::max<long>(4L << 20, static_cast<long>(bytes_per_s / 100)));
    const std::string tbf = " root tbf rate " + rate + " burst " + burst + " latency 200ms";
    for (int s = 0; s < count; ++s) {
      const std::string ns = name(s), veth = name(s), inner = name(s) + "i";
      const std::string net = "10.213." + std::to_string(s);
      shell("ip netns add " + ns);
      names_.push_back(ns);
      shell("ip link add " + veth + " mtu 65535 type veth peer name " + inner + " mtu 65535");
      shell("ip link set " + inner + " netns " + ns);
      shell("ip addr add " + net + ".1/30 dev " + veth + " && ip link set " + veth + " up");
      shell("ip -n " + ns + " addr add " + net + ".2/30 dev " + inner + " && ip -n " + ns + " link set " + inner +
            " up && ip -n " + ns + " link set lo up");
      shell("tc qdisc add dev " + veth + tbf);
      shell("tc -n " + ns + " qdisc add dev " + inner + tbf);
    }
  }
  ~ShardLinks() { remove_all(); }
  ShardLinks(const ShardLinks&) = delete;
  ShardLinks& operator=(const ShardLinks&) = delete;

  static std::string host(int s) { return "10.213." + std::to_string(s) + ".2"; }
  // In a child: moves the calling process into shard s's namespace (before any socket exists).
  void enter(int s) const {
    const std::string path = "/var/run/netns/" + names_.at(static_cast<size_t>(s));
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) usage_error("cannot enter network namespace " + path);
    close(fd);
  }
  bool active() const { return !names_.empty(); }

 private:
  static std::string name(int s) { return "pstb" + std::to_string(getpid()) + "s" + std::to_string(s); }
  static void shell(const std::string& command, bool check = true) {
    const int rc = std::system((command + (check ? " >/dev/null" : " >/dev/null 2>&1")).c_str());
    if (check && rc != 0) {
      usage_error("'" + command + "' failed: --link-gbit needs root, iproute2 (ip, tc) and the tbf qdisc");
    }
  }
  // Deletes every namespace made so far, with its veth pair; only ever in the parent process.
  static void remove_all() {
    if (getpid() != owner_) return;
    for (const auto& ns : names_) shell("ip netns del " + ns, /*check=*/false);
    names_.clear();
  }
  // Ctrl-C or kill: delete the namespaces, then die of the signal as the caller expects. (system()
  // is not async-signal-safe; the process is ending and the main thread only waits for children.)
  static void on_signal(int sig) {
    remove_all();
    std::signal(sig, SIG_DFL);
    raise(sig);
  }
  // Namespaces left by a run that was killed with SIGKILL: pstb<pid>s<s> whose pid is gone.
  static void remove_stale() {
    DIR* dir = opendir("/var/run/netns");
    if (dir == nullptr) return;
    std::vector<std::string> stale;
    while (const dirent* entry = readdir(dir)) {
      long pid = 0;
      int shard = 0;
      char tail = 0;
      if (std::sscanf(entry->d_name, "pstb%lds%d%c", &pid, &shard, &tail) == 2 && pid > 0 &&
          kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
        stale.emplace_back(entry->d_name);
      }
    }
    closedir(dir);
    for (const auto& ns : stale) {
      std::fprintf(stderr, "# removing network namespace %s left by an earlier run\n", ns.c_str());
      shell("ip netns del " + ns, /*check=*/false);
    }
  }
  static inline std::vector<std::string> names_;
  static inline const pid_t owner_ = getpid();
};

// Raw transport: median seconds of a B-byte round trip (zero-copy send, echo by the server), with
// `clients` processes doing it at once against the one server (each round: the slowest client).
// With N clients this is the floor of an N-worker push+pull: the same bytes through one process,
// with no work done on them.
double raw_round_trip(const std::string& transport, size_t bytes, int rounds, const ShardLinks& links, int clients = 1) {
  Pipe address_pipe;
  const pid_t server = fork_child([&] {
    if (links.active()) links.enter(0);
    zmq::context_t context(1);
    zmq::socket_t socket(context, zmq::socket_type::router);
    socket.set(zmq::sockopt::linger, 10000);  // the last echo must leave before this child exits
    socket.bind(links.active()         ? "tcp://" + ShardLinks::host(0) + ":*"
                : transport == "ipc" || transport == "shm" ? "ipc://" + ipc_name("raw")  // curve: plain tcp is the baseline
                                     : "tcp://127.0.0.1:*");
    address_pipe.write_string(socket.get(zmq::sockopt::last_endpoint));
    for (int r = 0; r < (rounds + 1) * clients; ++r) {
      zmq::message_t id, payload;
      (void)socket.recv(id);
      (void)socket.recv(payload);
      socket.send(id, zmq::send_flags::sndmore);
      socket.send(payload, zmq::send_flags::none);
    }
  });
  const std::string endpoint = address_pipe.read_string();
  std::vector<Pipe> results(static_cast<size_t>(clients)), ready(static_cast<size_t>(clients)),
      go(static_cast<size_t>(clients));
  std::vector<pid_t> children;
  for (int k = 0; k < clients; ++k) {
    children.push_back(fork_child([&] {
      zmq::context_t context(1);
      zmq::socket_t socket(context, zmq::socket_type::dealer);
      socket.set(zmq::sockopt::linger, 0);
      socket.connect(endpoint);
      std::vector<char> buffer(bytes, 1);
      std::vector<double> times;
      for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up the connection
        if (r == 1) {  // the timed rounds start together in every client
          ready[static_cast<size_t>(k)].write_string("ready");
          (void)go[static_cast<size_t>(k)].read_string();
        }
        const double start = now_seconds();
        zmq::message_t out(buffer.data(), buffer.size(), [](void*, void*) {}, nullptr);
        socket.send(out, zmq::send_flags::none);
        zmq::message_t in;
        (void)socket.recv(in);
        if (r > 0) times.push_back(now_seconds() - start);
      }
      results[static_cast<size_t>(k)].write_doubles(times);
    }));
  }
  for (auto& pipe : ready) (void)pipe.read_string();
  for (auto& pipe : go) pipe.write_string("go");
  std::vector<double> slowest(static_cast<size_t>(rounds), 0.0);
  for (auto& pipe : results) {
    const std::vector<double> t = pipe.read_doubles();
    for (size_t r = 0; r < t.size() && r < slowest.size(); ++r) slowest[r] = std::max(slowest[r], t[r]);
  }
  for (pid_t pid : children) wait_child(pid);
  wait_child(server);
  return median(slowest);
}

// CPU time (user + system, all threads) of the children waited for so far.
double children_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_CHILDREN, &usage);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct PstrainResult {
  double seconds = 0;    // median over rounds of the slowest worker's push+pull time
  double cpu_cores = 0;  // CPU time of the job's processes / its wall time: near the core count = CPU-bound
};

// pstrain: a real PS job of N workers and S shards, each a process of its own.
PstrainResult pstrain_round(const std::string& transport, size_t bytes, int num_workers, int num_ps, int rounds,
                     int chunk_kib, const ShardLinks& links) {
  const uint64_t total = bytes / sizeof(float);
  // transport=curve: TCP with the job's CURVE key on every socket and a ZAP handler per PS.
  Security security;
  if (transport == "curve") {
    char pub[41], sec[41];
    if (zmq_curve_keypair(pub, sec) != 0) throw pstrain::Error("libzmq has no CURVE");
    security = Security{true, pub, sec};
  }
  JobOptions base;
  base.num_workers = num_workers;
  base.num_ps = num_ps;
  base.optimizer.kind = OptimizerKind::kSgd;
  base.optimizer.lr = 1e-6;
  base.timeout_s = 120;
  base.chunk_kib = chunk_kib;
  base.shared_memory = transport == "shm" && !links.active();
  const double cpu_before = children_cpu_seconds();
  const double wall_before = now_seconds();
  std::vector<pid_t> children;
  std::vector<std::string> hosts;
  for (int s = 0; s < num_ps; ++s) {
    Pipe address_pipe;
    const std::string ipc = (transport == "ipc" || transport == "shm") && !links.active() ? ipc_name("ps" + std::to_string(s)) : "";
    children.push_back(fork_child([&] {
      JobOptions o = base;
      o.index = s;
      if (links.active()) links.enter(s);
      zmq::context_t context(1);
      const auto zap = make_zap_handler(context, security);
      auto endpoint = make_zmq_server(context, links.active() ? ShardLinks::host(s) : "127.0.0.1", 0, ipc, security,
                                      o.shared_memory);
      address_pipe.write_string(ipc.empty() ? endpoint->address() : "ipc://" + ipc);
      ParameterServer server(server_options(o), *endpoint);
      server.serve();
    }));
    hosts.push_back(address_pipe.read_string());
  }
  std::vector<Pipe> results(static_cast<size_t>(num_workers));
  for (int i = 0; i < num_workers; ++i) {
    children.push_back(fork_child([&] {
      JobOptions o = base;
      o.index = i;
      zmq::context_t context(1);
      auto endpoint = make_zmq_client(context, hosts, security, o.shared_memory);
      PsChannel channel(ps_client_options(o), total, *endpoint);
      DenseClient client(channel, channel.hello(static_cast<uint64_t>(rounds + 1)));
      std::vector<float> params(total, 0.5f), grad(total, 1e-3f);
      if (i == 0) client.init(params.data());
      client.pull(0, params.data());
      std::vector<double> times;
      for (int r = 0; r < rounds + 1; ++r) {
        const double start = now_seconds();
        client.request_params(static_cast<uint64_t>(r) + 1);
        client.push_ready(static_cast<uint64_t>(r), grad.data(), 0, PushInfo{1, 0.0, 0, {}});
        client.receive_params(params.data(), nullptr, nullptr);
        if (r > 0) times.push_back(now_seconds() - start);
      }
      channel.done();
      results[static_cast<size_t>(i)].write_doubles(times);
    }));
  }
  std::vector<double> slowest(static_cast<size_t>(rounds), 0.0);
  for (auto& pipe : results) {
    const std::vector<double> t = pipe.read_doubles();
    for (size_t r = 0; r < t.size() && r < slowest.size(); ++r) slowest[r] = std::max(slowest[r], t[r]);
  }
  for (pid_t pid : children) wait_child(pid);
  PstrainResult result;
  result.seconds = median(slowest);
  result.cpu_cores = (children_cpu_seconds() - cpu_before) / (now_seconds() - wall_before);
  return result;
}

int run(const Config& c) {
  const ShardLinks links(c.link_gbit > 0 ? *std::max_element(c.shards.begin(), c.shards.end()) : 0, c.link_gbit);
  const std::vector<std::string> transports = links.active() ? std::vector<std::string>{"link"} : c.transports;
  std::printf(c.json ? "[\n" : "# bench/comm: push+pull of B bytes per worker vs a raw ZeroMQ round trip of B bytes (medians of %d rounds)\n"
                               "# raw_n_ms: N raw clients doing that round trip at once against one echo server (the\n"
                               "# slowest of each round): the same bytes as N workers move, with no work on them;\n"
                               "# efficiency = raw_ms / pstrain_ms, efficiency_n = raw_n_ms / pstrain_ms\n", c.rounds);
  if (!c.json) {
    std::printf("# cpu_cores: CPU time of the job's processes over its wall time (setup included); this machine has %ld\n"
                "# cores online. A job near that is CPU-bound (on loopback mostly the kernel's copies): more shards help\n"
                "# where links limit (--link-gbit), not where every core is already busy copying\n",
                sysconf(_SC_NPROCESSORS_ONLN));
  }
  if (links.active() && !c.json) {
    std::printf("# transport=link: every PS shard behind its own emulated %.3g Gbit/s link (tcp over a rate-limited veth pair)\n",
                c.link_gbit);
  }
  bool first = true;
  std::map<std::tuple<size_t, int, int>, double> tcp_seconds;  // for curve_vs_tcp
  for (size_t mib : c.sizes_mib) {
   for (const std::string& transport : transports) {
    const size_t bytes = mib << 20;
    const double raw = raw_round_trip(transport, bytes, c.rounds, links);
    for (int n : c.workers) {
      // The same bytes moved as N workers move them, through one raw echo server.
      const double raw_n = n == 1 ? raw : raw_round_trip(transport, bytes, c.rounds, links, n);
      for (int s : c.shards) {
        const PstrainResult result = pstrain_round(transport, bytes, n, s, c.rounds, c.chunk_kib, links);
        const double t = result.seconds;
        const double efficiency = raw / t;
        if (transport == "tcp") tcp_seconds[{bytes, n, s}] = t;
        const auto plain = tcp_seconds.find({bytes, n, s});
        const std::string vs_tcp = transport == "curve" && plain != tcp_seconds.end()
                                       ? " curve_vs_tcp=" + std::to_string(t / plain->second).substr(0, 5)
                                       : "";
        const double aggregate_gbps = 2.0 * n * bytes / t / 1e9;
        if (c.json) {
          std::printf("%s  {\"bytes\": %zu, \"transport\": \"%s\", \"workers\": %d, \"shards\": %d, \"raw_ms\": %.3f, "
                      "\"raw_n_ms\": %.3f, \"pstrain_ms\": %.3f, \"efficiency\": %.3f, \"efficiency_n\": %.3f, "
                      "\"aggregate_GBps\": %.3f, \"cpu_cores\": %.2f}",
                      first ? "" : ",\n", bytes, transport.c_str(), n, s, raw * 1e3, raw_n * 1e3, t * 1e3, efficiency,
                      raw_n / t, aggregate_gbps, result.cpu_cores);
        } else {
          std::printf("size=%zuMiB transport=%s workers=%d shards=%d raw_ms=%.3f raw_n_ms=%.3f pstrain_ms=%.3f "
                      "efficiency=%.3f efficiency_n=%.3f aggregate_GBps=%.3f cpu_cores=%.2f%s\n",
                      mib, transport.c_str(), n, s, raw * 1e3, raw_n * 1e3, t * 1e3, efficiency, raw_n / t,
                      aggregate_gbps, result.cpu_cores, vs_tcp.c_str());
        }
        std::fflush(stdout);
        first = false;
      }
    }
   }
  }
  if (c.json) std::printf("\n]\n");
  return 0;
}

}  // namespace
}  // namespace pstrain::bench

int main(int argc, char** argv) {
  pstrain::bench::Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) pstrain::bench::usage_error("missing value after " + arg);
      return argv[++i];
    };
    if (arg == "--json") c.json = true;
    else if (arg == "--rounds") c.rounds = pstrain::bench::parse_positive(value(), arg);
    else if (arg == "--chunk-kib") c.chunk_kib = pstrain::bench::parse_positive(value(), arg);
    else if (arg == "--sizes") c.sizes_mib = pstrain::bench::parse_list<size_t>(value(), arg);
    else if (arg == "--workers") c.workers = pstrain::bench::parse_list<int>(value(), arg);
    else if (arg == "--shards") c.shards = pstrain::bench::parse_list<int>(value(), arg);
    else if (arg == "--link-gbit") {
      try {
        c.link_gbit = std::stod(value());
      } catch (const std::exception&) {
        c.link_gbit = -1;
      }
      if (!(c.link_gbit >= 0.001 && c.link_gbit <= 1000)) {
        pstrain::bench::usage_error("--link-gbit needs a rate in Gbit/s from 0.001 to 1000");
      }
    } else if (arg == "--transport") {
      c.transports.clear();
      std::stringstream list(value());
      for (std::string t; std::getline(list, t, ',');) {
        if (t != "tcp" && t != "ipc" && t != "shm" && t != "curve") {
          pstrain::bench::usage_error("--transport: '" + t + "' is not tcp, ipc, shm or curve");
        }
        c.transports.push_back(t);
      }
      if (c.transports.empty()) pstrain::bench::usage_error("--transport needs tcp, ipc, shm and/or curve");
    }
    else if (arg == "-h" || arg == "--help") {
      std::printf("usage: comm [--sizes MiB,...] [--transport tcp,ipc,shm] [--workers N,...] [--shards S,...] [--rounds R] [--chunk-kib K] [--link-gbit G] [--json]\n"
                  "  defaults: --sizes 1,16,64,256 --transport tcp --workers 1,2,4 --shards 1,2,4 --rounds 5 --chunk-kib %d\n"
                  "  --transport: tcp (loopback), ipc (Unix-domain sockets; the raw baseline uses the same transport),\n"
                  "    shm (payloads through shared memory, headers over the local channel, as same-host jobs run by\n"
                  "    default; baseline: raw ipc; tcp and ipc rows run with --shared-memory off) and/or\n"
                  "    curve (tcp with CURVE encryption; baseline: raw plain tcp; with tcp listed first, each curve row\n"
                  "    also prints curve_vs_tcp = pstrain time over CURVE / over plain tcp, both from this run)\n"
                  "  --link-gbit G: instead, every PS shard in its own network namespace behind an emulated G Gbit/s\n"
                  "    link (veth + tbf; root and iproute2 needed), as on a cluster where each server has its own NIC;\n"
                  "    the raw baseline crosses one such link\n"
                  "  PSTRAIN_LOG_LEVEL=info shows the servers' and workers' log lines (default: warnings only)\n",
                  pstrain::JobOptions().chunk_kib);
      return 0;
    } else pstrain::bench::usage_error("unknown flag " + arg);
  }
  pstrain::keep_message_memory();  // as pstrain-ps and pstrain-worker do; the raw baseline too
  // The servers' and clients' INFO lines would bury the rows: warnings and errors only, unless
  // PSTRAIN_LOG_LEVEL asks for more.
  if (std::getenv("PSTRAIN_LOG_LEVEL") == nullptr) pstrain::set_log_level(pstrain::LogLevel::WARN);
  return pstrain::bench::run(c);
}
