#include "worker/backend/cpu_binding.h"

#include <pthread.h>
#include <sched.h>

#include <string>

namespace pstrain {
namespace {

// "0-3,6" of a mask, for the error message.
std::string cpu_list(const cpu_set_t& set) {
  std::string out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    out += (out.empty() ? "" : ",") + std::to_string(cpu) + (last > cpu ? "-" + std::to_string(last) : "");
    cpu = last;
  }
  return out;
}

}  // namespace

bool may_run_on(int cpu, std::string* error) {
  cpu_set_t current;
  CPU_ZERO(&current);
  if (pthread_getaffinity_np(pthread_self(), sizeof current, &current) != 0) {
    *error = "--bind-cpu " + std::to_string(cpu) + ": cannot read this thread's CPUs";
    return false;
  }
  if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &current)) {
    *error = "--bind-cpu " + std::to_string(cpu) + ": this process may run on CPU(s) " + cpu_list(current) + " only";
    return false;
  }
  return true;
}

bool bind_this_thread(int cpu, std::string* error) {
  if (!may_run_on(cpu, error)) return false;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0) {
    *error = "--bind-cpu " + std::to_string(cpu) + ": the system refused the binding";
    return false;
  }
  return true;
}

}  // namespace pstrain
