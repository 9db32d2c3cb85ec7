#include "ps/server.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "shared/error.h"
#include "shared/log.h"

namespace pstrain {
namespace {

std::string printable(const std::string& route) {
  std::ostringstream os;
  os << "peer 0x";
  const char* hex = "0123456789abcdef";
  for (unsigned char c : route) os << hex[c >> 4] << hex[c & 15];
  return os.str();
}

constexpr double kCloseSeconds = 5;

bool all_finite(const float* data, size_t n) {
  float acc = 0.0f;
  for (size_t i = 0; i < n; ++i) acc += data[i] * 0.0f;  // NaN or inf anywhere makes acc NaN
  return acc == 0.0f;
}

}  // namespace

ParameterServer::ParameterServer(const JobOptions& options, Endpoint& endpoint)
    : options_(options),
      endpoint_(endpoint),
      policy_(make_policy(options.mode, options.num_workers)),
      route_of_worker_(static_cast<size_t>(options.num_workers)),
      done_(static_cast<size_t>(options.num_workers), false) {}

void ParameterServer::serve() {
  PSLOG(INFO) << "ps" << options_.index << ": serving at " << endpoint_.address() << ", mode "
              << options_.mode << ", " << options_.num_workers << " worker(s), optimizer "
              << options_.optimizer.kind << " lr " << options_.optimizer.lr;
  last_stall_report_ = Clock::now();
  Message msg;
  while (num_done_ < options_.num_workers) {
    const auto tick = deadline_after(std::min(1.0, options_.stall_report_s));
    if (endpoint_.recv(&msg, tick)) handle(msg);
    report_stall();
  }
  PSLOG(INFO) << "ps" << options_.index << ": all " << options_.num_workers
              << " workers done at version " << version_ << "; exiting";
  endpoint_.close(deadline_after(kCloseSeconds));  // lets the last DONE acknowledgement leave
}

void ParameterServer::handle(Message& msg) {
  Header h;
  std::string error;
  if (msg.frames.empty() ||
      !decode_header(msg.frames[0].data(), msg.frames[0].size(), &h, &error)) {
    return reject(msg.route, 0, error.empty() ? "empty message" : error);
  }
  const size_t payload = msg.frames.size() > 1 ? msg.frames[1].size() : 0;
  if (!check_frames(h, msg.frames.size(), payload, &error)) return reject(msg.route, h.request_id, error);
  if (h.role != SenderRole::kWorker) return reject(msg.route, h.request_id, "only workers talk to a PS");
  if (h.op == Op::kHello) return on_hello(msg, h);

  const auto it = worker_of_route_.find(msg.route);
  if (it == worker_of_route_.end()) {
    return reject(msg.route, h.request_id, std::string(op_name(h.op)) + " from a peer that never said HELLO");
  }
  if (it->second != static_cast<int>(h.sender)) {
    return reject(msg.route, h.request_id, "sender " + std::to_string(h.sender) +
                                               " does not match registered worker " + std::to_string(it->second));
  }
  bool ok = true;
  switch (h.op) {
    case Op::kInit: ok = on_init(msg, h, &error); break;
    case Op::kPush: ok = on_push(msg, h, &error); break;
    case Op::kPull: ok = on_pull(msg, h, &error); break;
    case Op::kDone: on_done(msg, h); break;
    default: ok = false; error = std::string(op_name(h.op)) + " is not a request"; break;
  }
  if (!ok) reject(msg.route, h.request_id, error);
}

void ParameterServer::on_hello(const Message& msg, const Header& h) {
  const auto fail = [&](const std::string& why) { reject(msg.route, h.request_id, why); };
  if (h.num_workers != static_cast<uint32_t>(options_.num_workers)) {
    return fail("worker thinks there are " + std::to_string(h.num_workers) + " workers; this PS has " +
                std::to_string(options_.num_workers));
  }
  if (h.sender >= static_cast<uint32_t>(options_.num_workers)) return fail("worker index out of range");
  if (h.total == 0 || (total_ != 0 && h.total != total_)) {
    return fail("model of " + std::to_string(h.total) + " parameters does not match " + std::to_string(total_));
  }
  if (total_ != 0 && h.step != total_steps_) {
    return fail("job of " + std::to_string(h.step) + " steps does not match the other workers' " +
                std::to_string(total_steps_));
  }
  const auto known = worker_of_route_.find(msg.route);
  std::string& owner = route_of_worker_[h.sender];
  if ((known != worker_of_route_.end() && known->second != static_cast<int>(h.sender)) ||
      (!owner.empty() && owner != msg.route)) {
    return fail("worker " + std::to_string(h.sender) + " is already registered from another peer");
  }
  if (total_ == 0) {
    total_ = h.total;
    total_steps_ = h.step;
    slice_ = balance_slices(total_, options_.num_ps)[static_cast<size_t>(options_.index)];
    params_.assign(slice_.length, 0.0f);
    accum_.assign(slice_.length, 0.0f);
    optimizer_ = make_optimizer(options_.optimizer, slice_.length);
    PSLOG(INFO) << "ps" << options_.index << ": model has " << total_ << " parameters; this shard holds ["
                << slice_.offset << ", " << slice_.end() << ") = " << slice_.length * sizeof(float) / 1024.0
                << " KiB";
  }
  if (owner.empty()) PSLOG(INFO) << "ps" << options_.index << ": worker " << h.sender << " registered";
  owner = msg.route;
  worker_of_route_[msg.route] = static_cast<int>(h.sender);
  Header welcome;
  welcome.op = Op::kWelcome;
  welcome.request_id = h.request_id;
  welcome.step = version_;
  welcome.offset = slice_.offset;
  welcome.length = slice_.length;
  welcome.total = total_;
  reply(msg.route, welcome, nullptr);
}

bool ParameterServer::check_slice(const Header& h, std::string* error) const {
  if (h.offset != slice_.offset || h.length != slice_.length) {
    *error = "slice [" + std::to_string(h.offset) + ", +" + std::to_string(h.length) +
             ") is not this shard's [" + std::to_string(slice_.offset) + ", +" +
             std::to_string(slice_.length) + ")";
    return false;
  }
  return true;
}

bool ParameterServer::on_init(const Message& msg, const Header& h, std::string* error) {
  if (h.sender != 0) return (*error = "only the chief (worker 0) initialises parameters", false);
  if (initialized_) return (*error = "parameters are already initialised", false);
  if (!check_slice(h, error)) return false;
  const float* values = msg.frames[1].data<float>();
  if (!all_finite(values, slice_.length)) return (*error = "initial values are not all finite", false);
  std::memcpy(params_.data(), values, slice_.length * sizeof(float));
  initialized_ = true;
  answer_parked();
  return true;
}

bool ParameterServer::on_push(const Message& msg, const Header& h, std::string* error) {
  if (!initialized_) return (*error = "push before the parameters were initialised", false);
  if (!check_slice(h, error)) return false;
  const int worker = static_cast<int>(h.sender);
  *error = policy_->check_push(worker, h.step, version_);
  if (!error->empty()) return false;
  if (h.samples == 0) return (*error = "push with zero samples", false);
  const float* grad = msg.frames[1].data<float>();
  if (!all_finite(grad, slice_.length)) return (*error = "gradient is not all finite", false);

  const bool first = policy_->missing().empty();
  if (first) waiting_since_ = Clock::now();
  float* acc = accum_.data();
  if (first) {
    std::memcpy(acc, grad, slice_.length * sizeof(float));
  } else {
    for (size_t i = 0; i < slice_.length; ++i) acc[i] += grad[i];
  }
  accum_samples_ = (first ? 0 : accum_samples_) + h.samples;
  accum_loss_ = (first ? 0 : accum_loss_) + h.loss_sum;
  accum_correct_ = (first ? 0 : accum_correct_) + h.correct;
  if (policy_->record_push(worker)) apply_update();
  return true;
}

void ParameterServer::apply_update() {
  optimizer_->apply(params_.data(), accum_.data(), 1.0f / static_cast<float>(accum_samples_),
                    scheduled_lr(options_.optimizer, version_, total_steps_));
  ++version_;
  last_samples_ = accum_samples_;
  last_loss_ = accum_loss_;
  last_correct_ = accum_correct_;
  policy_->applied();
  answer_parked();
}

bool ParameterServer::on_pull(const Message& msg, const Header& h, std::string* error) {
  if (total_ == 0) return (*error = "pull before HELLO", false);
  PullVerdict verdict = policy_->check_pull(h.step, version_);
  if (!initialized_ && verdict == PullVerdict::kAnswerNow) verdict = PullVerdict::kPark;  // wait for INIT
  if (verdict == PullVerdict::kReject) {
    *error = "pull for version " + std::to_string(h.step) + " while at version " + std::to_string(version_);
    return false;
  }
  if (verdict == PullVerdict::kPark) {
    parked_.push_back(Parked{msg.route, h.request_id, h.step});
  } else {
    send_params(msg.route, h.request_id);
  }
  return true;
}

void ParameterServer::answer_parked() {
  std::vector<Parked> still;
  for (const Parked& p : parked_) {
    if (initialized_ && policy_->check_pull(p.want, version_) == PullVerdict::kAnswerNow) {
      send_params(p.route, p.request_id);
    } else {
      still.push_back(p);
    }
  }
  parked_.swap(still);
}

void ParameterServer::on_done(const Message& msg, const Header& h) {
  if (!done_[h.sender]) {
    done_[h.sender] = true;
    ++num_done_;
    PSLOG(INFO) << "ps" << options_.index << ": worker " << h.sender << " is done (" << num_done_ << "/"
                << options_.num_workers << ")";
  }
  Header ack;
  ack.op = Op::kDone;
  ack.request_id = h.request_id;
  reply(msg.route, ack, nullptr);
}

void ParameterServer::send_params(const std::string& route, uint64_t request_id) {
  Header h;
  h.op = Op::kParams;
  h.request_id = request_id;
  h.step = version_;
  h.offset = slice_.offset;
  h.length = slice_.length;
  h.samples = last_samples_;
  h.loss_sum = last_loss_;
  h.correct = last_correct_;
  reply(route, h, params_.data());
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

void ParameterServer::reply(const std::string& route, Header h, const float* payload) {
  h.role = SenderRole::kPs;
  h.sender = static_cast<uint32_t>(options_.index);
  Message out;
  out.route = route;
  const std::string header = encode_header(h);
  out.frames.emplace_back(header.data(), header.size());
  if (payload != nullptr) out.frames.emplace_back(payload, h.length * sizeof(float));
  // One try, no waiting: a peer whose queue is full is not reading, and the PS's one thread must
  // not block on it while the other workers wait.
  std::string error;
  if (!endpoint_.send(std::move(out), Clock::now(), &error)) {
    PSLOG(WARN) << "ps" << options_.index << ": dropped a reply to " << printable(route) << ": " << error;
  }
}

void ParameterServer::report_stall() {
  const auto now = Clock::now();
  const auto threshold = std::chrono::duration<double>(options_.stall_report_s);
  if (now - last_stall_report_ < threshold) return;
  std::vector<int> missing = policy_->missing();
  std::ostringstream os;
  os << "ps" << options_.index << ": stall: ";
  if (!missing.empty()) {
    if (now - waiting_since_ < threshold) return;
    os << "barrier of step " << version_ << " has waited "
       << std::chrono::duration<double>(now - waiting_since_).count() << " s for worker(s)";
  } else {
    for (int i = 0; i < options_.num_workers; ++i) {
      if (route_of_worker_[static_cast<size_t>(i)].empty()) missing.push_back(i);
    }
    if (missing.empty()) return;
    os << "still waiting for worker(s) to register:";
  }
  for (int w : missing) os << " " << w;
  PSLOG(WARN) << os.str();
  last_stall_report_ = now;
}

}  // namespace pstrain
