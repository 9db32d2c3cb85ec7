// What tests of launch/launch.sh read of a running job: the processes RUNDIR/cmd.txt names, and
// the chief's progress in RUNDIR/w0.log.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace pstrain::test {

// Processes named in RUNDIR/cmd.txt ("name<TAB>pid<TAB>command" lines); every pid > 0.
std::vector<pid_t> launched_pids(const std::string& run_dir);
// The pid of process `name` (w0, ps1, ...) in RUNDIR/cmd.txt; -1 if it is not there. Never pass
// it to kill() unchecked: kill(-1, sig) signals every process the test may signal (as root, the
// whole machine; a SIGSTOP there once froze every build and test on it). signal_launched does.
pid_t pid_of(const std::string& run_dir, const std::string& name);
// Sends `sig` to process `name` once the launcher has recorded it in RUNDIR/cmd.txt (waiting up
// to 60 s); false, having sent nothing, if it never does or kill() fails.
bool signal_launched(const std::string& run_dir, const std::string& name, int sig);
// Waits until the chief has logged global step `step`; false at once if the launcher exits first
// (its job failed: its log says why).
bool wait_for_step(pid_t launcher, const std::string& run_dir, int step);

}  // namespace pstrain::test
