// Fork protection modelled (run with SOFTVERBS_FORK=dontfork and
// RDMAV_FORK_SAFE=1): registrations madvise their pages MADV_DONTFORK and
// deregistrations MADV_DOFORK, counted per page as libibverbs does; a child
// sees the rest of the memory intact; the application's own mprotect and
// mremap keep working; many registrations and the process's map count.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tests/softverbs/fixture.h"
#include "tests/softverbs/fork_children.h"
#include "tests/softverbs/vm_maps.h"

namespace softverbs {
namespace {

using ForkProtection = SoftverbsTest;

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

TEST_F(ForkProtection, RdmavForkSafeEnablesIt) {
  EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_ENABLED);
  EXPECT_EQ(ibv_fork_init(), 0) << "a second ibv_fork_init is a no-op";
}

TEST_F(ForkProtection, ARegistrationMarksItsPagesDontForkUntilDeregistered) {
  char* buf = static_cast<char*>(MapPages(4 * kPage));
  ASSERT_NE(buf, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd_, buf + kPage + 10, kPage, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  EXPECT_FALSE(HasVmFlag(buf, "dc"));
  EXPECT_TRUE(HasVmFlag(buf + kPage, "dc"));
  EXPECT_TRUE(HasVmFlag(buf + 2 * kPage, "dc")) << "the range is rounded out to pages";
  EXPECT_FALSE(HasVmFlag(buf + 3 * kPage, "dc"));
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_FALSE(HasVmFlag(buf + kPage, "dc"));
  EXPECT_FALSE(HasVmFlag(buf + 2 * kPage, "dc"));
  munmap(buf, 4 * kPage);
}

TEST_F(ForkProtection, OverlappingRegistrationsAreCountedPerPage) {
  char* buf = static_cast<char*>(MapPages(4 * kPage));
  ASSERT_NE(buf, nullptr);
  ibv_mr* a = ibv_reg_mr(pd_, buf, 2 * kPage, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* b = ibv_reg_mr(pd_, buf + kPage, 2 * kPage, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ibv_dereg_mr(a), 0);
  EXPECT_FALSE(HasVmFlag(buf, "dc"));
  EXPECT_TRUE(HasVmFlag(buf + kPage, "dc")) << "b still covers the shared page";
  EXPECT_TRUE(HasVmFlag(buf + 2 * kPage, "dc"));
  EXPECT_EQ(ibv_dereg_mr(b), 0);
  EXPECT_FALSE(HasVmFlag(buf + kPage, "dc"));
  EXPECT_FALSE(HasVmFlag(buf + 2 * kPage, "dc"));
  munmap(buf, 4 * kPage);
}

TEST_F(ForkProtection, AFailedRegistrationLeavesNoPageDontFork) {
  char* buf = static_cast<char*>(MapPages(2 * kPage));
  ASSERT_NE(buf, nullptr);
  ASSERT_EQ(mprotect(buf, 2 * kPage, PROT_READ), 0);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, buf, 2 * kPage, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_FALSE(HasVmFlag(buf, "dc"));
  munmap(buf, 2 * kPage);
}

TEST_F(ForkProtection, AForkedChildSeesIntactMemoryOutsideTheRegisteredPages) {
  char* buf = static_cast<char*>(MapPages(4 * kPage));
  ASSERT_NE(buf, nullptr);
  for (size_t i = 0; i < 4 * kPage; ++i) buf[i] = static_cast<char>(i * 31 + 7);
  ibv_mr* mr = ibv_reg_mr(pd_, buf + kPage, kPage, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  const int status = fork_children::RunChild([buf] {
    for (size_t i = 0; i < 4 * kPage; ++i) {
      if (i / kPage == 1) continue;
      if (buf[i] != static_cast<char>(i * 31 + 7)) return 1;
    }
    // The registered page is not in the child at all.
    unsigned char resident = 0;
    if (mincore(buf + kPage, kPage, &resident) == 0 || errno != ENOMEM) return 2;
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: bytes differ outside, 2: the registered page was copied";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, 4 * kPage);
}

TEST_F(ForkProtection, TheApplicationsMprotectStillWorksAcrossRegisteredPages) {
  char* buf = static_cast<char*>(MapPages(8 * kPage));
  ASSERT_NE(buf, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd_, buf + 2 * kPage, 2 * kPage, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mprotect(buf + 5 * kPage, 2 * kPage, PROT_READ), 0);
  EXPECT_EQ(mprotect(buf, 8 * kPage, PROT_READ), 0) << "across the registered pages";
  EXPECT_EQ(mprotect(buf, 8 * kPage, PROT_READ | PROT_WRITE), 0);
  buf[0] = buf[3 * kPage] = buf[7 * kPage] = 'w';
  EXPECT_TRUE(HasVmFlag(buf + 2 * kPage, "dc")) << "mprotect keeps the advice";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, 8 * kPage);
}

TEST_F(ForkProtection, TheApplicationsMremapStillWorksBesideRegisteredPages) {
  char* buf = static_cast<char*>(MapPages(8 * kPage));
  ASSERT_NE(buf, nullptr);
  memset(buf + 4 * kPage, 'm', 4 * kPage);
  ibv_mr* mr = ibv_reg_mr(pd_, buf + kPage, 2 * kPage, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  // The pages after the registered ones are a mapping of their own now;
  // moving and growing them works and keeps their bytes.
  void* moved = mremap(buf + 4 * kPage, 4 * kPage, 16 * kPage, MREMAP_MAYMOVE);
  ASSERT_NE(moved, MAP_FAILED) << "errno " << errno;
  EXPECT_EQ(static_cast<char*>(moved)[4 * kPage - 1], 'm');
  // A range that spans the registered pages is several mappings: mremap
  // refuses it with EFAULT, as it does under libibverbs' fork protection.
  EXPECT_EQ(mremap(buf, 4 * kPage, 8 * kPage, MREMAP_MAYMOVE), MAP_FAILED);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(moved, 16 * kPage);
  munmap(buf, 4 * kPage);
}

// 40,000 small registrations side by side: the DONTFORK'ed pages are
// contiguous, so the kernel keeps them in one mapping. (The process's map
// count moves by that and by what malloc maps for the MRs' bookkeeping.)
TEST_F(ForkProtection, FortyThousandAdjacentRegistrationsKeepTheMapCount) {
  constexpr int kRegions = 40000;
  constexpr size_t kPiece = 128;  // 40,000 x 128 B = 1,250 pages
  constexpr int kContexts = 3;    // a context holds at most 16,384 MRs (max_mr)
  const size_t bytes = kRegions * kPiece;
  char* buf = static_cast<char*>(MapPages(bytes));
  ASSERT_NE(buf, nullptr);
  ibv_context* ctx[kContexts] = {ctx_};
  ibv_pd* pd[kContexts] = {pd_};
  for (int c = 1; c < kContexts; ++c) {
    ctx[c] = ibv_open_device(list_[0]);
    ASSERT_NE(ctx[c], nullptr);
    pd[c] = ibv_alloc_pd(ctx[c]);
    ASSERT_NE(pd[c], nullptr);
  }
  const long before = MapCount();
  std::vector<ibv_mr*> mrs;
  mrs.reserve(kRegions);
  for (int i = 0; i < kRegions; ++i) {
    // REMOTE_READ: pinned with mlock, which charges each page once, so the
    // test also fits an 8 MiB RLIMIT_MEMLOCK.
    ibv_mr* mr = ibv_reg_mr(pd[i % kContexts], buf + i * kPiece, kPiece, IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(mr, nullptr) << "registration " << i << ": errno " << errno;
    mrs.push_back(mr);
  }
  const long registered = MapCount();
  EXPECT_EQ(MappingsIn(buf, bytes), 1) << "the registered buffer is one mapping";
  EXPECT_TRUE(HasVmFlag(buf, "dc"));
  for (ibv_mr* mr : mrs) ASSERT_EQ(ibv_dereg_mr(mr), 0);
  const long after = MapCount();
  printf("map count: %ld before, %ld with 40,000 adjacent registrations, %ld after\n", before,
         registered, after);
  EXPECT_EQ(MappingsIn(buf, bytes), 1);
  EXPECT_FALSE(HasVmFlag(buf, "dc"));
  EXPECT_FALSE(HasVmFlag(buf + bytes - 1, "dc"));
  for (int c = 1; c < kContexts; ++c) {
    EXPECT_EQ(ibv_dealloc_pd(pd[c]), 0);
    EXPECT_EQ(ibv_close_device(ctx[c]), 0);
  }
  munmap(buf, bytes);
}

// Registrations with unregistered pages between them: each splits the
// mapping in two more, which is how fork protection exhausts
// vm.max_map_count; deregistration merges them again.
TEST_F(ForkProtection, RegistrationsWithGapsSplitTheMappingTwiceEach) {
  constexpr int kRegions = 1000;
  const size_t bytes = 2 * kRegions * kPage;
  char* buf = static_cast<char*>(MapPages(bytes));
  ASSERT_NE(buf, nullptr);
  const long before = MapCount();
  std::vector<ibv_mr*> mrs;
  for (int i = 0; i < kRegions; ++i) {
    ibv_mr* mr = ibv_reg_mr(pd_, buf + 2 * i * kPage, kPage, IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(mr, nullptr) << "registration " << i << ": errno " << errno;
    mrs.push_back(mr);
  }
  const long registered = MapCount();
  // Registered, unregistered, registered, ...: 2,000 mappings.
  EXPECT_EQ(MappingsIn(buf, bytes), 2 * kRegions);
  for (ibv_mr* mr : mrs) ASSERT_EQ(ibv_dereg_mr(mr), 0);
  const long after = MapCount();
  printf("map count: %ld before, %ld with 1,000 registrations one page apart, %ld after\n", before,
         registered, after);
  EXPECT_EQ(MappingsIn(buf, bytes), 1) << "merged again";
  munmap(buf, bytes);
}

TEST_F(ForkProtection, OdpRegistrationsAreNotMadvised) {
  // libibverbs leaves ODP MRs alone (their pages are not pinned); this
  // device has no ODP, so the registration fails before any advice.
  char* buf = static_cast<char*>(MapPages(kPage));
  ASSERT_NE(buf, nullptr);
  EXPECT_EQ(ibv_reg_mr(pd_, buf, kPage, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND), nullptr);
  EXPECT_FALSE(HasVmFlag(buf, "dc"));
  munmap(buf, kPage);
}

}  // namespace
}  // namespace softverbs
