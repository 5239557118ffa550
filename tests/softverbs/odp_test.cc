// On-demand paging in softverbs: SOFTVERBS_ODP chooses the device's ODP
// support; ODP MRs pin nothing, follow the current page tables, and answer
// ibv_advise_mr through the verbs_context ops table.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "tests/softverbs/fixture.h"

namespace softverbs {
namespace {

constexpr size_t kBytes = 64 * 1024;
constexpr int kOdpAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND;

class ExplicitOdp : public SoftverbsTest {
 protected:
  const char* odp() const override { return "explicit"; }
};

class ImplicitOdp : public SoftverbsTest {
 protected:
  const char* odp() const override { return "implicit"; }
};

TEST_F(ExplicitOdp, OdpMrPinsNothing) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  const softverbs_counters before = client_.Counters();
  ibv_mr* mr = ibv_reg_mr(pd_, buf, kBytes, kOdpAccess);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  const softverbs_counters during = client_.Counters();
  EXPECT_EQ(during.bytes_pinned, before.bytes_pinned);
  EXPECT_EQ(during.odp_registrations, before.odp_registrations + 1);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, kBytes);
}

TEST_F(ExplicitOdp, OdpDeviceWriteFollowsTheCurrentMapping) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, kBytes, kOdpAccess);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(munmap(buf, kBytes), 0);
  void* again = mmap(buf, kBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(again, buf);
  const char data[] = "never stale";
  ASSERT_EQ(client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(buf), data, sizeof data), 0);
  EXPECT_STREQ(buf, "never stale");
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, kBytes);
}

TEST_F(ExplicitOdp, OdpDeviceWriteToUnmappedMemoryIsEfault) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, kBytes, kOdpAccess);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(munmap(buf, kBytes), 0);
  char byte = 1;
  EXPECT_EQ(client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(buf), &byte, 1), EFAULT);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(ExplicitOdp, ImplicitMrWithoutImplicitSupportIsEopnotsupp) {
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, nullptr, SIZE_MAX, kOdpAccess), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(ExplicitOdp, AdvisePrefetchWriteFaultsThePagesIn) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, kBytes, kOdpAccess);
  ASSERT_NE(mr, nullptr);
  unsigned char resident[kBytes / 4096 + 1] = {};
  ASSERT_EQ(mincore(buf, kBytes, resident), 0);
  EXPECT_EQ(resident[0] & 1, 0);
  const uint64_t advised = client_.Counters().advise_calls;
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(kBytes), mr->lkey};
  ASSERT_EQ(
      ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1),
      0);
  EXPECT_EQ(client_.Counters().advise_calls, advised + 1);
  ASSERT_EQ(mincore(buf, kBytes, resident), 0);
  for (size_t i = 0; i < kBytes / 4096; ++i) {
    EXPECT_EQ(resident[i] & 1, 1) << "page " << i;
  }
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, kBytes);
}

TEST_F(ExplicitOdp, AdviseOnAPinnedMrIsEinval) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(kBytes), mr->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EINVAL);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, kBytes);
}

TEST_F(ExplicitOdp, AdviseOutsideTheMrOrWithBadArgumentsIsEinval) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, kBytes / 2, kOdpAccess);
  ASSERT_NE(mr, nullptr);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(kBytes), mr->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EINVAL);
  sge.length = 4096;
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 1 << 3, &sge, 1), EINVAL);
  EXPECT_EQ(ibv_advise_mr(pd_, static_cast<ibv_advise_mr_advice>(42), 0, &sge, 1), EINVAL);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0), EINVAL);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, kBytes);
}

TEST_F(SoftverbsTest, AdviseOnADeviceWithoutOdpIsEopnotsupp) {
  ibv_sge sge{0x1000, 4096, 0x100};
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EOPNOTSUPP);
}

TEST_F(ImplicitOdp, ImplicitMrCoversTheWholeAddressSpace) {
  ibv_mr* mr = ibv_reg_mr(pd_, nullptr, SIZE_MAX, kOdpAccess);
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  EXPECT_EQ(mr->addr, nullptr);
  EXPECT_EQ(mr->length, SIZE_MAX);
  // Any memory is reachable through its lkey, at its virtual address.
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  const char data[] = "implicit";
  EXPECT_EQ(
      client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(buf) + 10, data, sizeof data), 0);
  EXPECT_STREQ(buf + 10, "implicit");
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(kBytes), mr->lkey};
  EXPECT_EQ(
      ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1),
      0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, kBytes);
}

TEST_F(ImplicitOdp, ImplicitMrNeedsIovaZero) {
  errno = 0;
  EXPECT_EQ(ibv_reg_mr_iova2(pd_, nullptr, SIZE_MAX, 4096, kOdpAccess), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(ImplicitOdp, WholeAddressSpaceWithoutOnDemandIsEinval) {
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, nullptr, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

}  // namespace
}  // namespace softverbs
