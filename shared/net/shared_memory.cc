#include "shared/net/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <random>
#include <utility>

namespace pstrain {
namespace {

// Names of segments created here and not yet removed, as /dev/shm paths for the signal handler
// (unlink is async-signal-safe; shm_unlink is not on that list). The handler may run on any
// thread (OpenBLAS's, ZeroMQ's), so every byte is an atomic (lock-free, so signal-safe too):
// `used` hands slots out, `ready` says a slot's path is whole; the handler copies a ready path
// and unlinks the copy.
constexpr size_t kSlots = 8, kPathBytes = 256;
std::atomic<char> g_paths[kSlots][kPathBytes];
std::atomic<bool> g_used[kSlots];
std::atomic<bool> g_ready[kSlots];

int remember(const std::string& name) {
  const std::string path = "/dev/shm" + name;
  if (path.size() >= kPathBytes) return -1;
  for (size_t i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_used[i].compare_exchange_strong(expected, true)) continue;
    for (size_t j = 0; j <= path.size(); ++j) g_paths[i][j].store(path.c_str()[j], std::memory_order_relaxed);
    g_ready[i].store(true, std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

void forget(int slot) {
  if (slot < 0) return;
  g_ready[slot].store(false, std::memory_order_release);
  g_used[slot].store(false, std::memory_order_release);
}

void unlink_all() {
  for (size_t i = 0; i < kSlots; ++i) {
    if (!g_ready[i].load(std::memory_order_acquire)) continue;
    char path[kPathBytes];
    for (size_t j = 0; j < kPathBytes; ++j) {
      path[j] = g_paths[i][j].load(std::memory_order_relaxed);
      if (path[j] == '\0') break;
    }
    path[kPathBytes - 1] = '\0';
    ::unlink(path);
  }
}

void remove_and_die(int signal) {
  unlink_all();
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

std::string random_suffix() {
  std::random_device device;
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 4; ++i) {
    uint32_t v = device();
    for (int j = 0; j < 8; ++j, v >>= 4) s += kHex[v & 15];
  }
  return s;
}

bool map(int fd, size_t bytes, bool read_only, void** data, std::string* error) {
  void* p = mmap(nullptr, bytes, read_only ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *error = std::string("mmap: ") + std::strerror(errno);
    return false;
  }
  *data = p;
  return true;
}

}  // namespace

void remove_segment_names() { unlink_all(); }

void remove_segments_on_termination() {
  struct sigaction action {};
  action.sa_handler = remove_and_die;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGTERM, SIGINT, SIGHUP}) sigaction(signal, &action, nullptr);
}

SharedMemory::~SharedMemory() { release(); }

SharedMemory::SharedMemory(SharedMemory&& other) noexcept { *this = std::move(other); }

SharedMemory& SharedMemory::operator=(SharedMemory&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    name_ = std::move(other.name_);
    owner_ = std::exchange(other.owner_, false);
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}

void SharedMemory::release() {
  unlink();
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

void SharedMemory::unlink() {
  if (owner_) shm_unlink(name_.c_str());
  owner_ = false;
  forget(slot_);
  slot_ = -1;
}

bool SharedMemory::create(const std::string& prefix, size_t bytes, SharedMemory* out, std::string* error) {
  const std::string name = "/" + prefix + "-" + std::to_string(getpid()) + "-" + random_suffix();
  // The name is remembered before it exists, so a signal at any point from here on removes it
  // (unlinking a name not yet made is harmless); forgotten again on every failure below.
  const int slot = remember(name);
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "shm_open(" + name + "): " + std::strerror(errno);
    forget(slot);
    return false;
  }
  // posix_fallocate reserves the pages: a /dev/shm too small fails here, not with SIGBUS later.
  int rc = ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
  if (rc == 0) rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  void* data = nullptr;
  const bool ok = rc == 0 && map(fd, bytes, false, &data, error);
  if (rc != 0) *error = "allocating " + std::to_string(bytes) + " bytes in " + name + ": " + std::strerror(rc);
  close(fd);
  if (!ok) {
    shm_unlink(name.c_str());
    forget(slot);
    return false;
  }
  SharedMemory m;
  m.data_ = data;
  m.size_ = bytes;
  m.name_ = name;
  m.owner_ = true;
  m.slot_ = slot;
  *out = std::move(m);
  return true;
}

bool SharedMemory::open(const std::string& name, size_t bytes, SharedMemory* out, std::string* error,
                        bool read_only) {
  const int fd = shm_open(name.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC, 0);
  if (fd < 0) {
    *error = "shm_open(" + name + "): " + std::strerror(errno);
    return false;
  }
  struct stat st{};
  void* data = nullptr;
  bool ok = fstat(fd, &st) == 0;
  if (!ok) {
    *error = std::string("fstat: ") + std::strerror(errno);
  } else if (static_cast<size_t>(st.st_size) != bytes) {
    *error = name + " holds " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(bytes);
    ok = false;
  } else {
    ok = map(fd, bytes, read_only, &data, error);
  }
  close(fd);
  if (!ok) return false;
  SharedMemory m;
  m.data_ = data;
  m.size_ = bytes;
  m.name_ = name;
  *out = std::move(m);
  return true;
}

}  // namespace pstrain
