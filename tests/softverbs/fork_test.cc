// fork() without exec in a multi-threaded process: the child of a process
// whose other threads are inside softverbs (holding its locks) can open the
// device and register memory, as with rdma-core (whose kernel copies pinned
// pages on fork, IBV_FORK_UNNEEDED).
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tests/softverbs/fixture.h"

namespace softverbs {
namespace {

using Fork = SoftverbsTest;

// What a child does: a device, a PD and an MR of its own, and back.
// Exit status 0 if all of it worked.
[[noreturn]] void ChildUsesTheDevice() {
  alarm(10);  // a deadlock ends as SIGALRM, not as a hung test
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n != 1) _exit(2);
  ibv_context* ctx = ibv_open_device(list[0]);
  if (ctx == nullptr) _exit(3);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  static char buf[4096] __attribute__((aligned(4096)));
  ibv_mr* mr = pd == nullptr ? nullptr : ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr) _exit(4);
  if (ibv_dereg_mr(mr) != 0 || ibv_dealloc_pd(pd) != 0 || ibv_close_device(ctx) != 0) _exit(5);
  ibv_free_device_list(list);
  _exit(0);
}

TEST_F(Fork, ChildOfABusyMultiThreadedProcessCanUseTheDevice) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 3; ++t) {
    busy.emplace_back([this, &stop] {
      std::vector<char> mem(64 * 1024);
      while (!stop.load()) {
        ibv_mr* mr = ibv_reg_mr(pd_, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
        if (mr != nullptr) ibv_dereg_mr(mr);
      }
    });
  }
  int deadlocked = 0, failed = 0;
  for (int i = 0; i < 20; ++i) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ChildUsesTheDevice();
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
      ++deadlocked;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed;
    }
  }
  stop = true;
  for (std::thread& t : busy) t.join();
  EXPECT_EQ(deadlocked, 0) << "children that deadlocked, of 20";
  EXPECT_EQ(failed, 0) << "children that failed, of 20";
}

}  // namespace
}  // namespace softverbs
