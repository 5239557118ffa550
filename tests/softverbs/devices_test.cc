// Several devices: SOFTVERBS_DEVICES=N lists softverbs0..N-1, each a port of
// its own on the fabric with its own MR key space, so a key of one device
// never works through another device's QPs (as with two real NICs).
#include <endian.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "tests/softverbs/rc_end.h"
#include "tests/softverbs/softverbs_client.h"

namespace softverbs {
namespace {

constexpr size_t kBytes = 64 * 1024;

class Devices : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(client_.loaded()) << "libibverbs.so.1 is not softverbs";
    before_ = client_.Counters();
    setenv("SOFTVERBS_DEVICES", "4", 1);
    list_ = ibv_get_device_list(&n_);
    ASSERT_NE(list_, nullptr) << "errno " << errno;
    for (char*& b : buf_) {
      void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(p, MAP_FAILED);
      b = static_cast<char*>(p);
    }
  }

  void TearDown() override {
    for (ibv_mr* mr : mrs_) EXPECT_EQ(ibv_dereg_mr(mr), 0);
    for (RcEnd& end : ends_) end.Close();
    for (char* b : buf_) {
      if (b != nullptr) munmap(b, kBytes);
    }
    if (list_ != nullptr) ibv_free_device_list(list_);
    unsetenv("SOFTVERBS_DEVICES");
    const softverbs_counters now = client_.Counters();
    EXPECT_EQ(now.live_mrs, before_.live_mrs) << "the test leaked MRs";
    EXPECT_EQ(now.registrations - before_.registrations,
              now.deregistrations - before_.deregistrations);
  }

  // Opens end i on device `device`.
  void OpenEnd(int i, int device) {
    ASSERT_TRUE(ends_[i].Open(list_[device])) << "errno " << errno;
  }

  // Registers buf_[b] on end i's PD with every RDMA right.
  ibv_mr* Register(int i, int b) {
    ibv_mr* mr =
        ibv_reg_mr(ends_[i].pd, buf_[b], kBytes,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (mr != nullptr) mrs_.push_back(mr);
    return mr;
  }

  Client client_;
  softverbs_counters before_{};
  ibv_device** list_ = nullptr;
  int n_ = 0;
  RcEnd ends_[2];
  char* buf_[3] = {nullptr, nullptr, nullptr};
  std::vector<ibv_mr*> mrs_;
};

TEST_F(Devices, ListsSoftverbs0ToNMinus1InOrder) {
  ASSERT_EQ(n_, 4);
  std::set<__be64> guids;
  for (int i = 0; i < n_; ++i) {
    EXPECT_EQ(ibv_get_device_name(list_[i]), "softverbs" + std::to_string(i));
    EXPECT_EQ(ibv_get_device_index(list_[i]), i);
    guids.insert(ibv_get_device_guid(list_[i]));
  }
  EXPECT_EQ(list_[4], nullptr);
  EXPECT_EQ(guids.size(), 4u) << "each device has its own GUID";
}

TEST_F(Devices, DefaultIsOneDevice) {
  unsetenv("SOFTVERBS_DEVICES");
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(n, 1);
  EXPECT_STREQ(ibv_get_device_name(list[0]), "softverbs0");
  EXPECT_EQ(list[1], nullptr);
  ibv_free_device_list(list);
}

TEST_F(Devices, BadCountFailsWithEinvalAndAMessage) {
  for (const char* bad : {"0", "65", "abc", "4x", "-1", " 2", "99999999999999999999999"}) {
    setenv("SOFTVERBS_DEVICES", bad, 1);
    testing::internal::CaptureStderr();
    errno = 0;
    int n = -1;
    EXPECT_EQ(ibv_get_device_list(&n), nullptr) << bad;
    EXPECT_EQ(errno, EINVAL) << bad;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("SOFTVERBS_DEVICES="), std::string::npos) << bad << ": " << err;
  }
}

TEST_F(Devices, SixtyFourIsTheMost) {
  setenv("SOFTVERBS_DEVICES", "64", 1);
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  EXPECT_EQ(n, 64);
  EXPECT_STREQ(ibv_get_device_name(list[63]), "softverbs63");
  ibv_free_device_list(list);
}

TEST_F(Devices, EachDeviceIsAPortWithItsOwnLidAndGid) {
  OpenEnd(0, 0);
  OpenEnd(1, 1);
  EXPECT_NE(ends_[0].lid, 0);
  EXPECT_NE(ends_[1].lid, 0);
  EXPECT_NE(ends_[0].lid, ends_[1].lid);
  ibv_gid gid[2];
  ASSERT_EQ(ibv_query_gid(ends_[0].ctx, 1, 0, &gid[0]), 0);
  ASSERT_EQ(ibv_query_gid(ends_[1].ctx, 1, 0, &gid[1]), 0);
  EXPECT_NE(memcmp(&gid[0], &gid[1], sizeof gid[0]), 0);
  EXPECT_EQ(be64toh(gid[1].global.interface_id) & 0xffff, ends_[1].lid);
}

TEST_F(Devices, KeysOfTwoDevicesNeverCoincide) {
  OpenEnd(0, 0);
  OpenEnd(1, 1);
  std::set<uint32_t> keys;
  for (int round = 0; round < 8; ++round) {
    ibv_mr* a = Register(0, 0);
    ibv_mr* b = Register(1, 1);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    keys.insert(a->rkey);
    keys.insert(b->rkey);
  }
  EXPECT_EQ(keys.size(), 16u);
}

TEST_F(Devices, RdmaBetweenTwoDevicesWorksWithTheResponderDevicesRkey) {
  OpenEnd(0, 0);
  OpenEnd(1, 1);
  ASSERT_EQ(ends_[0].ConnectTo(ends_[1]), 0);
  ASSERT_EQ(ends_[1].ConnectTo(ends_[0]), 0);
  ibv_mr* local = Register(0, 0);
  ibv_mr* remote = Register(1, 1);
  ASSERT_NE(local, nullptr);
  ASSERT_NE(remote, nullptr);
  memset(buf_[1], 'r', kBytes);
  EXPECT_EQ(ends_[0].Rdma(IBV_WR_RDMA_READ, buf_[0], kBytes, local->lkey,
                          reinterpret_cast<uintptr_t>(buf_[1]), remote->rkey),
            IBV_WC_SUCCESS);
  EXPECT_EQ(memcmp(buf_[0], buf_[1], kBytes), 0);
}

TEST_F(Devices, RkeyOfOneDeviceFailsThroughAnotherDevicesQp) {
  OpenEnd(0, 0);
  OpenEnd(1, 2);
  ASSERT_EQ(ends_[0].ConnectTo(ends_[1]), 0);
  ASSERT_EQ(ends_[1].ConnectTo(ends_[0]), 0);
  ibv_mr* local = Register(0, 0);
  ASSERT_NE(local, nullptr);
  // The memory is registered, but on the requester's device (0), not on the
  // responder's (2): the responder's NIC does not know the key.
  ibv_mr* elsewhere = Register(0, 1);
  ASSERT_NE(elsewhere, nullptr);
  EXPECT_EQ(ends_[0].Rdma(IBV_WR_RDMA_WRITE, buf_[0], 64, local->lkey,
                          reinterpret_cast<uintptr_t>(buf_[1]), elsewhere->rkey),
            IBV_WC_REM_ACCESS_ERR);
}

TEST_F(Devices, LkeyOfOneDeviceFailsInAnotherDevicesSge) {
  OpenEnd(0, 0);
  OpenEnd(1, 1);
  ASSERT_EQ(ends_[0].ConnectTo(ends_[1]), 0);
  ASSERT_EQ(ends_[1].ConnectTo(ends_[0]), 0);
  ibv_mr* remote = Register(1, 1);
  ASSERT_NE(remote, nullptr);
  ibv_mr* on_device1 = Register(1, 0);  // the local buffer, but on the other device
  ASSERT_NE(on_device1, nullptr);
  EXPECT_EQ(ends_[0].Rdma(IBV_WR_RDMA_WRITE, buf_[0], 64, on_device1->lkey,
                          reinterpret_cast<uintptr_t>(buf_[1]), remote->rkey),
            IBV_WC_LOC_PROT_ERR);
}

TEST_F(Devices, TestEntryPointsFindTheKeysDevice) {
  OpenEnd(0, 0);
  OpenEnd(1, 3);
  ibv_mr* mr = Register(1, 2);
  ASSERT_NE(mr, nullptr);
  memset(buf_[2], 'k', 16);
  char out[16] = {};
  EXPECT_EQ(client_.remote_read(mr->rkey, reinterpret_cast<uintptr_t>(buf_[2]), out, sizeof out),
            IBV_WC_SUCCESS);
  EXPECT_EQ(out[15], 'k');
}

TEST_F(Devices, ABadForkModelFailsTheListWithEinval) {
  setenv("SOFTVERBS_FORK", "sometimes", 1);
  testing::internal::CaptureStderr();
  errno = 0;
  EXPECT_EQ(ibv_get_device_list(nullptr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  const std::string err = testing::internal::GetCapturedStderr();
  unsetenv("SOFTVERBS_FORK");
  EXPECT_NE(err.find("SOFTVERBS_FORK=sometimes"), std::string::npos) << err;
}

}  // namespace
}  // namespace softverbs
