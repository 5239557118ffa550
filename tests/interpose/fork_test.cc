// fork() without exec under libmrcache_preload.so (interpose/shim.h "fork()"):
//  - the child of a process whose other threads are inside the shim
//    (registering, deregistering, allocating PDs) never inherits a held lock:
//    it opens the device, registers and deregisters;
//  - a child never uses or deregisters its parent's cached registrations:
//    its ibv_reg_mr on an inherited PD is a registration of its own, and its
//    ibv_dereg_mr of an inherited alias fails with ECHILD and deregisters
//    nothing (the library's caches answer ECHILD in a child,
//    mrcache/monitors/fork_guard.h).
// run_with_shim.sh preloads the shim. Every child runs under alarm() and
// reports by exit status (a hang shows as SIGALRM).
#include <errno.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tests/interpose/shim_fixture.h"
#include "tests/reliability/process_probes.h"
#include "tests/softverbs/fork_children.h"

// AddressSanitizer of GCC 12 has no fork handling for its own allocator: a
// child that allocates can block forever on an allocator lock a busy thread
// held at the fork (tests/reliability/fork_test.cc). The busy-threads test
// skips under ASan for that reason; the single-threaded ones run. Under
// TSan its children would start the uffd reader thread (`auto` adds uffd in a
// process with a sanitizer runtime, mrcache/monitors/monitor.h), and TSan
// does not support new threads after a multi-threaded fork: it skips there too.
constexpr bool kAsan = mrcache::testing::UnderAsan();
constexpr bool kTsan = mrcache::testing::UnderTsan();

namespace {

using ShimForkTest = shim_test::ShimTest;
using fork_children::RunChild;

// What each child does: a device, a PD and an MR of its own, a device write
// through it, and everything released. 0 if all of it worked.
int ChildUsesANewDevice(char* buf) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n != 1) return 2;
  ibv_context* ctx = ibv_open_device(list[0]);
  if (ctx == nullptr) return 3;
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_mr* mr = pd == nullptr ? nullptr : ibv_reg_mr(pd, buf, 64 * 1024, IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr) return 4;
  if (ibv_dereg_mr(mr) != 0 || ibv_dealloc_pd(pd) != 0 || ibv_close_device(ctx) != 0) return 5;
  ibv_free_device_list(list);
  return 0;
}

TEST_F(ShimForkTest, ChildOfAProcessBusyInTheShimOpensTheDeviceAndRegisters) {
  if (kAsan)
    GTEST_SKIP() << "ASan's allocator can stay locked in the child (see the top of the file)";
  if (kTsan)
    GTEST_SKIP() << "TSan does not support the child's new uffd thread after a multi-threaded fork "
                    "(see the top of the file)";
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 2; ++t) {
    // Cached (LOCAL_WRITE) and private (REMOTE_WRITE) registrations of
    // freshly allocated buffers: the alias registry, the PD's cache, the
    // monitor's hooks on free.
    busy.emplace_back([this, t, &stop] {
      const int access =
          t == 0 ? IBV_ACCESS_LOCAL_WRITE : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
      for (size_t i = 0; !stop.load(); ++i) {
        size_t size = (i % 4 + 1) * 64 * 1024;
        char* mem = static_cast<char*>(malloc(size));
        ibv_mr* mr = ibv_reg_mr(pd_, mem, size, access);
        if (mr != nullptr) ibv_dereg_mr(mr);
        free(mem);
      }
    });
  }
  // PDs allocated and deallocated: the PD cache map.
  busy.emplace_back([this, &stop] {
    static char page[4096] __attribute__((aligned(4096)));
    while (!stop.load()) {
      ibv_pd* pd = ibv_alloc_pd(ctx_);
      if (pd == nullptr) continue;
      ibv_mr* mr = ibv_reg_mr(pd, page, sizeof page, IBV_ACCESS_LOCAL_WRITE);
      if (mr != nullptr) ibv_dereg_mr(mr);
      ibv_dealloc_pd(pd);
    }
  });
  const fork_children::Outcomes children =
      fork_children::RunChildren(20, [this] { return ChildUsesANewDevice(buf_); });
  stop = true;
  for (std::thread& t : busy) t.join();
  EXPECT_EQ(children.deadlocked, 0) << "children that deadlocked, of 20";
  EXPECT_EQ(children.failed, 0) << "children that failed, of 20";
}

TEST_F(ShimForkTest, ChildRegistrationOnAnInheritedPdIsItsOwn) {
  ibv_mr* parent = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(parent, nullptr);
  // In the parent the same request is served by the cache: the same MR.
  ibv_mr* again = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->lkey, parent->lkey);
  EXPECT_EQ(ibv_dereg_mr(again), 0);

  // The child's request reaches the real library, as without the shim. (No
  // device write in the child: softverbs' context shares its io_uring with
  // the parent, and a uverbs context is not for use across fork either.)
  int status = RunChild([this, parent] {
    const softverbs_counters before = client_.Counters();
    ibv_mr* mine = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
    if (mine == nullptr) return 2;
    if (mine->lkey == parent->lkey) return 3;  // the parent's cached MR
    if (client_.Counters().registrations != before.registrations + 1) return 4;
    if (ibv_dereg_mr(mine) != 0) return 5;
    if (client_.Counters().deregistrations != before.deregistrations + 1) return 6;
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent's registration is untouched.
  EXPECT_TRUE(WriteLands(parent, buf_ + 8192));
  EXPECT_EQ(ibv_dereg_mr(parent), 0);
}

TEST_F(ShimForkTest, ChildCannotDeregisterAnInheritedAlias) {
  // LOCAL_WRITE: a cached alias; REMOTE_WRITE: a private registration that
  // the parent's ibv_dereg_mr would deregister.
  for (int access :
       {int{IBV_ACCESS_LOCAL_WRITE}, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE}) {
    SCOPED_TRACE(access);
    ibv_mr* parent = ibv_reg_mr(pd_, buf_, kBytes, access);
    ASSERT_NE(parent, nullptr);
    int status = RunChild([this, parent] {
      const softverbs_counters before = client_.Counters();
      if (ibv_dereg_mr(parent) != ECHILD) return 2;
      if (client_.Counters().deregistrations != before.deregistrations) return 3;
      return 0;
    });
    ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_TRUE(WriteLands(parent, buf_));
    EXPECT_EQ(ibv_dereg_mr(parent), 0);
  }
}

}  // namespace
