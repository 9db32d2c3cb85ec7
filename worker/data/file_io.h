// File helpers of the data readers: positional reads of a read-only file, and cache files that
// appear whole or not at all.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace pstrain {

// strerror's text for an errno value, thread-safe.
std::string errno_text(int err);

// A file opened read-only; reads are pread calls, safe from several threads at once.
class RandomAccessFile {
 public:
  // `name` is what messages call the file (default: path). Throws pstrain::Error
  // "<name>: cannot open: <reason>".
  explicit RandomAccessFile(const std::string& path, std::string name = "");
  ~RandomAccessFile();
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;

  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }  // at open
  // Reads up to len bytes at offset; fewer only at the end of the file. Throws on an I/O error.
  size_t read_some(uint64_t offset, size_t len, void* out) const;
  // Reads exactly len bytes at offset, else throws pstrain::Error naming the file and offset.
  void read_exact(uint64_t offset, size_t len, void* out) const;

 private:
  std::string name_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Writes all of data to fd (retrying short writes); throws pstrain::Error naming `name`.
void write_all(int fd, const void* data, size_t len, const std::string& name);

// The name of a cache file derived from `path`: its base name (less ".gz"), size, mtime (ns)
// and a hash of its absolute location, so a changed or moved source gets a new cache file.
std::string cache_file_name(const std::string& path, const struct stat& st);

// Where a parsed copy of the regular file `path` goes: cache_dir (made if missing) /
// cache_file_name + `suffix` (".pstrain-csv"). Throws pstrain::Error naming the file or the
// directory when `path` cannot be read as a regular file or cache_dir cannot be made.
std::string parsed_cache_path(const std::string& path, const std::string& cache_dir, const std::string& suffix);

// Creates `dst` whole or not at all: `write(fd, name)` fills an unnamed file (O_TMPFILE) in
// dst's directory (`name`: how errors are to call it), which is then synced, linked in and
// renamed into place (processes racing for one cache file each write their own and the last
// rename wins). A process that fails, is stopped or is killed while writing leaves nothing
// behind. Where the file system has no O_TMPFILE, a named temporary file beside dst, removed on
// an exception (a SIGKILL leaves it). Exceptions pass on; throws pstrain::Error when the file
// cannot be created, linked or renamed.
void create_file_atomically(const std::string& dst,
                            const std::function<void(int fd, const std::string& tmp_name)>& write);

// An unnamed read-write scratch file in `dir` (O_TMPFILE; where the file system has none, a
// uniquely named file unlinked at once): it is gone with the descriptor, whatever happens, and
// processes racing on one cache file each get their own. Returns the descriptor (O_CLOEXEC; the
// caller closes it); throws pstrain::Error naming `what` and the errno text.
int open_scratch_file(const std::string& dir, const std::string& what);

}  // namespace pstrain
