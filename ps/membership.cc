#include "ps/membership.h"

#include "ps/shard_memory.h"
#include "shared/train/layout.h"
#include "shared/util/log.h"

namespace pstrain {

Membership::Membership(const ServerOptions& options, const ConsistencyPolicy& policy)
    : options_(options),
      policy_(policy),
      route_of_worker_(static_cast<size_t>(options.num_workers)),
      segment_of_worker_(static_cast<size_t>(options.num_workers)),
      area_unmapped_(static_cast<size_t>(options.num_workers), false),
      done_(static_cast<size_t>(options.num_workers), false),
      received_(static_cast<size_t>(options.num_workers), OpCounts{}),
      rejoined_(static_cast<size_t>(options.num_workers), false) {}

std::string Membership::check_hello(const std::string& route, const Header& h) const {
  const std::string why = check_job(h);
  return why.empty() ? check_registration(route, h) : why;
}

// The HELLO's view of the job against this PS's options and the first HELLO's.
std::string Membership::check_job(const Header& h) const {
  if (h.num_workers != static_cast<uint32_t>(options_.num_workers)) {
    return "worker thinks there are " + std::to_string(h.num_workers) + " workers; this PS has " +
           std::to_string(options_.num_workers);
  }
  if (h.sender >= static_cast<uint32_t>(options_.num_workers)) return "worker index out of range";

  if (h.total == 0 || (job_.total != 0 && h.total != job_.total)) {
    return "model of " + std::to_string(h.total) + " parameters does not match " + std::to_string(job_.total);
  }
  if (job_.total == 0) {
    const std::string why = shard_too_big(h.total);
    if (!why.empty()) return why;
  }
  if (job_.total != 0 && h.step != job_.total_steps) {
    return "job of " + std::to_string(h.step) + " steps does not match the other workers' " +
           std::to_string(job_.total_steps);
  }
  if (mode_of_code(h.mode) != policy_.mode()) {
    return std::string("worker runs --mode ") + mode_name(mode_of_code(h.mode)) + "; this PS runs --mode " + policy_.name();
  }
  if (job_.global_batch != 0 && h.samples != job_.global_batch) {
    return "worker's global batch of " + std::to_string(h.samples) + " samples does not match the other workers' " +
           std::to_string(job_.global_batch) + " (are --batch-size, --accum-steps, --worker-batch and --global-batch "
           "the same everywhere?)";
  }
  return "";
}

// Whether the HELLO's worker index may be (or stay) the sender's.
std::string Membership::check_registration(const std::string& route, const Header& h) const {
  const auto known = worker_of_route_.find(route);
  const std::string& owner = route_of_worker_[h.sender];
  if (known != worker_of_route_.end() && known->second != static_cast<int>(h.sender)) {
    return "worker " + std::to_string(h.sender) + " is already registered from another peer";
  }
  const bool replacement = !owner.empty() && owner != route;
  if (replacement && !options_.allow_rejoin) {
    return "worker " + std::to_string(h.sender) + " is already registered from another peer";
  }
  if (replacement && done_[h.sender]) return "worker " + std::to_string(h.sender) + " has finished the job";
  return "";
}

// A HELLO's model size decides what this shard allocates: one peer must not be able to make it
// allocate without bound. Needed: values, gradient sum and up to two optimizer slots per float.
std::string Membership::shard_too_big(uint64_t total) const {
  const uint64_t length = balance_slices(total, options_.num_ps)[static_cast<size_t>(options_.index)].length;
  const uint64_t limit_mib = options_.max_shard_mib > 0 ? static_cast<uint64_t>(options_.max_shard_mib)
                                                        : physical_memory_mib();
  const uint64_t need_mib = length / (1024 * 1024 / (4 * sizeof(float))) + 1;
  if (need_mib <= limit_mib) return "";
  return "model of " + std::to_string(total) + " parameters needs about " + std::to_string(need_mib) +
         " MiB on this shard, more than its limit of " + std::to_string(limit_mib) + " MiB (--max-shard-mib)";
}

void Membership::learn_job(const Header& hello) {
  job_.total = hello.total;
  job_.total_steps = hello.step;
  job_.global_batch = hello.samples;
}

void Membership::forget_job() {
  job_.total = 0;
  job_.global_batch = 0;
}

bool Membership::admit(const std::string& route, int worker) {
  std::string& owner = route_of_worker_[static_cast<size_t>(worker)];
  if (owner.empty()) PSLOG(INFO) << "ps" << options_.index << ": worker " << worker << " registered";
  const bool replacement = !owner.empty() && owner != route;
  if (replacement) {
    worker_of_route_.erase(owner);
    rejoined_[static_cast<size_t>(worker)] = true;
  }
  if (owner != route) {  // a new peer: its counts start here (a repeated HELLO adds to them)
    received_[static_cast<size_t>(worker)].fill(0);
    waiting_done_.erase(worker);
  }
  owner = route;
  worker_of_route_[route] = worker;
  return replacement;
}

int Membership::worker_of(const std::string& route) const {
  const auto it = worker_of_route_.find(route);
  return it == worker_of_route_.end() ? -1 : it->second;
}

std::vector<int> Membership::unregistered() const {
  std::vector<int> missing;
  for (int i = 0; i < options_.num_workers; ++i) {
    if (route_of_worker_[static_cast<size_t>(i)].empty()) missing.push_back(i);
  }
  return missing;
}

bool Membership::map_segment(int worker, const Header& hello, uint64_t slice_length) {
  SharedMemory& segment = segment_of_worker_[static_cast<size_t>(worker)];
  segment = SharedMemory();
  if (hello.shm == 0 || !options_.shared_memory) return false;
  std::string why;
  if (!SharedMemory::open(hello.message, shm_segment_bytes(slice_length), &segment, &why)) {
    PSLOG(DEBUG) << "ps" << options_.index << ": worker " << worker << " through sockets: " << why;
    return false;
  }
  slice_length_ = slice_length;
  PSLOG(DEBUG) << "ps" << options_.index << ": worker " << worker << "'s payloads go through shared memory";
  return true;
}

// The worker's segment: its gradient of the slice, then the PS's parameters of it (layout in
// docs/wire_protocol.md, "Shared memory").
const float* Membership::gradient_in_segment(int worker) const {
  const SharedMemory& segment = segment_of_worker_[static_cast<size_t>(worker)];
  if (!segment.mapped()) return nullptr;
  return static_cast<const float*>(segment.data());
}

float* Membership::params_in_segment(int worker) const {
  const SharedMemory& segment = segment_of_worker_[static_cast<size_t>(worker)];
  return static_cast<float*>(segment.data()) + shm_area_floats(slice_length_);
}

bool Membership::heard_from(int worker) {
  if (!area_unmapped_[static_cast<size_t>(worker)]) return false;
  area_unmapped_[static_cast<size_t>(worker)] = false;  // it has read its WELCOME: mapped the area or given up
  return true;
}

bool Membership::area_settled() const {
  for (size_t w = 0; w < route_of_worker_.size(); ++w) {
    if (route_of_worker_[w].empty() || area_unmapped_[w]) return false;
  }
  return true;
}

bool Membership::done(int worker, const std::string& route, const Header& h, std::string* why, bool* refused) {
  *refused = false;
  stopped_ = stopped_ || h.stop != 0;  // it stopped before the job's end, whenever its DONE is acknowledged
  OpCounts sent{};
  if (!decode_op_counts(h.message, &sent, why)) return (*refused = true, false);
  const std::string missing = missing_ops(sent, received_[static_cast<size_t>(worker)]);
  if (missing.empty()) {
    waiting_done_.erase(worker);
    mark_done(worker);
    return true;
  }
  waiting_done_[worker] = WaitingDone{route, h.request_id, sent};
  *why = "the DONE of w" + std::to_string(worker) + " waits for " + missing;
  PSLOG(WARN) << "ps" << options_.index << ": " << *why << ": not acknowledged until they arrive";
  return false;
}

bool Membership::settle_done(int worker, std::string* route, uint64_t* request_id) {
  const auto it = waiting_done_.find(worker);
  if (it == waiting_done_.end() || !missing_ops(it->second.sent, received_[static_cast<size_t>(worker)]).empty()) {
    return false;
  }
  *route = it->second.route;
  *request_id = it->second.request_id;
  waiting_done_.erase(it);
  PSLOG(INFO) << "ps" << options_.index << ": every message the DONE of w" << worker << " counts has arrived";
  mark_done(worker);
  return true;
}

std::string Membership::waiting_dones() const {
  std::string text;
  for (const auto& [worker, d] : waiting_done_) {
    text += (text.empty() ? "" : "; ") + std::string("the DONE of w") + std::to_string(worker) + " waits for " +
            missing_ops(d.sent, received_[static_cast<size_t>(worker)]);
  }
  return text;
}

void Membership::mark_done(int worker) {
  if (done_[static_cast<size_t>(worker)]) return;
  done_[static_cast<size_t>(worker)] = true;
  ++num_done_;
  PSLOG(INFO) << "ps" << options_.index << ": worker " << worker << " is done (" << num_done_ << "/"
              << options_.num_workers << ")";
}

}  // namespace pstrain
