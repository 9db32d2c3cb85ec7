// The same-host side channel of the PS transport (docs/wire_protocol.md, "Same host"): Unix
// SOCK_SEQPACKET sockets in Linux's abstract namespace (no file left behind), which carry one
// header-only message per packet, in order, between a worker's thread and the PS's thread with no
// ZeroMQ I/O thread in between. Only peers of the same user are accepted (SO_PEERCRED).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace pstrain {

// Largest packet either side sends or accepts: headers are far smaller.
constexpr size_t kMaxLocalPacket = 64 * 1024;

// An owned socket descriptor (-1: none).
class LocalSocket {
 public:
  LocalSocket() = default;
  explicit LocalSocket(int fd) : fd_(fd) {}
  ~LocalSocket();
  LocalSocket(LocalSocket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  LocalSocket& operator=(LocalSocket&& other) noexcept;
  LocalSocket(const LocalSocket&) = delete;
  LocalSocket& operator=(const LocalSocket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Listens at abstract `name` (without the leading '@'). False, with *why, if it cannot.
bool listen_local(const std::string& name, LocalSocket* out, std::string* why);
// Accepts one pending connection if its peer runs as this process's user; false if none is
// pending. A connection of another user is closed at once (*refused set).
bool accept_local(const LocalSocket& listener, LocalSocket* out, bool* refused);
// Connects to abstract `name`. False, with *why, if nothing listens there.
bool connect_local(const std::string& name, LocalSocket* out, std::string* why);

// *why of send_packet when the peer's queue is full and there was no deadline to wait for room.
extern const char* const kPeerQueueFull;

// Sends one packet, waiting for room until `deadline` (none: fails at once when the peer's queue
// is full, with *why kPeerQueueFull). False, with *why, when it could not be sent (peer gone,
// full past the deadline).
bool send_packet(const LocalSocket& socket, const void* data, size_t len, std::string* why,
                 const std::chrono::steady_clock::time_point* deadline = nullptr);

// A client's packets after the first (its route) are sequenced, so that the server can keep the
// order of everything the client sent it, over the channel and over ZeroMQ (docs/wire_protocol.md,
// "Same host"): 8 bytes, little-endian, the number of ZeroMQ messages the client had sent the
// server since it named itself, then the message's one frame.
constexpr size_t kSequenceBytes = 8;
std::string sequenced_packet(uint64_t zmq_before, const void* data, size_t len);
// The count and the frame of a sequenced packet; false for one shorter than kSequenceBytes.
bool split_sequenced(const std::string& packet, uint64_t* zmq_before, std::string* frame);

enum class PacketResult { kNone, kPacket, kClosed };
// Receives one packet if one is queued (never blocks) into *data (truncated packets keep their
// first kMaxLocalPacket bytes, which then fail to decode). kClosed: the peer is gone.
PacketResult receive_packet(const LocalSocket& socket, std::string* data);

}  // namespace pstrain
