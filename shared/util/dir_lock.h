// One job per directory (docs/operations.md, "One job per directory"): the process that writes a
// job's files into a directory holds an exclusive lock on a file in it for its whole life, so a
// second job pointed at the same directory is refused at once, naming the holder, instead of
// overwriting the first one's files. The chief locks --checkpoint-dir; launch.sh locks its run
// directory (.pstrain-run.lock, the same format, from Python).
//
// The lock is flock(2): the kernel drops it when the holder exits, however it dies (SIGKILL
// included), so a lock is never stale and a restarted process of the same job takes it again.
#pragma once

#include <string>

namespace pstrain {

class DirLock {
 public:
  DirLock() = default;
  // Creates `dir` (and its parents) when missing, then locks DIR/`file` without waiting and
  // writes "pid P on host H: HOLDER, since TIME" into it. Throws pstrain::UsageError when another
  // process holds it ("--checkpoint-dir: DIR is in use by another job: pid 4242 on host h1: w0
  // ..."), and pstrain::Error when the directory or the file cannot be made (the path and errno):
  // a directory the job cannot write is found before the first step, not at the first
  // checkpoint. `flag` names the directory's flag in errors; `holder` says who holds the lock.
  DirLock(const std::string& dir, const std::string& file, const std::string& flag, const std::string& holder);
  ~DirLock();
  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Checks that `dir` can be made (with its parents) and a file made in it, and leaves the file
// system as it was; throws pstrain::Error naming `flag`, the path and errno otherwise
// (--save-params before the first step).
void check_writable_dir(const std::string& dir, const std::string& flag);

}  // namespace pstrain
