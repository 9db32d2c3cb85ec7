// Receiving whole multipart ZeroMQ messages in the tests that speak the PS protocol by hand.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <zmq.hpp>

namespace pstrain::test {

using Frames = std::vector<std::string>;

// The frames of the next message on `socket`; empty (a message has at least one frame) when none
// arrives within `wait`.
inline Frames receive_frames(zmq::socket_t& socket, std::chrono::milliseconds wait) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  Frames frames;
  if (zmq::poll(&item, 1, wait) == 0) return frames;
  do {
    zmq::message_t part;
    if (!socket.recv(part, zmq::recv_flags::none)) break;
    frames.push_back(part.to_string());
  } while (socket.get(zmq::sockopt::rcvmore));
  return frames;
}

}  // namespace pstrain::test
