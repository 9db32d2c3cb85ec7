// Small file helpers.
#pragma once

#include <string>

namespace pstrain {

// Writes `content` to a temporary file beside `path`, then renames it over `path`, so a reader
// sees either nothing or the whole content. Throws pstrain::Error.
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
