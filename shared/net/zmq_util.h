// Small ZeroMQ helpers shared by the PS transport and the ring collective.
#pragma once

#include <cstddef>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "shared/net/transport.h"
#include "shared/util/clock.h"

namespace pstrain {

// The longest ipc:// name the kernel accepts (sockaddr_un's path, less its terminating NUL).
constexpr size_t kMaxIpcName = 107;

// Makes malloc keep the memory of freed ZeroMQ messages for reuse. ZeroMQ allocates every large
// received message with malloc (in its I/O thread) and the application frees it; with glibc's
// defaults that memory goes back to the kernel and the next message faults its pages in again,
// zeroed: one more copy of every received byte, in the kernel. Call once at the start of a
// process, before its first message; a no-op where the C library is not glibc.
void keep_message_memory();

// Linger 0 (a dead peer never blocks shutdown) and bounded queues of `high_water_mark` messages.
void set_socket_defaults(zmq::socket_t& socket, int high_water_mark);

// Binds tcp://host:port (port 0: any free port) and returns "host:port" as bound. Throws
// pstrain::Error naming `what` if the address cannot be bound.
std::string bind_tcp(zmq::socket_t& socket, const std::string& host, int port, const std::string& what);

// Binds ipc://name. Throws pstrain::Error naming `what` if it cannot be bound.
void bind_ipc(zmq::socket_t& socket, const std::string& name, const std::string& what);

// ZeroMQ endpoint of a peer address: "ipc://NAME" as is, "host:port" as tcp://host:port.
std::string zmq_endpoint(const std::string& address);

// Receives every frame of one multipart message that is known to be ready.
void recv_multipart(zmq::socket_t& socket, std::vector<zmq::message_t>* frames);
void recv_multipart(zmq::socket_t& socket, std::vector<Frame>* frames);

// Between the transport's frames and ZeroMQ's messages. A small frame is copied (ZeroMQ copies
// small messages anyway); a large one changes hands without a copy: a received message becomes
// the frame's keeper, and a frame to send lends ZeroMQ its bytes, its keeper held until ZeroMQ is
// done with them (a view is not held: its owner keeps it unchanged, see Frame::view).
zmq::message_t to_zmq(Frame&& frame);
// A message's frames, `route` first where given (a ROUTER's routing id); the frames are consumed.
std::vector<zmq::message_t> to_zmq(std::vector<Frame>* frames, const std::string* route = nullptr);
Frame from_zmq(zmq::message_t&& message);

// Sends frames[first..] as the rest of one multipart message, waiting for queue space until
// `deadline`; false, with the reason in *error, at the deadline or when ZeroMQ refuses (a ROUTER
// reports a peer it cannot route to).
bool send_frames(zmq::socket_t& socket, std::vector<zmq::message_t>& frames, size_t first,
                 Clock::time_point deadline, std::string* error);

// Waits until a message can be received, or `deadline`; true if one can.
bool poll_in(zmq::socket_t& socket, Clock::time_point deadline);

}  // namespace pstrain
