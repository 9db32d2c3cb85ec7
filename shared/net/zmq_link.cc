// The ZeroMQ ring link (shared/net/zmq_transport.h): a PULL socket bound for the left neighbour
// and a PUSH socket connected to the right one, linger 0 while running and bounded high-water
// marks.
#include "shared/net/zmq_transport.h"
#include "shared/net/zmq_util.h"
#include "shared/util/clock.h"
#include "shared/util/error.h"

namespace pstrain {
namespace {

// Messages queued per direction. The ring's data dependencies already bound how far a rank can
// run ahead; this only caps what a fast sender can make its neighbour buffer.
constexpr int kRingHighWaterMark = 8;

class ZmqLink final : public Link {
 public:
  ZmqLink(zmq::context_t& context, const std::string& bind_host, int close_linger_ms, const Security& security)
      : left_(context, zmq::socket_type::pull), right_(context, zmq::socket_type::push), close_linger_ms_(close_linger_ms) {
    for (zmq::socket_t* s : {&left_, &right_}) set_socket_defaults(*s, kRingHighWaterMark);
    security.server(left_);
    security.client(right_);
    address_ = bind_tcp(left_, bind_host, 0, "the ring link");
  }

  // The last messages of the last operation may still sit in ZeroMQ's queue when the owner
  // destroys the link right after the call. Linger 0 would drop them and strand the right
  // neighbour, so the PUSH socket gets a bounded linger; zmq_ctx_term waits at most that long
  // for a neighbour that is gone.
  ~ZmqLink() override {
    if (right_.handle() != nullptr) right_.set(zmq::sockopt::linger, close_linger_ms_);
  }

  const std::string& address() const override { return address_; }

  void connect_right(const std::string& right_address) override {
    try {
      right_.connect("tcp://" + right_address);
    } catch (const zmq::error_t& e) {
      throw Error("cannot connect the ring link to " + right_address + ": " + e.what());
    }
  }

  bool try_send(std::vector<Frame>* frames, Clock::time_point deadline) override {
    // libzmq counts the high-water mark in whole messages: where there is room for the first
    // frame, the rest of the message goes too.
    if ((right_.get(zmq::sockopt::events) & ZMQ_POLLOUT) == 0) return false;
    if (!send(frames, deadline)) throw Error("ring link: multipart send stalled");
    return true;
  }

  bool send(std::vector<Frame>* frames, Clock::time_point deadline) override {
    std::vector<zmq::message_t> out = to_zmq(frames);
    std::string error;
    return send_frames(right_, out, 0, deadline, &error);
  }

  bool try_recv(std::vector<Frame>* frames) override {
    if ((left_.get(zmq::sockopt::events) & ZMQ_POLLIN) == 0) return false;
    recv_multipart(left_, frames);
    return true;
  }

  bool wait(bool want_in, bool want_out, Clock::time_point deadline) override {
    zmq::pollitem_t items[2] = {{left_.handle(), 0, static_cast<short>(want_in ? ZMQ_POLLIN : 0), 0},
                                {right_.handle(), 0, static_cast<short>(want_out ? ZMQ_POLLOUT : 0), 0}};
    return zmq::poll(items, 2, std::chrono::milliseconds(millis_until(deadline))) > 0;
  }

  void set_close_linger(int millis) override { close_linger_ms_ = millis; }
  void close_right() override { right_.close(); }

 private:
  zmq::socket_t left_;
  zmq::socket_t right_;
  std::string address_;
  int close_linger_ms_;
};

}  // namespace

std::unique_ptr<Link> make_zmq_link(zmq::context_t& context, const std::string& bind_host, int close_linger_ms,
                                    const Security& security) {
  return std::make_unique<ZmqLink>(context, bind_host, close_linger_ms, security);
}

}  // namespace pstrain
