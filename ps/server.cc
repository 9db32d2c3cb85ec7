#include "ps/server.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>

#include "shared/util/file_util.h"
#include "shared/util/log.h"
#include "shared/wire/sparse_wire.h"

namespace pstrain {

struct ParameterServer::Parked {  // a PULL waiting for chunks to reach its version
  std::string route;
  uint64_t request_id;
  uint64_t want;
  std::vector<bool> sent;
  size_t left;
  bool norm_sent;  // --clip-norm: this PULL was sent the shard's NORM of the step it waits for
  uint64_t shm;  // 1: the parameters go into the worker's segment; 2: it reads the area (PULL's shm)
};

struct ParameterServer::SparseParked {  // a SPARSE_PULL (or a part of one) waiting for the tables to reach its version
  std::string route;
  uint64_t request_id;
  uint64_t want;
  std::vector<SparseSection> request;
  uint64_t part, parts;  // echoed in the answer
  size_t bytes;          // the body's, for the bound on what a worker's parked pulls hold
};

namespace {

constexpr double kCloseSeconds = 5;
// How often workers waiting at a barrier are told what it waits for (WAITING): a worker whose PS
// is reachable keeps waiting for a peer that is not, and only the worker cut off times out.
constexpr double kWaitingEverySeconds = 1;
// How often a shard with embedding tables logs their counters (rows, admissions, evictions, MiB).
constexpr double kTablesEverySeconds = 10;
constexpr long kMaxParkedSparsePulls = 2;  // SPARSE_PULLs of one worker waiting for their version
// What one worker's parked SPARSE_PULLs may hold: two whole bodies' bytes, each part counted with
// its bookkeeping (so that a flood of small parts is bounded too).
constexpr size_t kMaxParkedSparseBytes = 2 * kMaxSparseBodyBytes;
constexpr size_t kParkedPartBytes = 256;

std::string printable(const std::string& route) {
  std::ostringstream os;
  os << "peer 0x";
  const char* hex = "0123456789abcdef";
  for (unsigned char c : route) os << hex[c >> 4] << hex[c & 15];
  return os.str();
}

// ZeroMQ may place a small frame anywhere in its receive buffer; the PS reads (and accumulates
// into) payloads as floats, so a misaligned one is moved to a fresh, aligned allocation. Large
// frames get their own allocation from ZeroMQ and are never copied here.
void align_payload(Frame* frame) {
  if (reinterpret_cast<uintptr_t>(frame->data()) % alignof(float) == 0) return;
  *frame = Frame(frame->data(), frame->size());
}

}  // namespace

ParameterServer::ParameterServer(const ServerOptions& options, Endpoint& endpoint)
    : options_(options),
      endpoint_(endpoint),
      policy_(options),
      members_(options_, policy_),
      checkpoints_(options_),
      stats_(options_.num_workers) {}

ParameterServer::~ParameterServer() = default;

uint64_t ParameterServer::version() const { return store_ != nullptr ? store_->version() : 0; }

std::vector<float> ParameterServer::params() const {
  return store_ != nullptr ? store_->values() : std::vector<float>();
}

void ParameterServer::serve() {
  rss_start_kib_ = rss_kib();  // before any row: the tables' growth is measured from here
  PSLOG(INFO) << "ps" << options_.index << ": serving at " << endpoint_.address()
              << (options_.ipc.empty() ? "" : " and ipc://" + options_.ipc) << ", mode "
              << mode_text() << ", " << options_.num_workers << " worker(s), optimizer "
              << options_.optimizer.kind << " lr " << options_.optimizer.lr;
  last_stall_report_ = Clock::now();
  Message msg;
  while (!members_.all_done()) {
    const auto tick = deadline_after(std::min(1.0, options_.stall_report_s));
    if (endpoint_.recv(&msg, tick)) handle(msg);
    report_stall();
    tell_waiting();
    report_tables();
  }
  if (sparse_ != nullptr) sparse_->save_result(members_.stopped());
  PSLOG(INFO) << "ps" << options_.index << ": all " << options_.num_workers
              << " workers done at version " << version() << (store_ != nullptr ? store_->counters_text() : "")
              << (sparse_ != nullptr ? sparse_->counters_text() : "")
              << (parted_pulls_ > 0 ? "; sparse pulls in parts: " + std::to_string(parted_pulls_) + " (" +
                                          std::to_string(pull_parts_) + " parts)"
                                    : "")
              << "; socket_bytes_in=" << bytes_in_ << " socket_bytes_out=" << bytes_out_
              << "; peak_rss_kib=" << peak_rss_kib() << " rss_start_kib=" << rss_start_kib_ << " " << cpu_usage_text()
              << "; exiting";
  endpoint_.close(deadline_after(kCloseSeconds));  // lets the last DONE acknowledgement leave
}

void ParameterServer::handle(Message& msg) {
  for (const Frame& frame : msg.frames) bytes_in_ += frame.size();
  Header h;
  std::string error;
  if (msg.frames.empty() ||
      !decode_header(msg.frames[0].data(), msg.frames[0].size(), &h, &error)) {
    return reject(msg.route, 0, error.empty() ? "empty message" : error);
  }
  const size_t payload = msg.frames.size() > 1 ? msg.frames[1].size() : 0;
  if (!check_frames(h, msg.frames.size(), payload, &error)) return reject(msg.route, h.request_id, error);
  if (payload > 0) align_payload(&msg.frames[1]);
  if (h.role != SenderRole::kWorker) return reject(msg.route, h.request_id, "only workers talk to a PS");
  if (h.op == Op::kHello) return on_hello(msg, h);

  const int worker = members_.worker_of(msg.route);
  if (worker < 0) {
    return reject(msg.route, h.request_id, std::string(op_name(h.op)) + " from a peer that never said HELLO");
  }
  if (worker != static_cast<int>(h.sender)) {
    return reject(msg.route, h.request_id, "sender " + std::to_string(h.sender) +
                                               " does not match registered worker " + std::to_string(worker));
  }
  members_.received(worker, h.op);
  if (members_.heard_from(worker)) release_area_name();
  bool ok = true;
  switch (h.op) {
    case Op::kInit: ok = on_init(msg, h, &error); break;
    case Op::kPush: ok = on_push(msg, h, &error); break;
    case Op::kPull: ok = on_pull(msg, h, &error); break;
    case Op::kSparsePull: ok = on_sparse_pull(msg, h, &error); break;
    case Op::kSparsePush: ok = on_sparse_push(msg, h, &error); break;
    case Op::kClip: ok = on_clip(msg, h, &error); break;
    case Op::kStats: ok = on_stats(msg, h, worker, &error); break;
    case Op::kDone: on_done(msg, h); break;
    default: ok = false; error = std::string(op_name(h.op)) + " is not a request"; break;
  }
  if (!ok) reject(msg.route, h.request_id, error);
  std::string done_route;  // a DONE that waited for this message
  uint64_t done_request = 0;
  if (h.op != Op::kDone && members_.settle_done(worker, &done_route, &done_request)) {
    acknowledge_done(done_route, done_request);
  }
}

void ParameterServer::on_hello(const Message& msg, const Header& h) {
  std::string why = members_.check_hello(msg.route, h);
  if (why.empty() && !members_.job_known()) start_job(h, &why);
  if (!why.empty()) return reject(msg.route, h.request_id, why);
  const int worker = static_cast<int>(h.sender);
  const bool replacement = members_.admit(msg.route, worker);
  members_.received(worker, h.op);
  if (replacement) {
    PSLOG(WARN) << "ps" << options_.index << ": worker " << worker << " registered again from a new peer: "
                << "a replacement; it redoes step "
                << std::min(store_->next_step_of(worker, members_.rejoined(worker)),
                            sparse_ != nullptr ? sparse_->next_step_of(worker, true) : UINT64_MAX);
  }
  if (members_.has_segment(worker)) store_->release_segment(worker);
  if (members_.map_segment(worker, h, store_->slice().length)) store_->share_values();
  Header welcome;
  // 2: and the values live in the area named in `message`, which this PS writes only in the
  // apply of a step every worker pushed (the last push completes it, or with --clip-norm on
  // several shards the first CLIP; plain sync): the worker may compute from it.
  welcome.shm = !members_.has_segment(worker) ? 0 : store_->area().mapped() ? 2 : 1;
  if (welcome.shm == 2) welcome.message = store_->area().name();
  members_.offered_area(worker, welcome.shm == 2);
  release_area_name();
  welcome.op = Op::kWelcome;
  welcome.request_id = h.request_id;
  welcome.step = store_->next_step_of(worker, members_.rejoined(worker));
  // A replacement whose predecessor's rows of a step never arrived redoes that step (its dense
  // push, applied already, is dropped as a repeat).
  if (sparse_ != nullptr) welcome.step = std::min(welcome.step, sparse_->next_step_of(worker, members_.rejoined(worker)));
  welcome.offset = store_->slice().offset;
  welcome.length = store_->slice().length;
  welcome.total = members_.job().total;
  welcome.chunk = store_->chunk_length();
  reply(msg.route, welcome, nullptr);
}

// The first HELLO that passed its checks: the model's size is known, the slice is set up (and
// with --resume loaded from the newest checkpoint). False, with the reason, when it cannot be.
bool ParameterServer::start_job(const Header& h, std::string* error) {
  members_.learn_job(h);
  store_ = std::make_unique<DenseStore>(options_, policy_, members_.job());
  if (options_.checkpoint.resume && !checkpoints_.resume(*store_, error)) {
    members_.forget_job();  // not set up: every HELLO gets the same answer
    store_.reset();
    PSLOG(ERROR) << "ps" << options_.index << ": " << *error;
    return false;
  }
  PSLOG(INFO) << "ps" << options_.index << ": " << store_->shape_text();
  if (!options_.tables.empty()) {
    // The dense slice's state as Membership::shard_too_big counts it: values, sums, two slots.
    const size_t dense_bytes = store_->slice().length * 4 * sizeof(float);
    sparse_ = std::make_unique<SparseStore>(options_, policy_.mode(), members_.job(), store_->version(), dense_bytes);
    const std::vector<TableInFile> tables = store_->take_resumed_tables();
    // A resumed job's tables are its checkpoint's; a new one's start empty, or as --init-params'.
    const bool resumed = store_->version() > 0 || !tables.empty();
    const bool from_saved = !resumed && !options_.init_params.empty();
    if (resumed ? !sparse_->resume(tables, error) : from_saved && !sparse_->start_from(options_.init_params, error)) {
      members_.forget_job();
      sparse_.reset();
      store_.reset();
      PSLOG(ERROR) << "ps" << options_.index << ": " << *error;
      return false;
    }
    PSLOG(INFO) << "ps" << options_.index << ": " << options_.tables.size() << " embedding table(s) of dim "
                << options_.tables[0].dim << ", optimizer " << options_.tables[0].optimizer.kind << " lr "
                << options_.table_lr;
    if (from_saved) {
      PSLOG(INFO) << "ps" << options_.index << ": tables from " << options_.init_params << "/embeddings"
                  << sparse_->counters_text();
    }
  }
  return true;
}

// An INIT or PUSH of a registered worker, for the store.
Update ParameterServer::update_of(Message& msg, const Header& h) const {
  const int worker = static_cast<int>(h.sender);
  return Update{h, worker, members_.rejoined(worker), msg.frames.size() > 1 ? &msg.frames[1] : nullptr,
                members_.gradient_in_segment(worker)};
}

bool ParameterServer::on_init(Message& msg, const Header& h, std::string* error) {
  Outcome out;
  if (!store_->init(update_of(msg, h), &out, error)) return false;
  if (out.advanced) chunk_advanced(out.part);
  return true;
}

bool ParameterServer::on_push(Message& msg, const Header& h, std::string* error) {
  Outcome out;
  if (!store_->push(update_of(msg, h), &out, error)) return false;
  if (out.changed && h.sender == 0) checkpoints_.mark(h);
  advanced(out);
  settle_step();
  if (out.norm_ready) {
    for (Parked& p : parked_) send_norm(p);
  }
  return true;
}

void ParameterServer::advanced(const Outcome& out) {
  if (out.every_part) {
    for (size_t i = 0; i < store_->parts(); ++i) chunk_advanced(i);
  } else if (out.advanced) {
    chunk_advanced(out.part);
  }
}

// --clip-norm with several shards: a PULL of the version after the step that waits for its norm
// gets this shard's part of the squares, once; the worker sends back the whole sum (CLIP).
void ParameterServer::send_norm(Parked& p) {
  uint64_t step = 0;
  ExactSquares part;
  if (p.norm_sent || !store_->awaiting_clip(&step, &part) || p.want != step + 1) return;
  Header h;
  h.op = Op::kNorm;
  h.request_id = p.request_id;
  h.step = step;
  h.length = kNormWords;
  Frame payload(part.limbs().data(), sizeof(uint64_t) * ExactSquares::kLimbs);
  reply(p.route, h, &payload);
  p.norm_sent = true;
}

bool ParameterServer::on_clip(const Message& msg, const Header& h, std::string* error) {
  if (store_ == nullptr) return (*error = "CLIP before HELLO", false);
  if (h.length != kNormWords) {
    return (*error = "CLIP carries " + std::to_string(h.length) + " words, not " + std::to_string(kNormWords), false);
  }
  Outcome out;
  if (!store_->clip(h.step, ExactSquares::from_bytes(msg.frames[1].data()), &out, error)) return false;
  advanced(out);
  return true;
}

// The area's name goes once every worker has registered and each that was offered the area has
// sent a message since (so it has mapped it, or given up on it).
void ParameterServer::release_area_name() {
  if (members_.area_settled()) store_->release_area_name();
}

bool ParameterServer::on_pull(const Message& msg, const Header& h, std::string* error) {
  if (store_ == nullptr) return (*error = "pull before HELLO", false);
  *error = store_->check_pull(h.step);
  if (!error->empty()) return false;
  if (h.shm != 0 && !members_.has_segment(static_cast<int>(h.sender))) {
    return (*error = "pull into shared memory, but this worker's segment is not mapped here", false);
  }
  if (h.shm == 2 && !store_->area().mapped()) return (*error = "pull from the parameter area, but this PS has none", false);
  const size_t parts = store_->parts();
  Parked p{msg.route, h.request_id, h.step, std::vector<bool>(parts, false), parts, false, h.shm};
  for (size_t i = 0; i < parts; ++i) {
    if (ready(i, h.step)) {
      send_chunk(msg.route, h.request_id, i, h.step, p.shm);
      p.sent[i] = true;
      --p.left;
    }
  }
  if (p.left > 0) {
    send_norm(p);
    parked_.push_back(std::move(p));
  }
  return true;
}

bool ParameterServer::on_sparse_pull(const Message& msg, const Header& h, std::string* error) {
  if (sparse_ == nullptr) return (*error = "SPARSE_PULL, but this job has no embedding tables", false);
  const uint64_t parts = std::max<uint64_t>(h.parts, 1);
  if (parts > kMaxSparseParts || h.part >= parts) {
    return (*error = "SPARSE_PULL part " + std::to_string(h.part) + " of " + std::to_string(h.parts) + ": " +
                     (h.part >= parts ? "no such part" : "more than " + std::to_string(kMaxSparseParts) + " parts"),
            false);
  }
  SparseParked p{msg.route, h.request_id, h.step, {}, h.part, h.parts, msg.frames[1].size() + kParkedPartBytes};
  *error = sparse_->check_pull_body(h, msg.frames[1].size());  // before its IDs are copied out
  if (!error->empty()) return false;
  if (!decode_sparse_body(h.op, msg.frames[1].data(), msg.frames[1].size(), &p.request, error)) return false;
  *error = sparse_->check_pull(h.step);
  if (!error->empty()) return false;
  if (parts > 1 && h.part == 0) {
    ++parted_pulls_;
    pull_parts_ += parts;
  }
  if (sparse_->ready(h.step)) return send_rows(p, error);
  if (!sparse_->check_rows(p.request, error)) return false;  // now, so that a bad pull is refused at once
  *error = check_parking(p);
  if (!error->empty()) return false;
  park(std::move(p));
  return true;
}

// A worker has at most two pulls waiting (its next step's, and an evaluation's; each may be in
// parts, which share its request id): more would let one peer grow the shard's memory with
// parked requests.
std::string ParameterServer::check_parking(const SparseParked& p) const {
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

void ParameterServer::park(SparseParked p) {
  ParkedUse& u = parked_use_[p.route];
  if (std::find(u.request_ids.begin(), u.request_ids.end(), p.request_id) == u.request_ids.end()) {
    u.request_ids.push_back(p.request_id);
  }
  u.parts.emplace(p.request_id, p.part);
  u.bytes += p.bytes;
  sparse_parked_.push_back(std::move(p));
}

// p left sparse_parked_ (answered): its worker's use without it.
void ParameterServer::unpark(const SparseParked& p) {
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

bool ParameterServer::on_sparse_push(const Message& msg, const Header& h, std::string* error) {
  if (sparse_ == nullptr) return (*error = "SPARSE_PUSH, but this job has no embedding tables", false);
  if (h.sender == 0 && h.checkpoint != 0 && h.checkpoint != h.step + 1) {
    return (*error = "SPARSE_PUSH for step " + std::to_string(h.step) + " asks for a checkpoint of version " +
                     std::to_string(h.checkpoint), false);
  }
  std::vector<SparseSection> sections;
  if (!decode_sparse_body(h.op, msg.frames[1].data(), msg.frames[1].size(), &sections, error)) return false;
  bool applied = false;
  const int worker = static_cast<int>(h.sender);
  if (!sparse_->push(worker, members_.rejoined(worker), h, std::move(sections), &applied, error)) return false;
  if (h.sender == 0) checkpoints_.mark(h);  // hybrid mode: the chief's marks come with its rows
  if (applied) sparse_advanced();
  if (!sparse_->in_parts(worker)) settle_step();  // a push counts once its last part is here
  return true;
}

// --backup-workers with tables (docs/sparse.md, "Backup workers"): a worker counts for the step
// being collected once its whole step is here (every chunk of the slice and its SPARSE_PUSH,
// which may come over different channels, in any order); the first N - b such workers make the
// step, for the dense chunks and the tables alike, scaled by their samples, and every other
// push of the step is dropped as late.
void ParameterServer::settle_step() {
  if (sparse_ == nullptr || !store_->holds_steps()) return;
  std::vector<bool> workers(static_cast<size_t>(options_.num_workers), false);
  int whole = 0;
  for (int w = 0; w < options_.num_workers; ++w) {
    workers[static_cast<size_t>(w)] = store_->pushed_every_chunk(w) && sparse_->pushed(w);
    whole += workers[static_cast<size_t>(w)] ? 1 : 0;
  }
  if (whole < policy_.quorum()) return;
  Outcome out;
  const uint64_t samples = store_->apply_step(workers, &out);
  sparse_->apply_step(workers, samples);
  sparse_advanced();  // the parked SPARSE_PULLs, and the chunks of the new version
}

bool ParameterServer::send_rows(const SparseParked& p, std::string* error) {
  if (!sparse_->check_rows(p.request, error)) return false;
  send_checked_rows(p);
  return true;
}

void ParameterServer::send_checked_rows(const SparseParked& p) {
  std::vector<SparseSection> rows;
  sparse_->checked_rows(p.request, p.want, &rows);
  Header h;
  h.op = Op::kSparseRows;
  h.request_id = p.request_id;
  h.step = sparse_->version();
  h.part = p.part;
  h.parts = p.parts;
  std::string body = encode_sparse_body(Op::kSparseRows, rows);
  h.length = body.size() / 4;
  Frame payload(std::move(body));
  reply(p.route, h, &payload);
}

bool ParameterServer::ready(size_t part, uint64_t want) const {
  return store_->ready(part, want) && (sparse_ == nullptr || policy_.mode() != ModeCode::kSync || sparse_->ready(want));
}

void ParameterServer::sparse_advanced() {
  // Hybrid mode: the tables' file is on disk before any worker has rows of the version.
  checkpoints_.advanced(*store_, sparse_.get());
  auto waiting = sparse_parked_.begin();
  for (auto it = sparse_parked_.begin(); it != sparse_parked_.end(); ++it) {
    if (sparse_->ready(it->want)) {
      send_checked_rows(*it);  // checked when it arrived (on_sparse_pull)
      unpark(*it);
    } else {
      *waiting++ = std::move(*it);
    }
  }
  sparse_parked_.erase(waiting, sparse_parked_.end());
  if (policy_.mode() == ModeCode::kSync) {  // the dense parts held back for the tables' step
    for (size_t i = 0; i < store_->parts(); ++i) chunk_advanced(i);
  }
}

void ParameterServer::chunk_advanced(size_t index) {
  // The last chunk reached the version to checkpoint: every chunk is at it now (no worker can
  // push the next step before it has all of this one), and none of it has been sent yet, so the
  // file is on disk before any worker sees the version, and the chief's manifest after it.
  checkpoints_.advanced(*store_, sparse_.get());
  for (Parked& p : parked_) {
    if (!p.sent[index] && ready(index, p.want)) {
      send_chunk(p.route, p.request_id, index, p.want, p.shm);
      p.sent[index] = true;
      --p.left;
    }
  }
  parked_.erase(std::remove_if(parked_.begin(), parked_.end(), [](const Parked& p) { return p.left == 0; }),
                parked_.end());
}

bool ParameterServer::on_stats(const Message& msg, const Header& h, int worker, std::string* error) {
  if (options_.index != 0) return (*error = "STATS goes to ps0 only", false);
  if (options_.mode != Mode::kSync) return (*error = "STATS: batch-norm statistics are combined in sync mode only", false);
  if (h.length == 0 || h.length % 2 != 0) {
    return (*error = "STATS payload of " + std::to_string(h.length) + " words is not one or more doubles", false);
  }
  if (h.length / 2 > StatsCombiner::kMaxValues) {  // before anything is copied
    return (*error = "STATS of " + std::to_string(h.length / 2) + " values (1 to " +
                     std::to_string(StatsCombiner::kMaxValues) + ")", false);
  }
  // A replacement worker redoes its step from its first call, which the others have passed: the
  // job would wait out --timeout. Refused at once, naming the way out.
  if (options_.allow_rejoin) {
    return (*error = "STATS: batch norm's global statistics do not survive a replaced worker (--allow-rejoin, "
                     "launch.sh --max-restarts): give the workers --batchnorm-stats local, or no --max-restarts", false);
  }
  std::vector<double> values(h.length / 2);
  std::memcpy(values.data(), msg.frames[1].data(), values.size() * sizeof(double));
  std::optional<StatsCombiner::Complete> complete;
  *error = stats_.add(worker, msg.route, h.request_id, h.step, h.offset, std::move(values), &complete);
  if (!error->empty()) return false;
  if (!complete) return true;
  // Every worker's answer shares one buffer: a call's sums (kMaxValues doubles at most, checked
  // above) are held once, whatever the number of workers.
  const auto sums = std::make_shared<const std::vector<double>>(std::move(complete->sums));
  const size_t bytes = sums->size() * sizeof(double);
  for (const auto& [route, request_id] : complete->askers) {
    Header sum;
    sum.op = Op::kStatsSum;
    sum.request_id = request_id;
    sum.step = h.step;
    sum.offset = h.offset;
    sum.length = bytes / 4;
    Frame payload(sums, sums->data(), bytes);
    reply(route, sum, &payload);
  }
  return true;
}

// A DONE is acknowledged once every message it counts has arrived (the worker closes its
// sockets then); until then it waits, and the worker is told what for (WAITING).
void ParameterServer::on_done(const Message& msg, const Header& h) {
  std::string why;
  bool refused = false;
  if (members_.done(static_cast<int>(h.sender), msg.route, h, &why, &refused)) {
    return acknowledge_done(msg.route, h.request_id);
  }
  if (refused) return reject(msg.route, h.request_id, why);
  Header waiting;
  waiting.op = Op::kWaiting;
  waiting.request_id = h.request_id;
  waiting.message = why;
  reply(msg.route, waiting, nullptr);
}

void ParameterServer::acknowledge_done(const std::string& route, uint64_t request_id) {
  Header ack;
  ack.op = Op::kDone;
  ack.request_id = request_id;
  reply(route, ack, nullptr);
}

void ParameterServer::send_chunk(const std::string& route, uint64_t request_id, size_t part, uint64_t want,
                                 uint64_t shm) {
  const int worker = members_.worker_of(route);
  Header h = store_->params_header(part, want, worker);
  h.request_id = request_id;
  checkpoints_.stamp(&h);
  if (!figures_.taken || h.step > figures_.version) {
    figures_ = Figures{true, h.step, store_->apply_us(), bytes_in_, bytes_out_};
  }
  h.apply_us = figures_.apply_us;
  h.bytes_in = figures_.bytes_in;
  h.bytes_out = figures_.bytes_out;
  if (shm == 2) {  // the worker reads them in the area (plain sync: nothing older is ever asked)
    h.shm = 1;
    return reply(route, h, nullptr);
  }
  if (shm == 1) {
    // Into the worker's segment; it reads them before its next PULL, the only thing that makes
    // the PS write there again.
    if (worker < 0) return;  // replaced meanwhile: that peer is gone
    store_->copy_values(part, want, members_.params_in_segment(worker));
    h.shm = 1;
    return reply(route, h, nullptr);
  }
  Frame payload = store_->payload(part, want);
  reply(route, h, &payload);
}

void ParameterServer::reject(const std::string& route, uint64_t request_id, const std::string& why) {
  ++rejected_;
  PSLOG(WARN) << "ps" << options_.index << ": rejected a message from " << printable(route) << ": " << why;
  Header h;
  h.op = Op::kError;
  h.request_id = request_id;
  h.message = why;
  reply(route, h, nullptr);
}

void ParameterServer::reply(const std::string& route, Header h, Frame* payload) {
  h.role = SenderRole::kPs;
  h.sender = static_cast<uint32_t>(options_.index);
  Message out;
  out.route = route;
  const std::string header = encode_header(h);
  out.frames.emplace_back(header.data(), header.size());
  if (payload != nullptr) out.frames.push_back(std::move(*payload));
  const uint64_t bytes = header.size() + (payload != nullptr ? out.frames.back().size() : 0);
  // One try, no waiting: a peer whose queue is full is not reading, and the PS's one thread must
  // not block on it while the other workers wait.
  std::string error;
  if (!endpoint_.send(std::move(out), Clock::now(), &error)) {
    PSLOG(WARN) << "ps" << options_.index << ": dropped a reply to " << printable(route) << ": " << error;
    return;
  }
  bytes_out_ += bytes;
}

void ParameterServer::report_stall() {
  const auto now = Clock::now();
  const auto threshold = std::chrono::duration<double>(options_.stall_report_s);
  if (now - last_stall_report_ < threshold) return;
  Barrier b;
  std::vector<int> missing;
  std::ostringstream os;
  os << "ps" << options_.index << ": stall: ";
  const std::string dones = members_.waiting_dones();
  if (!dones.empty()) {  // a worker's message lost on the way, or still on it
    PSLOG(WARN) << os.str() << dones;
    last_stall_report_ = now;
  }
  const bool dense = store_ != nullptr && store_->oldest_barrier(&b);
  if (dense || (sparse_ != nullptr && sparse_->barrier(&b.step, &b.since, &b.pushed))) {
    if (now - b.since < threshold) return;
    for (int i = 0; i < options_.num_workers; ++i) {
      if (!b.pushed[static_cast<size_t>(i)]) missing.push_back(i);
    }
    os << (dense ? "barrier" : "the tables' barrier (SPARSE_PUSH)") << " of step " << b.step << " has waited "
       << std::chrono::duration<double>(now - b.since).count() << " s for worker(s)";
  } else {
    missing = members_.unregistered();
    if (missing.empty()) return;
    os << "still waiting for worker(s) to register:";
  }
  for (int w : missing) os << " " << w;
  PSLOG(WARN) << os.str();
  last_stall_report_ = now;
}

// Each parked PULL of a worker waiting at a barrier that has waited a second or more gets a WAITING
// naming the pushes the barrier lacks, once a second: the worker then knows its PS is there, and
// waits on (docs/operations.md, "Partitions").
void ParameterServer::tell_waiting() {
  if (store_ == nullptr || (parked_.empty() && sparse_parked_.empty())) return;
  const auto now = Clock::now();
  const auto every = std::chrono::duration<double>(kWaitingEverySeconds);
  Barrier b;
  const bool dense = store_->oldest_barrier(&b);
  if (!dense && (sparse_ == nullptr || !sparse_->barrier(&b.step, &b.since, &b.pushed))) return;
  if (now - last_waiting_ < every || now - b.since < every) return;
  std::string missing;
  for (int i = 0; i < options_.num_workers; ++i) {
    if (!b.pushed[static_cast<size_t>(i)]) missing += (missing.empty() ? "w" : ", w") + std::to_string(i);
  }
  Header h;
  h.op = Op::kWaiting;
  h.step = b.step;
  h.message = std::string(dense ? "the push of " : "the sparse push of ") + missing + " for step " +
              std::to_string(b.step) + " (waited " +
              seconds_text(std::floor(std::chrono::duration<double>(now - b.since).count())) + " so far)";
  for (const Parked& p : parked_) {
    h.request_id = p.request_id;
    reply(p.route, h, nullptr);
  }
  for (const SparseParked& p : sparse_parked_) {
    h.request_id = p.request_id;
    reply(p.route, h, nullptr);
  }
  last_waiting_ = now;
}

void ParameterServer::report_tables() {
  if (sparse_ == nullptr) return;
  const auto now = Clock::now();
  if (now - last_tables_report_ < std::chrono::duration<double>(kTablesEverySeconds)) return;
  if (last_tables_report_ != Clock::time_point{}) {  // not at once: the first line comes after 10 s
    PSLOG(INFO) << "ps" << options_.index << ": version " << version() << sparse_->counters_text();  // "; tables at ..."
  }
  last_tables_report_ = now;
}

std::string ParameterServer::mode_text() const {
  switch (policy_.mode()) {
    case ModeCode::kSync:
      return options_.backup_workers > 0 ? "sync with " + std::to_string(options_.backup_workers) +
                                               " backup worker(s) (a step is applied once " +
                                               std::to_string(policy_.quorum()) + " workers pushed it)"
                                         : "sync";
    case ModeCode::kSsp: return "ssp (staleness " + std::to_string(options_.staleness) + ")";
    case ModeCode::kAsync: return "async";
  }
  return "?";
}

}  // namespace pstrain
