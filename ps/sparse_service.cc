#include "ps/sparse_service.h"

#include <algorithm>

#include "shared/util/clock.h"
#include "shared/util/log.h"
#include "shared/wire/sparse_wire.h"

namespace pstrain {

struct SparseService::Parked {  // a SPARSE_PULL (or a part of one) waiting for the tables to reach its version
  std::string route;
  uint64_t request_id;
  uint64_t want;
  std::vector<SparseSection> request;
  uint64_t part, parts;  // echoed in the answer
  size_t bytes;          // the body's, for the bound on what a worker's parked pulls hold
};

namespace {

// How often a shard with embedding tables logs their counters (rows, admissions, evictions, MiB).
constexpr double kTablesEverySeconds = 10;
constexpr long kMaxParkedSparsePulls = 2;  // SPARSE_PULLs of one worker waiting for their version
// What one worker's parked SPARSE_PULLs may hold: two whole bodies' bytes, each part counted with
// its bookkeeping (so that a flood of small parts is bounded too).
constexpr size_t kMaxParkedSparseBytes = 2 * kMaxSparseBodyBytes;
constexpr size_t kParkedPartBytes = 256;

}  // namespace

SparseStoreOptions sparse_store_options(const ServerOptions& o, const JobShape& job) {
  SparseStoreOptions s;
  s.index = o.index;
  s.num_ps = o.num_ps;
  s.num_workers = o.num_workers;
  s.backup_workers = o.backup_workers;
  s.allow_rejoin = o.allow_rejoin;
  s.chunk_kib = o.chunk_kib;
  s.max_shard_mib = o.max_shard_mib;
  s.optimizer = o.optimizer;
  s.table_lr = o.table_lr;
  s.tables = o.tables;
  s.save_params = o.save_params;
  s.total_steps = job.total_steps;
  s.global_batch = job.global_batch;
  return s;
}

SparseService::SparseService(const ServerOptions& options, Mode mode, Replier& replier)
    : options_(options), mode_(mode), replier_(replier) {}

SparseService::~SparseService() = default;

bool SparseService::start(const JobShape& job, uint64_t version, size_t dense_bytes,
                          const std::vector<TableInFile>& resumed_tables, std::string* error) {
  store_ = std::make_unique<SparseStore>(sparse_store_options(options_, job), mode_, version, dense_bytes);
  const bool resumed = version > 0 || !resumed_tables.empty();
  const bool from_saved = !resumed && !options_.init_params.empty();
  if (resumed ? !store_->resume(resumed_tables, error) : from_saved && !store_->start_from(options_.init_params, error)) {
    store_.reset();
    return false;
  }
  PSLOG(INFO) << "ps" << options_.index << ": " << options_.tables.size() << " embedding table(s) of dim "
              << options_.tables[0].dim << ", optimizer " << table_optimizer_name(options_.tables[0].optimizer.kind) << " lr "
              << options_.table_lr;
  if (from_saved) {
    PSLOG(INFO) << "ps" << options_.index << ": tables from " << options_.init_params << "/embeddings"
                << store_->counters_text();
  }
  return true;
}

bool SparseService::pull(const Message& msg, const Header& h, std::string* error) {
  if (store_ == nullptr) return (*error = "SPARSE_PULL, but this job has no embedding tables", false);
  const uint64_t parts = std::max<uint64_t>(h.parts, 1);
  if (parts > kMaxSparseParts || h.part >= parts) {
    return (*error = "SPARSE_PULL part " + std::to_string(h.part) + " of " + std::to_string(h.parts) + ": " +
                     (h.part >= parts ? "no such part" : "more than " + std::to_string(kMaxSparseParts) + " parts"),
            false);
  }
  Parked p{msg.route, h.request_id, h.step, {}, h.part, h.parts, msg.frames[1].size() + kParkedPartBytes};
  *error = store_->check_pull_body(h, msg.frames[1].size());  // before its IDs are copied out
  if (!error->empty()) return false;
  if (!decode_sparse_body(h.op, msg.frames[1].data(), msg.frames[1].size(), &p.request, error)) return false;
  *error = store_->check_pull(h.step);
  if (!error->empty()) return false;
  if (parts > 1 && h.part == 0) {
    ++parted_pulls_;
    pull_parts_ += parts;
  }
  // Checked now, answered now or later: a bad pull is refused at once.
  if (!store_->check_rows(p.request, error)) return false;
  if (store_->ready(h.step)) return (send_rows(p), true);
  *error = check_parking(p);
  if (!error->empty()) return false;
  park(std::move(p));
  return true;
}

// A worker has at most two pulls waiting (its next step's, and an evaluation's; each may be in
// parts, which share its request id): more would let one peer grow the shard's memory with
// parked requests.
std::string SparseService::check_parking(const Parked& p) const {
  const auto use = parked_use_.find(p.route);
  static const ParkedUse kNone;
  const ParkedUse& u = use == parked_use_.end() ? kNone : use->second;
  const std::vector<uint64_t>& pulls = u.request_ids;
  if (u.parts.count({p.request_id, p.part}) != 0) {
    return "SPARSE_PULL " + std::to_string(p.request_id) + ": part " + std::to_string(p.part) + " came already";
  }
  const size_t bytes = u.bytes + p.bytes;
  const bool another = std::find(pulls.begin(), pulls.end(), p.request_id) == pulls.end();
  if (another && static_cast<long>(pulls.size()) >= kMaxParkedSparsePulls) {
    return "SPARSE_PULL: " + std::to_string(pulls.size()) + " of this worker's are waiting already";
  }
  if (bytes > kMaxParkedSparseBytes) {
    return "SPARSE_PULL: this worker's waiting pulls would hold more than " + std::to_string(kMaxParkedSparseBytes) +
           " bytes";
  }
  return "";
}

void SparseService::park(Parked p) {
  ParkedUse& u = parked_use_[p.route];
  if (std::find(u.request_ids.begin(), u.request_ids.end(), p.request_id) == u.request_ids.end()) {
    u.request_ids.push_back(p.request_id);
  }
  u.parts.emplace(p.request_id, p.part);
  u.bytes += p.bytes;
  parked_.push_back(std::move(p));
}

// p left parked_ (answered): its worker's use without it.
void SparseService::unpark(const Parked& p) {
  const auto it = parked_use_.find(p.route);
  if (it == parked_use_.end()) return;
  ParkedUse& u = it->second;
  u.parts.erase({p.request_id, p.part});
  u.bytes -= std::min(u.bytes, p.bytes);
  const auto next = u.parts.lower_bound({p.request_id, 0});  // another part of that pull still parked?
  const bool more = next != u.parts.end() && next->first == p.request_id;
  if (!more) u.request_ids.erase(std::remove(u.request_ids.begin(), u.request_ids.end(), p.request_id), u.request_ids.end());
  if (u.parts.empty()) parked_use_.erase(it);
}

bool SparseService::push(const Message& msg, const Header& h, bool rejoined, SparsePushOutcome* out,
                         std::string* error) {
  if (store_ == nullptr) return (*error = "SPARSE_PUSH, but this job has no embedding tables", false);
  if (h.sender == 0 && h.checkpoint != 0 && h.checkpoint != h.step + 1) {
    return (*error = "SPARSE_PUSH for step " + std::to_string(h.step) + " asks for a checkpoint of version " +
                     std::to_string(h.checkpoint), false);
  }
  std::vector<SparseSection> sections;
  if (!decode_sparse_body(h.op, msg.frames[1].data(), msg.frames[1].size(), &sections, error)) return false;
  const int worker = static_cast<int>(h.sender);
  if (!store_->push(worker, rejoined, h, std::move(sections), &out->applied, error)) return false;
  out->whole = !store_->in_parts(worker);  // a push counts once its last part is here
  return true;
}

void SparseService::send_rows(const Parked& p) {
  std::vector<SparseSection> rows;
  store_->checked_rows(p.request, p.want, &rows);
  Header h;
  h.op = Op::kSparseRows;
  h.request_id = p.request_id;
  h.step = store_->version();
  h.part = p.part;
  h.parts = p.parts;
  std::string body = encode_sparse_body(Op::kSparseRows, rows);
  h.length = body.size() / 4;
  Frame payload(std::move(body));
  replier_.reply(p.route, h, &payload);
}

void SparseService::answer_parked() {
  auto waiting = parked_.begin();
  for (auto it = parked_.begin(); it != parked_.end(); ++it) {
    if (store_->ready(it->want)) {
      send_rows(*it);  // checked when it arrived (pull)
      unpark(*it);
    } else {
      *waiting++ = std::move(*it);
    }
  }
  parked_.erase(waiting, parked_.end());
}

std::vector<bool> SparseService::pushed() const {
  std::vector<bool> out(static_cast<size_t>(options_.num_workers));
  for (int w = 0; w < options_.num_workers; ++w) out[static_cast<size_t>(w)] = store_->pushed(w);
  return out;
}

uint64_t SparseService::next_step_of(int worker, bool rejoined) const {
  return store_ != nullptr ? store_->next_step_of(worker, rejoined) : UINT64_MAX;
}

bool SparseService::barrier(uint64_t* step, Clock::time_point* since, std::vector<bool>* pushed) const {
  return store_ != nullptr && store_->barrier(step, since, pushed);
}

void SparseService::tell_waiting(Header h) {
  for (const Parked& p : parked_) {
    h.request_id = p.request_id;
    replier_.reply(p.route, h, nullptr);
  }
}

void SparseService::report(uint64_t version) {
  if (store_ == nullptr) return;
  const auto now = Clock::now();
  if (now - last_report_ < std::chrono::duration<double>(kTablesEverySeconds)) return;
  if (last_report_ != Clock::time_point{}) {  // not at once: the first line comes after 10 s
    PSLOG(INFO) << "ps" << options_.index << ": version " << version << store_->counters_text();  // "; tables at ..."
  }
  last_report_ = now;
}

std::string SparseService::counters_text() const {
  if (store_ == nullptr) return "";
  return store_->counters_text() + (parted_pulls_ > 0 ? "; sparse pulls in parts: " + std::to_string(parted_pulls_) +
                                                            " (" + std::to_string(pull_parts_) + " parts)"
                                                      : "");
}

void SparseService::finish(bool stopped) const {
  if (store_ != nullptr) store_->save_result(stopped);
}

}  // namespace pstrain
