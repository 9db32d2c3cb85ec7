// A parameter-server shard's loop: it owns the endpoint (docs/threading.md), receives with a
// deadline, decodes and validates every message, and routes it to the shard's parts: the
// workers' membership (ps/membership.h) and the store of parameters (ps/dense_store.h). It sends
// the replies and rejections, answers pulls chunk by chunk as each reaches the version asked
// for (parking the rest), reports stalled barriers, and serves until every worker said DONE.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "ps/checkpoints.h"
#include "ps/dense_store.h"
#include "ps/membership.h"
#include "ps/policy.h"
#include "ps/server_options.h"
#include "ps/sparse/sparse_store.h"
#include "ps/stats_combiner.h"
#include "shared/wire/protocol.h"
#include "shared/net/transport.h"

namespace pstrain {

class ParameterServer {
 public:
  // `endpoint` must outlive the server; the calling thread of serve() owns it.
  ParameterServer(const ServerOptions& options, Endpoint& endpoint);
  ~ParameterServer();
  // Serves until every worker has said DONE. Throws pstrain::Error on a fatal failure.
  void serve();

  uint64_t version() const;                // of the least advanced chunk
  std::vector<float> params() const;       // a copy of the slice
  uint64_t rejected() const { return rejected_; }  // messages answered with an error or dropped

 private:
  struct Parked;
  struct SparseParked;
  // What one worker's parked SPARSE_PULLs hold (check_parking's bounds), kept beside
  // sparse_parked_ so that a pull's check costs no scan of every parked part.
  struct ParkedUse {
    std::vector<uint64_t> request_ids;               // at most kMaxParkedSparsePulls
    std::set<std::pair<uint64_t, uint64_t>> parts;   // (request id, part)
    size_t bytes = 0;
  };

  void handle(Message& msg);
  void on_hello(const Message& msg, const Header& h);
  bool start_job(const Header& h, std::string* error);
  Update update_of(Message& msg, const Header& h) const;
  bool on_init(Message& msg, const Header& h, std::string* error);
  bool on_push(Message& msg, const Header& h, std::string* error);
  bool on_pull(const Message& msg, const Header& h, std::string* error);
  bool on_sparse_pull(const Message& msg, const Header& h, std::string* error);
  bool on_sparse_push(const Message& msg, const Header& h, std::string* error);
  // STATS (shard 0): a worker's batch-norm sums; once every worker's are in, STATS_SUM to each.
  bool on_stats(const Message& msg, const Header& h, int worker, std::string* error);
  // Answers a SPARSE_PULL with the rows as they are now; false, with the reason, for a pull
  // the tables refuse.
  bool send_rows(const SparseParked& p, std::string* error);
  // Why `p` may not wait among the parked SPARSE_PULLs (its worker's are too many), or "".
  std::string check_parking(const SparseParked& p) const;
  void park(SparseParked p);
  void unpark(const SparseParked& p);
  void send_checked_rows(const SparseParked& p);  // one that passed SparseStore::check_rows
  void sparse_advanced();
  void settle_step();  // --backup-workers with tables: applies a step once its workers are known
  void on_done(const Message& msg, const Header& h);
  void acknowledge_done(const std::string& route, uint64_t request_id);
  void chunk_advanced(size_t index);
  void advanced(const Outcome& out);  // chunk_advanced for the part(s) an update advanced
  // --clip-norm with several shards (docs/models.md, "Gradient clipping"): NORM to a PULL of the
  // step after the one waiting for its norm; CLIP from a worker applies that step.
  void send_norm(Parked& p);
  bool on_clip(const Message& msg, const Header& h, std::string* error);
  // Whether part `part` can be sent to a pull for version `want`: the store has it, and in sync a
  // job's tables are at that version too (so a worker's rows and parameters are of one version,
  // and a checkpoint holds both).
  bool ready(size_t part, uint64_t want) const;
  void send_chunk(const std::string& route, uint64_t request_id, size_t part, uint64_t want, uint64_t shm);
  void release_area_name();
  void reject(const std::string& route, uint64_t request_id, const std::string& why);
  void reply(const std::string& route, Header h, Frame* payload);
  void report_stall();
  void tell_waiting();
  void report_tables();  // the tables' counters, every 10 s
  std::string mode_text() const;

  const ServerOptions options_;
  Endpoint& endpoint_;
  ConsistencyPolicy policy_;
  Membership members_;
  std::unique_ptr<DenseStore> store_;  // made at the first HELLO, when the model's size is known
  std::vector<Parked> parked_;
  std::unique_ptr<SparseStore> sparse_;  // made with the store, when the job has embedding tables
  std::vector<SparseParked> sparse_parked_;
  std::map<std::string, ParkedUse> parked_use_;  // by route: what sparse_parked_ holds of each worker
  uint64_t parted_pulls_ = 0, pull_parts_ = 0;  // SPARSE_PULLs that came in several parts, and their parts
  uint64_t rejected_ = 0;
  // Message frame bytes received and handed to the endpoint (headers and payload frames; values
  // in shared memory are not frames), for the PARAMS headers' b_in and b_out.
  uint64_t bytes_in_ = 0, bytes_out_ = 0;
  long rss_start_kib_ = 0;  // resident memory when serve() began (the last line shows it beside the peak)
  // Those and the store's apply time as they were when the shard first sent a chunk of the newest
  // version (in sync: right after applying it), stamped into every PARAMS of that version: the
  // workers get the same figures for a version, whatever order their PARAMS leave in.
  struct Figures {
    bool taken = false;
    uint64_t version = 0, apply_us = 0, bytes_in = 0, bytes_out = 0;
  } figures_;
  Clock::time_point last_stall_report_;
  Clock::time_point last_waiting_;
  Clock::time_point last_tables_report_;  // when the parked pulls were last told what their barrier waits for
  ShardCheckpoints checkpoints_;
  StatsCombiner stats_;
};

}  // namespace pstrain
