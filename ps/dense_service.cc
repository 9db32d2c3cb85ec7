#include "ps/dense_service.h"

#include <algorithm>
#include <utility>

namespace pstrain {

struct DenseService::Parked {  // a PULL waiting for chunks to reach its version
  std::string route;
  uint64_t request_id;
  uint64_t want;
  std::vector<bool> sent;
  size_t left;
  bool norm_sent;  // --clip-norm: this PULL was sent the shard's NORM of the step it waits for
  uint64_t shm;  // 1: the parameters go into the worker's segment; 2: it reads the area (PULL's shm)
};

DenseService::DenseService(const ServerOptions& options, const ConsistencyPolicy& policy, Membership& members,
                           const ShardCheckpoints& checkpoints, Replier& replier)
    : options_(options), policy_(policy), members_(members), checkpoints_(checkpoints), replier_(replier) {}

DenseService::~DenseService() = default;

void DenseService::start(const JobShape& job, bool hold_steps) {
  store_ = std::make_unique<DenseStore>(options_, policy_, job, hold_steps);
}

Header DenseService::welcome(int worker, const Header& hello) {
  if (members_.has_segment(worker)) store_->release_segment(worker);
  if (members_.map_segment(worker, hello, store_->slice().length)) store_->share_values();
  Header welcome;
  // 2: and the values live in the area named in `message`, which this PS writes only in the
  // apply of a step every worker pushed (the last push completes it, or with --clip-norm on
  // several shards the first CLIP; plain sync): the worker may compute from it.
  welcome.shm = !members_.has_segment(worker) ? 0 : store_->area().mapped() ? 2 : 1;
  if (welcome.shm == 2) welcome.message = store_->area().name();
  members_.offered_area(worker, welcome.shm == 2);
  release_area_name();
  welcome.op = Op::kWelcome;
  welcome.request_id = hello.request_id;
  welcome.step = store_->next_step_of(worker, members_.rejoined(worker));
  welcome.offset = store_->slice().offset;
  welcome.length = store_->slice().length;
  welcome.chunk = store_->chunk_length();
  return welcome;
}

// An INIT or PUSH of a registered worker, for the store.
Update DenseService::update_of(Message& msg, const Header& h) const {
  const int worker = static_cast<int>(h.sender);
  return Update{h, worker, members_.rejoined(worker), msg.frames.size() > 1 ? &msg.frames[1] : nullptr,
                members_.gradient_in_segment(worker)};
}

bool DenseService::init(Message& msg, const Header& h, Outcome* out, std::string* error) {
  return store_->init(update_of(msg, h), out, error);
}

bool DenseService::push(Message& msg, const Header& h, Outcome* out, std::string* error) {
  return store_->push(update_of(msg, h), out, error);
}

bool DenseService::clip(const Message& msg, const Header& h, Outcome* out, std::string* error) {
  if (store_ == nullptr) return (*error = "CLIP before HELLO", false);
  if (h.length != kNormWords) {
    return (*error = "CLIP carries " + std::to_string(h.length) + " words, not " + std::to_string(kNormWords), false);
  }
  return store_->clip(h.step, ExactSquares::from_bytes(msg.frames[1].data()), out, error);
}

bool DenseService::pull(const Message& msg, const Header& h, uint64_t limit, std::string* error) {
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
    if (store_->ready(i, h.step) && h.step <= limit) {
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

void DenseService::send_ready(size_t part, uint64_t limit) {
  for (Parked& p : parked_) {
    if (!p.sent[part] && store_->ready(part, p.want) && p.want <= limit) {
      send_chunk(p.route, p.request_id, part, p.want, p.shm);
      p.sent[part] = true;
      --p.left;
    }
  }
  parked_.erase(std::remove_if(parked_.begin(), parked_.end(), [](const Parked& p) { return p.left == 0; }),
                parked_.end());
}

void DenseService::send_norms() {
  for (Parked& p : parked_) send_norm(p);
}

// A PULL of the version after the step that waits for its norm gets this shard's part of the
// squares, once; the worker sends back the whole sum (CLIP).
void DenseService::send_norm(Parked& p) {
  uint64_t step = 0;
  ExactSquares part;
  if (p.norm_sent || !store_->awaiting_clip(&step, &part) || p.want != step + 1) return;
  Header h;
  h.op = Op::kNorm;
  h.request_id = p.request_id;
  h.step = step;
  h.length = kNormWords;
  Frame payload(part.limbs().data(), sizeof(uint64_t) * ExactSquares::kLimbs);
  replier_.reply(p.route, h, &payload);
  p.norm_sent = true;
}

void DenseService::send_chunk(const std::string& route, uint64_t request_id, size_t part, uint64_t want,
                              uint64_t shm) {
  const int worker = members_.worker_of(route);
  Header h = store_->params_header(part, want, worker);
  h.request_id = request_id;
  checkpoints_.stamp(&h);
  if (!figures_.taken || h.step > figures_.version) {
    const Replier::Traffic traffic = replier_.traffic();
    figures_ = Figures{true, h.step, store_->apply_us(), traffic.in, traffic.out};
  }
  h.apply_us = figures_.apply_us;
  h.bytes_in = figures_.bytes_in;
  h.bytes_out = figures_.bytes_out;
  if (shm == 2) {  // the worker reads them in the area (plain sync: nothing older is ever asked)
    h.shm = 1;
    return replier_.reply(route, h, nullptr);
  }
  if (shm == 1) {
    // Into the worker's segment; it reads them before its next PULL, the only thing that makes
    // the PS write there again.
    if (worker < 0) return;  // replaced meanwhile: that peer is gone
    store_->copy_values(part, want, members_.params_in_segment(worker));
    h.shm = 1;
    return replier_.reply(route, h, nullptr);
  }
  Frame payload = store_->payload(part, want);
  replier_.reply(route, h, &payload);
}

void DenseService::release_area_name() {
  if (members_.area_settled()) store_->release_area_name();
}

std::vector<bool> DenseService::pushed_every_chunk() const {
  std::vector<bool> out(static_cast<size_t>(options_.num_workers));
  for (int w = 0; w < options_.num_workers; ++w) out[static_cast<size_t>(w)] = store_->pushed_every_chunk(w);
  return out;
}

uint64_t DenseService::apply_step(const std::vector<bool>& workers) {
  Outcome out;  // every chunk advanced: the loop sends them once the tables applied the step too
  return store_->apply_step(workers, &out);
}

void DenseService::tell_waiting(Header h) {
  for (const Parked& p : parked_) {
    h.request_id = p.request_id;
    replier_.reply(p.route, h, nullptr);
  }
}

}  // namespace pstrain
