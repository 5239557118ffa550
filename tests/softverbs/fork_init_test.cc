// ibv_fork_init on a kernel without copy-on-fork for pinned pages
// (SOFTVERBS_FORK=dontfork, no RDMAV_FORK_SAFE): protection is off until
// ibv_fork_init turns it on, and ibv_fork_init after a registration fails
// with EINVAL, as libibverbs says.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/softverbs/fixture.h"
#include "tests/softverbs/fork_children.h"
#include "tests/softverbs/vm_maps.h"

// Exported by libibverbs (IBVERBS_1.1) for providers; declared only in
// rdma-core's private driver.h.
extern "C" int ibv_dontfork_range(void* base, size_t size);
extern "C" int ibv_dofork_range(void* base, size_t size);

namespace softverbs {
namespace {

using ForkInit = SoftverbsTest;

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// Runs first (gtest keeps declaration order), in a child, before the parent
// turns protection on.
TEST_F(ForkInit, ForkInitAfterARegistrationIsEinval) {
  ASSERT_EQ(ibv_is_fork_initialized(), IBV_FORK_DISABLED);
  ibv_pd* pd = pd_;
  const int status = fork_children::RunChild([pd] {
    void* buf = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ibv_mr* mr = ibv_reg_mr(pd, buf, kPage, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) return 1;
    const bool unmarked = !HasVmFlag(buf, "dc");
    ibv_dereg_mr(mr);
    if (!unmarked) return 2;
    return ibv_fork_init() == EINVAL && ibv_is_fork_initialized() == IBV_FORK_DISABLED ? 0 : 3;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: registration failed, 2: marked without protection, 3: ibv_fork_init not EINVAL";
}

TEST_F(ForkInit, ForkInitTurnsProtectionOn) {
  EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_DISABLED);
  ASSERT_EQ(ibv_fork_init(), 0);
  EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_ENABLED);
  char* buf = static_cast<char*>(MapPages(kPage));
  ASSERT_NE(buf, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, kPage, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_TRUE(HasVmFlag(buf, "dc"));
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_FALSE(HasVmFlag(buf, "dc"));
  munmap(buf, kPage);
}

TEST_F(ForkInit, DontforkAndDoforkRangesAreCountedOnceOn) {
  ASSERT_EQ(ibv_fork_init(), 0);
  char* buf = static_cast<char*>(MapPages(kPage));
  ASSERT_NE(buf, nullptr);
  EXPECT_EQ(ibv_dontfork_range(buf, kPage), 0);
  EXPECT_EQ(ibv_dontfork_range(buf, kPage), 0);
  EXPECT_EQ(ibv_dofork_range(buf, kPage), 0);
  EXPECT_TRUE(HasVmFlag(buf, "dc")) << "one reference left";
  EXPECT_EQ(ibv_dofork_range(buf, kPage), 0);
  EXPECT_FALSE(HasVmFlag(buf, "dc"));
  munmap(buf, kPage);
}

}  // namespace
}  // namespace softverbs
