// The parameter server of one shard: holds its slice of the flat parameter vector and the
// optimizer state for it, validates every message, and serves workers until all said DONE.
//
// The slice is cut into chunks of --chunk-kib; every message carries one chunk, and every chunk
// has its own barrier and version. A chunk is applied as soon as all workers pushed it, and sent
// at once to the workers whose PULL waits for it, so receiving, applying and sending overlap.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ps/membership.h"
#include "ps/policy.h"
#include "shared/checkpoint_store.h"
#include "shared/layout.h"
#include "shared/optimizer.h"
#include "shared/options.h"
#include "shared/protocol.h"
#include "shared/shared_memory.h"
#include "shared/transport.h"

namespace pstrain {

class ParameterServer {
 public:
  // `endpoint` must outlive the server; the calling thread of serve() owns it.
  ParameterServer(const JobOptions& options, Endpoint& endpoint);
  ~ParameterServer();
  // Serves until every worker has said DONE. Throws pstrain::Error on a fatal failure.
  void serve();

  uint64_t version() const;                // of the least advanced chunk
  std::vector<float> params() const;       // a copy of the slice
  uint64_t rejected() const { return rejected_; }  // messages answered with an error or dropped

 private:
  struct Source;
  struct Pending;
  struct Chunk;
  struct Parked;

  void handle(Message& msg);
  void on_hello(const Message& msg, const Header& h);
  bool start_job(const Header& h, std::string* error);
  bool on_init(const Message& msg, const Header& h, std::string* error);
  bool on_push(Message& msg, const Header& h, std::string* error);
  bool on_pull(const Message& msg, const Header& h, std::string* error);
  void on_done(const Message& msg, const Header& h);
  uint64_t next_step_of(int worker) const;
  bool is_repeat(const Chunk& c, int worker, uint64_t step) const;
  Chunk* find_chunk(const Header& h, std::string* error);
  void apply(Chunk& chunk, Pending& step);
  void apply_sources(Chunk& chunk, const Pending& step, float scale, double lr);
  void release_segment(int worker);
  static bool has_pushed(const Chunk& chunk, int worker);  // the chunk's oldest pending step
  uint64_t lead(int worker, uint64_t step);
  std::string mode_text() const;
  std::string counters_text() const;
  void chunk_advanced(size_t index);
  void send_chunk(const std::string& route, uint64_t request_id, const Chunk& chunk, uint64_t want, uint64_t shm);
  void create_area();
  void release_area_name();
  void reject(const std::string& route, uint64_t request_id, const std::string& why);
  void reply(const std::string& route, Header h, zmq::message_t* payload);
  void report_stall();
  bool resume(std::string* error);
  void write_checkpoint();

  const JobOptions options_;
  Endpoint& endpoint_;
  ConsistencyPolicy policy_;
  Membership members_;
  std::unique_ptr<Optimizer> optimizer_;

  Slice slice_;
  size_t chunk_len_ = 0;      // elements per chunk (the last one may be shorter)
  std::vector<Chunk> chunks_;

  // Plain sync with a worker on this host: the shard's values live in this segment, which
  // same-host workers map read-only and compute from (WELCOME shm 2, docs/wire_protocol.md).
  SharedMemory area_;
  std::vector<Header> unreported_;  // async, ssp: metrics applied since each worker's last PARAMS
  std::vector<uint64_t> clock_of_;  // ssp: steps each worker pushed (to this shard's first chunk)
  uint64_t lead_max_ = 0;           // ssp: the largest lead over the slowest worker seen
  uint64_t stale_sum_ = 0, stale_count_ = 0, stale_max_ = 0;  // async, first chunk
  uint64_t dropped_ = 0;            // backup workers: late pushes dropped (first chunk)
  std::vector<Parked> parked_;
  uint64_t rejected_ = 0;
  double apply_s_ = 0;     // time spent applying updates (the workers wait for it in sync)
  uint64_t applies_ = 0;   // chunk updates applied
  Clock::time_point last_stall_report_;

  CheckpointStore checkpointer_;
  uint64_t checkpoint_at_ = 0;  // the version the chief asked to checkpoint (0 = none pending)
  uint64_t stop_at_ = 0;        // the version after which the job stops (0 = none)
  uint64_t written_ = 0, write_us_ = 0;  // the last checkpointed version and its write time
  // Sync and ssp with staleness 0 without backup workers (every worker in every step): pushes
  // are kept, not summed on arrival, and apply_sources sums them in worker order (see
  // Pending::sources), so the result does not depend on which worker was faster.
  const bool ordered_sums_;
  // Plain sync without replacements: the values live in area_ (create_area).
  const bool shared_area_;
};

}  // namespace pstrain
