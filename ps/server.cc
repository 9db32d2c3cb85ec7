#include "ps/server.h"

#include <algorithm>

#include "shared/util/clock.h"
#include "shared/util/file_util.h"
#include "shared/util/log.h"

namespace pstrain {
namespace {

constexpr double kCloseSeconds = 5;

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
      gate_(policy_, options_.num_workers, !options_.tables.empty(), options_.backup_workers),
      members_(options_, policy_),
      checkpoints_(options_),
      dense_(options_, policy_, members_, checkpoints_, *this),
      sparse_(options_, policy_.mode(), *this),
      stats_(options_, *this),
      reports_(options_.index, options_.num_workers, options_.stall_report_s) {}

ParameterServer::~ParameterServer() { checkpoints_.finish(); }  // its writer reads the tables

uint64_t ParameterServer::version() const { return dense_.active() ? dense_.store().version() : 0; }

std::vector<float> ParameterServer::params() const {
  return dense_.active() ? dense_.store().values() : std::vector<float>();
}

void ParameterServer::serve() {
  rss_start_kib_ = rss_kib();  // before any row: the tables' growth is measured from here
  PSLOG(INFO) << "ps" << options_.index << ": serving at " << endpoint_.address()
              << (options_.ipc.empty() ? "" : " and ipc://" + options_.ipc) << ", mode "
              << policy_.describe() << ", " << options_.num_workers << " worker(s), optimizer "
              << optimizer_kind_name(options_.optimizer.kind) << " lr " << options_.optimizer.lr;
  reports_.start(Clock::now());
  Message msg;
  while (!members_.all_done()) {
    const auto tick = deadline_after(std::min(1.0, options_.stall_report_s));
    if (endpoint_.recv(&msg, tick)) handle(msg);
    report_stall();
    tell_waiting();
    sparse_.report(version());
  }
  checkpoints_.finish();
  sparse_.finish(members_.stopped());
  PSLOG(INFO) << "ps" << options_.index << ": all " << options_.num_workers
              << " workers done at version " << version() << (dense_.active() ? dense_.store().counters_text() : "")
              << sparse_.counters_text() << "; socket_bytes_in=" << bytes_in_ << " socket_bytes_out=" << bytes_out_
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
  if (members_.heard_from(worker)) dense_.release_area_name();
  if (!route(msg, h, worker, &error)) reject(msg.route, h.request_id, error);
  std::string done_route;  // a DONE that waited for this message
  uint64_t done_request = 0;
  if (h.op != Op::kDone && members_.settle_done(worker, &done_route, &done_request)) {
    answer(done_route, Op::kDone, done_request, "");  // acknowledged
  }
}

// A registered worker's request, to its operation's service: false, with the reason, if refused.
bool ParameterServer::route(Message& msg, const Header& h, int worker, std::string* error) {
  Outcome out;
  switch (h.op) {
    case Op::kInit: return dense_.init(msg, h, &out, error) && (advanced(out), true);
    case Op::kPush: return on_push(msg, h, error);
    case Op::kPull: return dense_.pull(msg, h, dense_limit(), error);
    case Op::kClip: return dense_.clip(msg, h, &out, error) && (advanced(out), true);
    case Op::kSparsePull: return sparse_.pull(msg, h, error);
    case Op::kSparsePush: return on_sparse_push(msg, h, error);
    case Op::kStats: return stats_.stats(msg, h, worker, error);
    case Op::kDone: return (on_done(msg, h), true);
    default: return (*error = std::string(op_name(h.op)) + " is not a request", false);
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
                << std::min(dense_.store().next_step_of(worker, members_.rejoined(worker)),
                            sparse_.next_step_of(worker, true));
  }
  Header welcome = dense_.welcome(worker, h);
  // A replacement whose predecessor's rows of a step never arrived redoes that step (its dense
  // push, applied already, is dropped as a repeat).
  welcome.step = std::min(welcome.step, sparse_.next_step_of(worker, members_.rejoined(worker)));
  welcome.total = members_.job().total;
  reply(msg.route, welcome, nullptr);
}

// The first HELLO that passed its checks: the model's size is known, the slice and the tables are
// set up (with --resume from the newest checkpoint, whose tables go to the sparse service). False,
// with the reason, when they cannot be.
bool ParameterServer::start_job(const Header& h, std::string* error) {
  members_.learn_job(h);
  dense_.start(members_.job(), gate_.holds_steps());
  checkpoints_.set_last(members_.job().total_steps);
  ShardCheckpoint loaded;
  bool ok = !options_.checkpoint.resume || checkpoints_.resume(dense_.store(), &loaded, error);
  if (ok) PSLOG(INFO) << "ps" << options_.index << ": " << dense_.store().shape_text();
  if (ok && !options_.tables.empty()) {
    // The dense slice's state as Membership::shard_too_big counts it: values, sums, two slots.
    const size_t dense_bytes = dense_.store().slice().length * 4 * sizeof(float);
    ok = sparse_.start(members_.job(), dense_.store().version(), dense_bytes, loaded.table_files, error);
  }
  if (ok) return true;
  members_.forget_job();  // not set up: every HELLO gets the same answer
  dense_.stop();
  PSLOG(ERROR) << "ps" << options_.index << ": " << *error;
  return false;
}

bool ParameterServer::on_push(Message& msg, const Header& h, std::string* error) {
  Outcome out;
  if (!dense_.push(msg, h, &out, error)) return false;
  if (out.changed && h.sender == 0) checkpoints_.mark(h);
  advanced(out);
  settle_step();
  if (out.norm_ready) dense_.send_norms();
  return true;
}

bool ParameterServer::on_sparse_push(const Message& msg, const Header& h, std::string* error) {
  SparsePushOutcome out;
  if (!sparse_.push(msg, h, members_.rejoined(static_cast<int>(h.sender)), &out, error)) return false;
  if (h.sender == 0) checkpoints_.mark(h);  // hybrid mode: the chief's marks come with its rows
  if (out.applied) tables_advanced();
  if (out.whole) settle_step();
  return true;
}

void ParameterServer::advanced(const Outcome& out) {
  if (out.every_part) {
    for (size_t i = 0; i < dense_.store().parts(); ++i) chunk_advanced(i);
  } else if (out.advanced) {
    chunk_advanced(out.part);
  }
}

void ParameterServer::chunk_advanced(size_t index) {
  // The last chunk reached the version to checkpoint: every chunk is at it now (no worker can
  // push the next step before it has all of this one), and none of it has been sent yet, so the
  // file is on disk before any worker sees the version, and the chief's manifest after it.
  checkpoints_.advanced(dense_.store(), sparse_.store());
  dense_.send_ready(index, dense_limit());
}

void ParameterServer::tables_advanced() {
  // Hybrid mode: the tables' file is on disk before any worker has rows of the version.
  checkpoints_.advanced(dense_.store(), sparse_.store());
  sparse_.answer_parked();
  if (policy_.mode() == Mode::kSync) {  // the dense parts held back for the tables' step
    for (size_t i = 0; i < dense_.store().parts(); ++i) chunk_advanced(i);
  }
}

// Held steps (docs/sparse.md, "Backup workers"): once the gate finds the step whole, the first
// N - b workers whose every chunk and SPARSE_PUSH are here make it, for the chunks and the tables
// alike, scaled by their samples; every other push of the step is dropped as late.
void ParameterServer::settle_step() {
  std::vector<bool> workers;
  if (!gate_.holds_steps() || !gate_.whole(dense_.pushed_every_chunk(), sparse_.pushed(), &workers)) return;
  const uint64_t samples = dense_.apply_step(workers);
  sparse_.apply_step(workers, samples);
  tables_advanced();  // the parked SPARSE_PULLs, and the chunks of the new version
}

uint64_t ParameterServer::dense_limit() const {
  return sparse_.active() ? gate_.dense_limit(sparse_.version()) : UINT64_MAX;
}

// A DONE is acknowledged once every message it counts has arrived (the worker closes its
// sockets then); until then it waits, and the worker is told what for (WAITING).
void ParameterServer::on_done(const Message& msg, const Header& h) {
  std::string why;
  bool refused = false;
  if (members_.done(static_cast<int>(h.sender), msg.route, h, &why, &refused)) {
    return answer(msg.route, Op::kDone, h.request_id, "");  // acknowledged
  }
  if (refused) return reject(msg.route, h.request_id, why);
  answer(msg.route, Op::kWaiting, h.request_id, why);
}

void ParameterServer::reject(const std::string& route, uint64_t request_id, const std::string& why) {
  ++rejected_;
  PSLOG(WARN) << "ps" << options_.index << ": rejected a message from " << peer_name(route) << ": " << why;
  answer(route, Op::kError, request_id, why);
}

void ParameterServer::answer(const std::string& route, Op op, uint64_t request_id, const std::string& message) {
  Header h;
  h.op = op;
  h.request_id = request_id;
  h.message = message;
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
    if (drops_.dropped(route)) {
      PSLOG(WARN) << "ps" << options_.index << ": dropped a reply to " << peer_name(route) << ": " << error
                  << " (and any more to it, unlogged, until one goes)";
    }
    return;
  }
  drops_.sent(route);
  bytes_out_ += bytes;
}

void ParameterServer::report_stall() {
  const auto now = Clock::now();
  if (!reports_.stall_due(now)) return;
  Barrier b;
  bool dense = false;
  const bool waits = oldest_barrier(&b, &dense);
  for (const std::string& line :
       reports_.stall(now, members_.waiting_dones(), waits ? &b : nullptr, dense, members_.unregistered())) {
    PSLOG(WARN) << line;
  }
}

// Each parked pull of a worker waiting at a barrier that has waited a second or more gets a
// WAITING naming the pushes the barrier lacks, once a second (ps/barrier_reports.h).
void ParameterServer::tell_waiting() {
  if (!dense_.active() || (!dense_.waiting() && !sparse_.waiting())) return;
  Barrier b;
  bool dense = false;
  Header h;
  if (!oldest_barrier(&b, &dense) || !reports_.waiting(Clock::now(), b, dense, &h)) return;
  dense_.tell_waiting(h);
  sparse_.tell_waiting(h);
}

// The barrier that has waited longest: the dense store's (*dense), else the tables'.
bool ParameterServer::oldest_barrier(Barrier* b, bool* dense) const {
  *dense = dense_.active() && dense_.store().oldest_barrier(b);
  return *dense || sparse_.barrier(&b->step, &b->since, &b->pushed);
}

}  // namespace pstrain
