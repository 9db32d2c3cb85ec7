// A POSIX shared-memory segment mapped into this process (docs/wire_protocol.md, "Shared memory";
// docs/collective.md, "Same host"): how same-host peers exchange large buffers without copying
// them through sockets. Segments are created mode 0600 (the same user only), fully allocated up
// front (so a full /dev/shm is an error at creation, never a SIGBUS later), and unlinked as soon
// as every peer has mapped them, so a crash leaves nothing behind in /dev/shm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pstrain {

// From now on SIGTERM, SIGINT and SIGHUP first remove the names of the segments this process
// created and has not removed yet, then end the process as they would have: a PS stopped by the
// launcher (a worker failed to start) before its workers mapped its parameter area leaves nothing
// in /dev/shm. For a process without handlers of its own for these signals (the PS); the names
// are kept in a fixed table, at most 8 at a time (more are removed only at exit or unlink()).
void remove_segments_on_termination();
// Removes those names now; async-signal-safe (for a process that handles the signals itself).
void remove_segment_names();

class SharedMemory {
 public:
  SharedMemory() = default;
  ~SharedMemory();
  SharedMemory(SharedMemory&& other) noexcept;
  SharedMemory& operator=(SharedMemory&& other) noexcept;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  // Creates a new segment of `bytes` (zero-filled) under a fresh random name starting with
  // `prefix` (e.g. "pstrain-ar"). False, with the reason in *error, when it cannot.
  static bool create(const std::string& prefix, size_t bytes, SharedMemory* out, std::string* error);
  // Maps the existing segment `name` created by a peer; false (with the reason) when there is no
  // such segment on this host or it is not `bytes` long. `read_only`: mapped without write
  // permission (a write through data() is then a fault, never a change to the creator's data).
  static bool open(const std::string& name, size_t bytes, SharedMemory* out, std::string* error,
                   bool read_only = false);

  // Removes the name (the mapping stays valid). Idempotent; the creator calls it once every peer
  // has opened the segment, and the destructor does if it was not called.
  void unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  bool mapped() const { return data_ != nullptr; }
  bool owns_name() const { return owner_; }  // created here, name not removed yet

 private:
  void release();
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owner_ = false;  // created here and not unlinked yet
  int slot_ = -1;       // its place in the table of remove_segments_on_termination (-1: none)
};

}  // namespace pstrain
