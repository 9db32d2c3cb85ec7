#include "worker/collective/ring_link.h"
#include "shared/net/zmq_util.h"

#include <condition_variable>
#include <mutex>

#include "shared/util/error.h"

namespace pstrain {
namespace {

// Messages queued per direction. The ring's data dependencies already bound how far a rank can
// run ahead; this only caps what a fast sender can make its neighbour buffer.
constexpr int kRingHighWaterMark = 8;

bool send_rest(zmq::socket_t& socket, std::vector<zmq::message_t>& frames, size_t first,
               Clock::time_point deadline) {
  for (size_t i = first; i < frames.size(); ++i) {
    const auto more = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    while (!socket.send(frames[i], more | zmq::send_flags::dontwait)) {
      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLOUT, 0};
      const int wait = millis_until(deadline);
      if (wait == 0 || zmq::poll(&item, 1, std::chrono::milliseconds(wait)) == 0) return false;
    }
  }
  return true;
}

}  // namespace

struct RingLink::Loans {
  std::mutex mutex;
  std::condition_variable returned;
  size_t outstanding = 0;

  // ZeroMQ's free callback, called once per borrowed frame from whichever thread drops the last
  // reference (usually its I/O thread, after the bytes were written to the kernel).
  static void give_back(void*, void* hint) {
    auto* self = static_cast<std::shared_ptr<Loans>*>(hint);
    {
      std::lock_guard<std::mutex> lock((*self)->mutex);
      --(*self)->outstanding;
    }
    (*self)->returned.notify_all();
    delete self;
  }
};

RingLink::RingLink(zmq::context_t& context, const std::string& bind_host, int close_linger_ms,
                   const Security& security)
    : loans_(std::make_shared<Loans>()),
      left_(context, zmq::socket_type::pull),
      right_(context, zmq::socket_type::push),
      close_linger_ms_(close_linger_ms) {
  for (zmq::socket_t* s : {&left_, &right_}) set_socket_defaults(*s, kRingHighWaterMark);
  security.server(left_);
  security.client(right_);
  address_ = bind_tcp(left_, bind_host, 0, "the ring link");
}

// The last messages of the last operation may still sit in ZeroMQ's queue when the owner
// destroys the link right after the call (they are copies: borrowed frames were returned before
// that call returned). Linger 0 would drop them and strand the right neighbour, so the PUSH socket
// gets a bounded linger; zmq_ctx_term waits at most that long for a neighbour that is gone.
RingLink::~RingLink() {
  if (right_.handle() != nullptr) right_.set(zmq::sockopt::linger, close_linger_ms_);
}

void RingLink::connect_right(const std::string& right_address) {
  try {
    right_.connect("tcp://" + right_address);
  } catch (const zmq::error_t& e) {
    throw Error("cannot connect the ring link to " + right_address + ": " + e.what());
  }
}

bool RingLink::try_send(std::vector<zmq::message_t>* frames, Clock::time_point deadline) {
  const auto more = frames->size() > 1 ? zmq::send_flags::sndmore : zmq::send_flags::none;
  if (!right_.send(frames->front(), more | zmq::send_flags::dontwait)) return false;
  // libzmq counts the high-water mark in whole messages: once the first frame is queued, the
  // rest of the message is too.
  if (!send_rest(right_, *frames, 1, deadline)) throw Error("ring link: multipart send stalled");
  return true;
}

bool RingLink::send(std::vector<zmq::message_t>* frames, Clock::time_point deadline) {
  return send_rest(right_, *frames, 0, deadline);
}

bool RingLink::try_recv(std::vector<zmq::message_t>* frames) {
  frames->clear();
  zmq::message_t part;
  if (!left_.recv(part, zmq::recv_flags::dontwait)) return false;
  frames->push_back(std::move(part));
  while (left_.get(zmq::sockopt::rcvmore)) {
    if (!left_.recv(part, zmq::recv_flags::none)) throw Error("ring link: message vanished mid-receive");
    frames->push_back(std::move(part));
  }
  return true;
}

bool RingLink::wait(bool want_in, bool want_out, Clock::time_point deadline) {
  zmq::pollitem_t items[2] = {{left_.handle(), 0, static_cast<short>(want_in ? ZMQ_POLLIN : 0), 0},
                              {right_.handle(), 0, static_cast<short>(want_out ? ZMQ_POLLOUT : 0), 0}};
  return zmq::poll(items, 2, std::chrono::milliseconds(millis_until(deadline))) > 0;
}

zmq::message_t RingLink::borrow(const void* data, size_t bytes) {
  if (bytes == 0) return zmq::message_t();
  auto* hint = new std::shared_ptr<Loans>(loans_);
  {
    std::lock_guard<std::mutex> lock(loans_->mutex);
    ++loans_->outstanding;
  }
  try {
    // ZeroMQ only reads outgoing frames; the const_cast is for its C signature.
    return zmq::message_t(const_cast<void*>(data), bytes, &Loans::give_back, hint);
  } catch (...) {
    Loans::give_back(nullptr, hint);
    throw;
  }
}

size_t RingLink::borrowed() const {
  std::lock_guard<std::mutex> lock(loans_->mutex);
  return loans_->outstanding;
}

bool RingLink::wait_returned(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(loans_->mutex);
  return loans_->returned.wait_until(lock, deadline, [&] { return loans_->outstanding == 0; });
}

void RingLink::close_right() { right_.close(); }

}  // namespace pstrain
