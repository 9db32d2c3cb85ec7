// worker/backend/cpu_binding.h: --bind-cpu puts the calling thread, and the threads it starts afterwards,
// on one CPU; a CPU the process may not use is refused with the ones it may. And through a
// worker: such a --bind-cpu is a usage error before the worker does anything else.
#include "worker/backend/cpu_binding.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <future>
#include <string>
#include <thread>
#include <vector>

#include "test_util/build_paths.h"
#include "test_util/idx_writer.h"
#include "test_util/process.h"

namespace pstrain {
namespace {

std::vector<int> cpus_of_this_thread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(pthread_getaffinity_np(pthread_self(), sizeof set, &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

TEST(CpuBindingTest, BindsTheThreadAndWhatItStartsAfterwardsButNotOthers) {
  const std::vector<int> all = cpus_of_this_thread();
  ASSERT_FALSE(all.empty());
  const int last = all.back();
  std::vector<int> bound, started_after, started_before;
  std::promise<void> was_bound;
  std::shared_future<void> bound_now = was_bound.get_future().share();
  // A thread started before the binding (as ZeroMQ's I/O threads are) reads its CPUs after it.
  std::thread before([&] {
    bound_now.wait();
    started_before = cpus_of_this_thread();
  });
  std::thread trainer([&] {  // the test's own thread stays unbound
    std::string why;
    EXPECT_TRUE(bind_this_thread(last, &why)) << why;
    bound = cpus_of_this_thread();
    std::thread reader([&] { started_after = cpus_of_this_thread(); });
    reader.join();
    was_bound.set_value();
  });
  trainer.join();
  before.join();
  EXPECT_EQ(bound, std::vector<int>{last});
  EXPECT_EQ(started_after, std::vector<int>{last});
  EXPECT_EQ(started_before, all);
  EXPECT_EQ(cpus_of_this_thread(), all);
}

TEST(CpuBindingTest, ACpuOutsideTheProcessCpusIsRefusedNamingThem) {
  std::string why;
  EXPECT_TRUE(may_run_on(cpus_of_this_thread().front(), &why)) << why;
  EXPECT_FALSE(may_run_on(CPU_SETSIZE - 1, &why));
  const std::vector<int> all = cpus_of_this_thread();
  const std::string listed = all.size() == 1 ? std::to_string(all[0])
                                             : std::to_string(all.front()) + "-" + std::to_string(all.back());
  // The machines this runs on allow a contiguous range of CPUs; the message names it.
  if (static_cast<int>(all.size()) == all.back() - all.front() + 1) {
    EXPECT_EQ(why, "--bind-cpu " + std::to_string(CPU_SETSIZE - 1) + ": this process may run on CPU(s) " + listed + " only");
  }
  EXPECT_FALSE(bind_this_thread(-2, &why));
  EXPECT_NE(why.find("--bind-cpu -2: this process may run on CPU(s) "), std::string::npos) << why;
  EXPECT_EQ(cpus_of_this_thread(), all);  // nothing changed
}

TEST(CpuBindingTest, WorkerRefusesACpuItMayNotUseBeforeDoingAnything) {
  const TempDir dir("bind-cpu");
  const std::string log = dir.path + "/w0.log";
  const test::ExitStatus worker = test::wait_for(
      test::spawn({PSTRAIN_WORKER_BIN, "--index", "0", "--num-workers", "1", "--ps-hosts", "127.0.0.1:1",
                   "--data-dir", dir.path, "--bind-cpu", std::to_string(CPU_SETSIZE - 1), "--timeout", "5"},
                  log),
      30);
  const std::string text = test::read_file(log);
  EXPECT_EQ(worker.code, 2) << text;
  EXPECT_NE(text.find("--bind-cpu " + std::to_string(CPU_SETSIZE - 1) + ": this process may run on CPU(s) "),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("training records"), std::string::npos) << text;  // it read no data
}

}  // namespace
}  // namespace pstrain
