#include "shared/net/local_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <system_error>

namespace pstrain {
namespace {

std::string errno_message(int err) { return std::error_code(err, std::generic_category()).message(); }

// The abstract address of `name`: sun_path[0] is 0, the name follows (no terminator).
bool abstract_address(const std::string& name, sockaddr_un* addr, socklen_t* len, std::string* why) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof addr->sun_path) {
    *why = "local channel name '" + name + "' is empty or too long";
    return false;
  }
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return true;
}

int new_socket(std::string* why) {
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) *why = "socket: " + errno_message(errno);
  return fd;
}

}  // namespace

const char* const kPeerQueueFull = "peer's queue is full";

LocalSocket::~LocalSocket() {
  if (fd_ >= 0) ::close(fd_);
}

LocalSocket& LocalSocket::operator=(LocalSocket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

bool listen_local(const std::string& name, LocalSocket* out, std::string* why) {
  sockaddr_un addr{};
  socklen_t len = 0;
  if (!abstract_address(name, &addr, &len, why)) return false;
  LocalSocket socket(new_socket(why));
  if (!socket.valid()) return false;
  if (::bind(socket.fd(), reinterpret_cast<const sockaddr*>(&addr), len) != 0 || ::listen(socket.fd(), 64) != 0) {
    *why = "cannot listen at @" + name + ": " + errno_message(errno);
    return false;
  }
  *out = std::move(socket);
  return true;
}

bool accept_local(const LocalSocket& listener, LocalSocket* out, bool* refused) {
  *refused = false;
  for (;;) {
    LocalSocket peer(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!peer.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return false;  // EAGAIN: none pending (or out of descriptors: the peer keeps ZeroMQ)
    }
    ucred cred{};
    socklen_t cred_len = sizeof cred;
    if (::getsockopt(peer.fd(), SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0 || cred.uid != ::getuid()) {
      *refused = true;
      return false;
    }
    *out = std::move(peer);
    return true;
  }
}

bool connect_local(const std::string& name, LocalSocket* out, std::string* why) {
  sockaddr_un addr{};
  socklen_t len = 0;
  if (!abstract_address(name, &addr, &len, why)) return false;
  LocalSocket socket(new_socket(why));
  if (!socket.valid()) return false;
  // A local SEQPACKET connect completes at once or fails (EAGAIN: the listener's backlog is full).
  if (::connect(socket.fd(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    *why = "cannot connect to @" + name + ": " + errno_message(errno);
    return false;
  }
  *out = std::move(socket);
  return true;
}

bool send_packet(const LocalSocket& socket, const void* data, size_t len, std::string* why,
                 const std::chrono::steady_clock::time_point* deadline) {
  for (;;) {
    const ssize_t n = ::send(socket.fd(), data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return true;  // a packet goes whole or not at all
    if (errno == EINTR) continue;
    if (errno != EAGAIN || deadline == nullptr) {
      *why = errno == EAGAIN ? kPeerQueueFull : "send: " + errno_message(errno);
      return false;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      *why = "send timed out (peer not reading)";
      return false;
    }
    pollfd p{socket.fd(), POLLOUT, 0};
    ::poll(&p, 1, left.count() > INT_MAX ? INT_MAX : static_cast<int>(left.count()));
  }
}

std::string sequenced_packet(uint64_t zmq_before, const void* data, size_t len) {
  std::string packet(kSequenceBytes + len, '\0');
  for (size_t i = 0; i < kSequenceBytes; ++i) packet[i] = static_cast<char>((zmq_before >> (8 * i)) & 0xff);
  if (len > 0) std::memcpy(&packet[kSequenceBytes], data, len);
  return packet;
}

bool split_sequenced(const std::string& packet, uint64_t* zmq_before, std::string* frame) {
  if (packet.size() < kSequenceBytes) return false;
  *zmq_before = 0;
  for (size_t i = 0; i < kSequenceBytes; ++i) {
    *zmq_before |= static_cast<uint64_t>(static_cast<unsigned char>(packet[i])) << (8 * i);
  }
  frame->assign(packet, kSequenceBytes, std::string::npos);
  return true;
}

PacketResult receive_packet(const LocalSocket& socket, std::string* data) {
  thread_local char buffer[kMaxLocalPacket];
  for (;;) {
    const ssize_t n = ::recv(socket.fd(), buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) {
      data->assign(buffer, static_cast<size_t>(n));
      return PacketResult::kPacket;
    }
    if (n == 0) return PacketResult::kClosed;  // orderly shutdown (an empty packet is never sent)
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return PacketResult::kNone;
    return PacketResult::kClosed;
  }
}

}  // namespace pstrain
