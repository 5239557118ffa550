// softverbs_remote_write / softverbs_remote_read: a peer's RDMA WRITE and
// READ through an rkey, checked as an HCA checks them (softverbs.h): the MR
// must be alive, grant the remote right, and contain the range byte for byte.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/softverbs/fixture.h"

namespace softverbs {
namespace {

constexpr size_t kBytes = 64 * 1024;
constexpr int kRemoteRw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

class RemoteAccess : public SoftverbsTest {
 protected:
  void SetUp() override {
    SoftverbsTest::SetUp();
    buf_ = static_cast<char*>(MapPages(kBytes));
    ASSERT_NE(buf_, nullptr);
  }
  void TearDown() override {
    munmap(buf_, kBytes);
    SoftverbsTest::TearDown();
  }
  ibv_mr* Register(void* addr, size_t len, int access) {
    return ibv_reg_mr(pd_, addr, len, access);
  }
  int Write(const ibv_mr* mr, const void* at, size_t len, unsigned char fill = 0x5a) {
    std::vector<unsigned char> src(len, fill);
    return client_.remote_write(mr->rkey, reinterpret_cast<uintptr_t>(at), src.data(), len);
  }
  char* buf_ = nullptr;
};

TEST_F(RemoteAccess, WriteInsideTheMrLandsInItsMemory) {
  ibv_mr* mr = Register(buf_ + 100, 1000, kRemoteRw);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(Write(mr, buf_ + 100, 1000, 0x77), IBV_WC_SUCCESS);
  EXPECT_EQ(buf_[100], 0x77);
  EXPECT_EQ(buf_[1099], 0x77);
  EXPECT_EQ(buf_[99], 0) << "a byte before the MR was written";
  EXPECT_EQ(buf_[1100], 0) << "a byte after the MR was written";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(RemoteAccess, WriteOneByteBeyondEitherEndIsARemoteAccessError) {
  ibv_mr* mr = Register(buf_ + 100, 1000, kRemoteRw);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(Write(mr, buf_ + 99, 1), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(Write(mr, buf_ + 1100, 1), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(Write(mr, buf_ + 100, 1001), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(buf_[99], 0);
  EXPECT_EQ(buf_[1100], 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(RemoteAccess, RkeyOfADeregisteredMrReachesNothing) {
  ibv_mr* mr = Register(buf_, kBytes, kRemoteRw);
  ASSERT_NE(mr, nullptr);
  const ibv_mr copy = *mr;
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(Write(&copy, buf_, 64), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(buf_[0], 0);
}

TEST_F(RemoteAccess, RkeyNeverIssuedIsARemoteAccessError) {
  unsigned char byte = 1;
  EXPECT_EQ(client_.remote_write(0xdead0001u, reinterpret_cast<uintptr_t>(buf_), &byte, 1),
            IBV_WC_REM_ACCESS_ERR);
}

TEST_F(RemoteAccess, WriteWithoutRemoteWriteRightIsARemoteAccessError) {
  ibv_mr* mr = Register(buf_, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(Write(mr, buf_, 64), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(RemoteAccess, ReadReturnsTheMrBytes) {
  ibv_mr* mr = Register(buf_, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  for (size_t i = 0; i < 256; ++i) buf_[4000 + i] = static_cast<char>(i * 3 + 1);
  std::vector<char> got(256);
  EXPECT_EQ(
      client_.remote_read(mr->rkey, reinterpret_cast<uintptr_t>(buf_ + 4000), got.data(), 256),
      IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(got.data(), buf_ + 4000, 256), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(RemoteAccess, ReadWithoutRemoteReadRightIsARemoteAccessError) {
  ibv_mr* mr = Register(buf_, kBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr, nullptr);
  char got[8];
  EXPECT_EQ(client_.remote_read(mr->rkey, reinterpret_cast<uintptr_t>(buf_), got, sizeof got),
            IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(RemoteAccess, WriteGoesToThePagesPinnedAtRegistration) {
  // As for softverbs_device_write: after munmap + mmap at the same address,
  // the peer's write lands in the old pages and the new mapping stays zero.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* fresh = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(fresh, MAP_FAILED);
  char* p = static_cast<char*>(fresh);
  p[0] = 1;
  ibv_mr* mr = Register(p, page, kRemoteRw);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(munmap(p, page), 0);
  ASSERT_EQ(mmap(p, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            p);
  EXPECT_EQ(Write(mr, p, 64, 0x33), IBV_WC_SUCCESS);
  EXPECT_EQ(p[0], 0) << "the write reached the new mapping, not the pinned pages";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(p, page);
}

TEST_F(RemoteAccess, NullLocalBufferIsALocalProtectionError) {
  ibv_mr* mr = Register(buf_, kBytes, kRemoteRw);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(client_.remote_write(mr->rkey, reinterpret_cast<uintptr_t>(buf_), nullptr, 8),
            IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(RemoteAccess, CountersCountSuccessesAndFailures) {
  ibv_mr* mr = Register(buf_, kBytes, kRemoteRw);
  ASSERT_NE(mr, nullptr);
  const softverbs_counters c0 = client_.Counters();
  EXPECT_EQ(Write(mr, buf_, 8), IBV_WC_SUCCESS);
  EXPECT_EQ(Write(mr, buf_ + kBytes, 8), IBV_WC_REM_ACCESS_ERR);
  const softverbs_counters c1 = client_.Counters();
  EXPECT_EQ(c1.remote_accesses - c0.remote_accesses, 1u);
  EXPECT_EQ(c1.remote_access_errors - c0.remote_access_errors, 1u);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

class RemoteAccessOdp : public RemoteAccess {
 protected:
  const char* odp() const override { return "explicit"; }
};

TEST_F(RemoteAccessOdp, OdpMrWriteGoesThroughTheCurrentPageTablesWithinItsBounds) {
  ibv_mr* mr = Register(buf_, 4096, kRemoteRw | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(Write(mr, buf_ + 10, 20, 0x44), IBV_WC_SUCCESS);
  EXPECT_EQ(buf_[10], 0x44);
  EXPECT_EQ(Write(mr, buf_ + 4096, 1), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

}  // namespace
}  // namespace softverbs
