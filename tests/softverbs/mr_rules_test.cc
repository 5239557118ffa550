// The man-page rules of softverbs' PD and MR verbs (ibv_reg_mr(3),
// ibv_rereg_mr(3), ibv_alloc_pd(3)): every bad input is a clear errno, never
// a crash.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "tests/softverbs/fixture.h"

namespace softverbs {
namespace {

constexpr size_t kBytes = 64 * 1024;

class MrRules : public SoftverbsTest {
 protected:
  void SetUp() override {
    SoftverbsTest::SetUp();
    buf_ = MapPages(kBytes);
    ASSERT_NE(buf_, nullptr);
  }
  void TearDown() override {
    munmap(buf_, kBytes);
    SoftverbsTest::TearDown();
  }
  // ibv_reg_mr with access flags that are not compile-time constants, so the
  // inline wrapper goes through ibv_reg_mr_iova2.
  ibv_mr* Register(void* addr, size_t len, int access) {
    errno = 0;
    return ibv_reg_mr(pd_, addr, len, access);
  }
  void* buf_ = nullptr;
};

TEST_F(MrRules, RemoteWriteWithoutLocalWriteIsEinval) {
  EXPECT_EQ(Register(buf_, kBytes, IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(MrRules, RemoteAtomicWithoutLocalWriteIsEinval) {
  EXPECT_EQ(Register(buf_, kBytes, IBV_ACCESS_REMOTE_ATOMIC), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(MrRules, RemoteReadAloneIsAccepted) {
  ibv_mr* mr = Register(buf_, kBytes, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(MrRules, UnknownAccessBitIsEinval) {
  EXPECT_EQ(Register(buf_, kBytes, IBV_ACCESS_LOCAL_WRITE | (1 << 12)), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(MrRules, UnknownOptionalAccessBitIsDropped) {
  ibv_mr* mr = Register(buf_, kBytes, IBV_ACCESS_LOCAL_WRITE | (1 << 25));
  ASSERT_NE(mr, nullptr) << "errno " << errno;
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(MrRules, UnmappedMemoryIsEfault) {
  void* hole = MapPages(kBytes);
  ASSERT_NE(hole, nullptr);
  ASSERT_EQ(munmap(hole, kBytes), 0);
  EXPECT_EQ(Register(hole, kBytes, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
}

TEST_F(MrRules, ZeroLengthIsEinval) {
  EXPECT_EQ(Register(buf_, 0, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(MrRules, WrappingRangeIsEinval) {
  EXPECT_EQ(Register(buf_, SIZE_MAX - 10, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(MrRules, OnDemandWithoutOdpSupportIsEopnotsupp) {
  EXPECT_EQ(Register(buf_, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(MrRules, UnknownPdIsEinval) {
  ibv_pd fake{};
  fake.context = ctx_;
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(&fake, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(MrRules, FailedRegistrationsAreCounted) {
  const uint64_t failed = client_.Counters().failed_registrations;
  EXPECT_EQ(Register(buf_, 0, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(client_.Counters().failed_registrations, failed + 1);
}

TEST_F(MrRules, ConstantAccessRegMrGetsKeysAndRange) {
  // Constant flags: the inline wrapper calls ibv_reg_mr@@IBVERBS_1.1 itself.
  ibv_mr* mr = ibv_reg_mr(pd_, buf_, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->addr, buf_);
  EXPECT_EQ(mr->length, kBytes);
  EXPECT_EQ(mr->pd, pd_);
  EXPECT_EQ(mr->context, ctx_);
  EXPECT_NE(mr->lkey, 0u);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(MrRules, EveryMrGetsItsOwnLkey) {
  ibv_mr* a = Register(buf_, kBytes / 2, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* b = Register(buf_, kBytes / 2, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a->lkey, b->lkey);
  EXPECT_EQ(ibv_dereg_mr(a), 0);
  EXPECT_EQ(ibv_dereg_mr(b), 0);
}

TEST_F(MrRules, IovaMustShareThePageOffsetOfAddr) {
  errno = 0;
  EXPECT_EQ(ibv_reg_mr_iova2(pd_, buf_, kBytes, 0x10001, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_mr* mr = ibv_reg_mr_iova2(pd_, buf_, kBytes, 0x100000, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(MrRules, RegMrIovaIsExported) {
  // Constant flags: the inline wrapper calls ibv_reg_mr_iova@@IBVERBS_1.7.
  ibv_mr* mr = ibv_reg_mr_iova(pd_, buf_, kBytes, 0x200000, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(MrRules, DmabufRegistrationIsEopnotsupp) {
  errno = 0;
  EXPECT_EQ(ibv_reg_dmabuf_mr(pd_, 0, kBytes, 0, -1, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(MrRules, DeallocPdWithLiveMrIsEbusy) {
  ibv_mr* mr = Register(buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(MrRules, DeallocOfUnknownPdIsEinval) {
  ibv_pd fake{};
  EXPECT_EQ(ibv_dealloc_pd(&fake), EINVAL);
}

TEST_F(MrRules, DeregOfUnknownMrIsEinval) {
  ibv_mr fake{};
  fake.pd = pd_;
  fake.context = ctx_;
  EXPECT_EQ(ibv_dereg_mr(&fake), EINVAL);
}

TEST_F(MrRules, SecondDeregOfTheSameMrIsEinval) {
  ibv_mr* mr = Register(buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), EINVAL);
}

TEST_F(MrRules, ReregWithUnknownFlagsIsInputError) {
  ibv_mr* mr = Register(buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(mr, 1 << 5, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(MrRules, ReregOfUnknownMrIsInputError) {
  ibv_mr fake{};
  errno = 0;
  EXPECT_EQ(
      ibv_rereg_mr(&fake, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE),
      IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(MrRules, ReregAccessFollowsTheRegMrRules) {
  ibv_mr* mr = Register(buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  errno = 0;
  EXPECT_EQ(
      ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_REMOTE_WRITE),
      IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(MrRules, ReregTranslationMovesTheMrAndItsPins) {
  ibv_mr* mr = Register(buf_, kBytes / 2, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  const uint64_t pinned = client_.Counters().bytes_pinned;
  char* second = static_cast<char*>(buf_) + kBytes / 4;
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, second, kBytes / 4 * 3, 0),
            0);
  EXPECT_EQ(mr->addr, second);
  EXPECT_EQ(mr->length, kBytes / 4 * 3);
  EXPECT_EQ(client_.Counters().bytes_pinned, pinned + kBytes / 4);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(MrRules, ReregToUnmappedMemoryKeepsTheOldMr) {
  ibv_mr* mr = Register(buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  void* hole = MapPages(kBytes);
  ASSERT_EQ(munmap(hole, kBytes), 0);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, hole, kBytes, 0),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(mr->addr, buf_);
  const char byte = 7;
  EXPECT_EQ(client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(buf_), &byte, 1), 0);
  EXPECT_EQ(static_cast<char*>(buf_)[0], 7);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(MrRules, ReregPdMovesTheMrToTheNewPd) {
  ibv_pd* other = ibv_alloc_pd(ctx_);
  ASSERT_NE(other, nullptr);
  ibv_mr* mr = Register(buf_, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, other, nullptr, 0, 0), 0);
  EXPECT_EQ(mr->pd, other);
  EXPECT_EQ(ibv_dealloc_pd(pd_), 0);  // the old PD is free now
  pd_ = nullptr;
  EXPECT_EQ(ibv_dealloc_pd(other), EBUSY);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
}

}  // namespace
}  // namespace softverbs
