// Small file helpers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pstrain {

// Where bytes of a file being written go, in pieces (a table's bytes, a checkpoint's shard file):
// a string, or a file on disk written as they come, so that a save holds no second copy.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void append(const void* data, size_t n) = 0;
};

class StringSink final : public ByteSink {
 public:
  explicit StringSink(std::string* out) : out_(out) {}
  void append(const void* data, size_t n) override { out_->append(static_cast<const char*>(data), n); }

 private:
  std::string* const out_;
};

// A file written in pieces to PATH.tmp through a bounded buffer, renamed over PATH by commit(),
// so a reader sees the old content or the whole new one. `durable`: the file is fsync'ed before
// the rename and its directory after it, so after a crash PATH holds the old or the new content,
// whole. A failed write (disk full, no permission, a directory at PATH), or a writer destroyed
// without commit() (an exception on the way), removes PATH.tmp and leaves PATH untouched; every
// error (pstrain::Error) names the file and the errno text.
class FileWriter final : public ByteSink {
 public:
  FileWriter(std::string path, bool durable);
  ~FileWriter() override;
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void append(const void* data, size_t n) override;
  void commit();
  uint64_t bytes() const { return bytes_; }  // appended so far

 private:
  void flush();
  void wrote(size_t n);
  [[noreturn]] void fail(const std::string& what);

  const std::string path_, tmp_;
  const bool durable_;
  int fd_ = -1;
  std::string buffer_;
  uint64_t bytes_ = 0;
  uint64_t in_file_ = 0, started_ = 0, synced_ = 0;  // durable: written, sent to the disk, on it
};


// Writes `content` to a temporary file beside `path`, then renames it over `path`, so a reader
// sees either nothing or the whole content. Throws pstrain::Error naming the file and the errno
// text; the temporary file is removed then.
void write_file_atomically(const std::string& path, const std::string& content);

// The same, and durable: the temporary file is fsync'ed before the rename and the directory
// after it, so after a crash `path` holds the old or the new content, whole. On failure (disk
// full, unwritable directory) the temporary file is removed, `path` is untouched, and
// pstrain::Error says what failed and why.
void write_file_durably(const std::string& path, const std::string& content);

// Reads a whole file; false with *error ("cannot open: No such file or directory") otherwise.
bool read_whole_file(const std::string& path, std::string* out, std::string* error);

// Peak resident memory of this process in KiB (VmHWM of /proc/self/status), 0 where /proc is
// unavailable. Every process prints it on its last line.
long peak_rss_kib();
// Resident memory now in KiB (VmRSS), 0 where /proc is unavailable.
long rss_kib();

// This process's CPU time and context switches so far, all threads (getrusage), as the last
// line's text: "cpu_s=1.234 (user 1.100 + sys 0.134) switches=900+12" (voluntary, the waits,
// + involuntary, the preemptions). A sync job's cost beyond its compute shows here.
std::string cpu_usage_text();

}  // namespace pstrain
