#include "shared/net/zmq_util.h"

#include <malloc.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "shared/util/clock.h"
#include "shared/util/error.h"

namespace pstrain {

void keep_message_memory() {
#ifdef __GLIBC__
  // Messages up to 32 MiB (glibc's largest threshold; the PS's chunks are 1 MiB by default) come
  // from the heap rather than from an mmap each, and freed memory goes back to the kernel only
  // past 1 GiB at the top of a heap (a thread's arena, at most 64 MiB, then never does). Both are
  // needed: setting either one alone turns off glibc's adaptive threshold, and every message
  // above 128 KiB would then get an mmap of its own.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

void set_socket_defaults(zmq::socket_t& socket, int high_water_mark) {
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndhwm, high_water_mark);
  socket.set(zmq::sockopt::rcvhwm, high_water_mark);
  // A TCP connect that gets no answer (its SYN lost in a partition) is given up after 1 s and
  // tried afresh (ZeroMQ's reconnect interval, 100 ms), not left to the kernel's SYN resends at
  // 1, 3, 7, 15, 31 and 63 s: a peer cut off connects within about a second of the link healing.
  socket.set(zmq::sockopt::connect_timeout, 1000);
}

std::string bind_tcp(zmq::socket_t& socket, const std::string& host, int port, const std::string& what) {
  const std::string endpoint = "tcp://" + host + ":" + (port == 0 ? "*" : std::to_string(port));
  try {
    socket.bind(endpoint);
  } catch (const zmq::error_t& e) {
    throw Error("cannot bind " + what + " on " + endpoint + ": " + e.what());
  }
  const std::string bound = socket.get(zmq::sockopt::last_endpoint);
  return host + bound.substr(bound.rfind(':'));
}

namespace {

// Whether a process accepts connections on the Unix-domain socket file `path`.
bool unix_socket_is_listening(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof address.sun_path) return false;
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool listening = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return listening;
}

}  // namespace

void bind_ipc(zmq::socket_t& socket, const std::string& name, const std::string& what) {
  const std::string endpoint = "ipc://" + name;
  if (name.empty() || name.size() > kMaxIpcName) {
    throw Error("cannot bind " + what + " on " + endpoint + ": the name must have 1 to " +
                std::to_string(kMaxIpcName) + " characters");
  }
  // ZeroMQ replaces an existing socket file, even one a live process still listens on: refuse
  // that here, so a second server with the same path cannot silently steal the first's peers.
  // (Abstract names, '@...', have no file: the kernel itself refuses a name in use.)
  if (name[0] != '@' && unix_socket_is_listening(name)) {
    throw Error("cannot bind " + what + " on " + endpoint + ": another process is serving on that path");
  }
  try {
    socket.bind(endpoint);
  } catch (const zmq::error_t& e) {
    throw Error("cannot bind " + what + " on " + endpoint + ": " + e.what());
  }
}

std::string zmq_endpoint(const std::string& address) {
  return address.rfind("ipc://", 0) == 0 ? address : "tcp://" + address;
}

void recv_multipart(zmq::socket_t& socket, std::vector<zmq::message_t>* frames) {
  frames->clear();
  do {
    zmq::message_t part;
    if (!socket.recv(part, zmq::recv_flags::none)) throw Error("zmq: message vanished mid-receive");
    frames->push_back(std::move(part));
  } while (socket.get(zmq::sockopt::rcvmore));
}

void recv_multipart(zmq::socket_t& socket, std::vector<Frame>* frames) {
  frames->clear();
  do {
    zmq::message_t part;
    if (!socket.recv(part, zmq::recv_flags::none)) throw Error("zmq: message vanished mid-receive");
    frames->push_back(from_zmq(std::move(part)));
  } while (socket.get(zmq::sockopt::rcvmore));
}

namespace {

// Below this many bytes a copy costs less than handing a buffer over (an allocation either way).
constexpr size_t kCopyBelow = 512;

void release_keeper(void*, void* hint) { delete static_cast<std::shared_ptr<const void>*>(hint); }
void release_nothing(void*, void*) {}

}  // namespace

zmq::message_t to_zmq(Frame&& frame) {
  if (frame.size() < kCopyBelow) return zmq::message_t(frame.data(), frame.size());
  // ZeroMQ only reads outgoing bytes; the const_cast is for its C signature.
  void* data = frame.data();
  if (!frame.keeper()) return zmq::message_t(data, frame.size(), &release_nothing, nullptr);
  auto* hint = new std::shared_ptr<const void>(frame.keeper());
  try {
    return zmq::message_t(data, frame.size(), &release_keeper, hint);
  } catch (...) {
    delete hint;
    throw;
  }
}

std::vector<zmq::message_t> to_zmq(std::vector<Frame>* frames, const std::string* route) {
  std::vector<zmq::message_t> out;
  out.reserve(frames->size() + 1);
  if (route != nullptr) out.emplace_back(route->data(), route->size());
  for (Frame& f : *frames) out.push_back(to_zmq(std::move(f)));
  frames->clear();
  return out;
}

Frame from_zmq(zmq::message_t&& message) {
  if (message.size() < kCopyBelow) return Frame(message.data(), message.size());
  auto kept = std::make_shared<zmq::message_t>(std::move(message));
  return Frame(kept, kept->data(), kept->size());
}

bool send_frames(zmq::socket_t& socket, std::vector<zmq::message_t>& frames, size_t first,
                 Clock::time_point deadline, std::string* error) {
  for (size_t i = first; i < frames.size(); ++i) {
    const auto more = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    for (;;) {
      try {
        if (socket.send(frames[i], more | zmq::send_flags::dontwait)) break;
      } catch (const zmq::error_t& e) {
        *error = e.what();
        return false;
      }
      // Queue full (EAGAIN): wait for room, bounded by the deadline.
      zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLOUT, 0};
      const int wait = millis_until(deadline);
      if (wait == 0 || zmq::poll(&item, 1, std::chrono::milliseconds(wait)) == 0) {
        *error = "send timed out (peer not reading)";
        return false;
      }
    }
  }
  return true;
}

bool poll_in(zmq::socket_t& socket, Clock::time_point deadline) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  return zmq::poll(&item, 1, std::chrono::milliseconds(millis_until(deadline))) > 0;
}

}  // namespace pstrain
