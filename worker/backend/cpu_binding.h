// --bind-cpu: a worker's training thread on one CPU of its own. Two workers sharing a host
// otherwise spend long stretches on one core together, each at half speed: the scheduler places
// a woken thread near the thread that woke it, and the PS (or the ring) wakes both workers at
// once (bench/README.md, "CPU binding"). The threads started before the binding (ZeroMQ's I/O
// threads, --threads' helpers) keep the process's CPUs; those the training thread starts after
// it (the data reader) inherit its CPU: the reader runs while the trainer waits for the
// exchange (Exchange::set_idle_hook), so the two do not compete, and it no longer preempts the
// other worker on its core.
#pragma once

#include <string>

namespace pstrain {

// Whether the calling thread may run on `cpu`; false with *error naming the CPUs it may use.
bool may_run_on(int cpu, std::string* error);

// Binds the calling thread to `cpu`; false with *error when the process may not run there (its
// affinity mask, e.g. taskset or a cgroup's cpuset, does not hold it).
bool bind_this_thread(int cpu, std::string* error);

}  // namespace pstrain
