// Device limits: SOFTVERBS_MAX_MR_SIZE is the device's max_mr_size (a longer
// MR is EINVAL) and SOFTVERBS_MAX_MR (default SOFTVERBS_SLOTS) its max_mr
// (one MR more is ENOMEM, as the kernel answers when a device runs out of MR
// entries), both reported by ibv_query_device and ibv_query_device_ex.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <string>
#include <vector>

#include "tests/softverbs/softverbs_client.h"

namespace softverbs {
namespace {

constexpr size_t kMiB = 1 << 20;

class DeviceLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(client_.loaded()) << "libibverbs.so.1 is not softverbs";
    before_ = client_.Counters();
    list_ = ibv_get_device_list(nullptr);
    ASSERT_NE(list_, nullptr);
    void* p = mmap(nullptr, 4 * kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    buf_ = static_cast<char*>(p);
  }

  void TearDown() override {
    for (ibv_mr* mr : mrs_) EXPECT_EQ(ibv_dereg_mr(mr), 0);
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_ != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
    ibv_free_device_list(list_);
    munmap(buf_, 4 * kMiB);
    unsetenv("SOFTVERBS_MAX_MR_SIZE");
    unsetenv("SOFTVERBS_SLOTS");
    unsetenv("SOFTVERBS_MAX_MR");
    const softverbs_counters now = client_.Counters();
    EXPECT_EQ(now.live_mrs, before_.live_mrs) << "the test leaked MRs";
  }

  // Opens softverbs0 (with the environment as set now) and allocates a PD.
  void Open() {
    ctx_ = ibv_open_device(list_[0]);
    ASSERT_NE(ctx_, nullptr) << "errno " << errno;
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
  }

  ibv_mr* Register(size_t offset, size_t length, int access) {
    ibv_mr* mr = ibv_reg_mr(pd_, buf_ + offset, length, access);
    if (mr != nullptr) mrs_.push_back(mr);
    return mr;
  }

  Client client_;
  softverbs_counters before_{};
  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  char* buf_ = nullptr;
  std::vector<ibv_mr*> mrs_;
};

TEST_F(DeviceLimits, MaxMrSizeIsUnlimitedByDefault) {
  Open();
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_EQ(attr.max_mr_size, UINT64_MAX);
  EXPECT_EQ(attr.max_mr, 16384);
}

TEST_F(DeviceLimits, MaxMrSizeIsReportedByBothQueries) {
  setenv("SOFTVERBS_MAX_MR_SIZE", "1M", 1);
  Open();
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_EQ(attr.max_mr_size, kMiB);
  ibv_device_attr_ex ex{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &ex), 0);
  EXPECT_EQ(ex.orig_attr.max_mr_size, kMiB);
}

TEST_F(DeviceLimits, MaxMrSizeTakesPlainBytesAndSuffixes) {
  for (const auto& [text, bytes] : std::vector<std::pair<const char*, uint64_t>>{
           {"4096", 4096}, {"64k", 64 << 10}, {"2G", 2ull << 30}, {"1T", 1ull << 40}}) {
    setenv("SOFTVERBS_MAX_MR_SIZE", text, 1);
    ibv_context* ctx = ibv_open_device(list_[0]);
    ASSERT_NE(ctx, nullptr) << text;
    ibv_device_attr attr{};
    EXPECT_EQ(ibv_query_device(ctx, &attr), 0);
    EXPECT_EQ(attr.max_mr_size, bytes) << text;
    EXPECT_EQ(ibv_close_device(ctx), 0);
  }
}

TEST_F(DeviceLimits, RegistrationUpToMaxMrSizeSucceeds) {
  setenv("SOFTVERBS_MAX_MR_SIZE", "1M", 1);
  Open();
  EXPECT_NE(Register(0, kMiB, IBV_ACCESS_LOCAL_WRITE), nullptr) << "errno " << errno;
  EXPECT_NE(Register(100, kMiB, IBV_ACCESS_REMOTE_READ), nullptr) << "errno " << errno;
}

TEST_F(DeviceLimits, RegistrationAboveMaxMrSizeIsEinval) {
  setenv("SOFTVERBS_MAX_MR_SIZE", "1M", 1);
  Open();
  errno = 0;
  EXPECT_EQ(Register(0, kMiB + 1, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(Register(0, 2 * kMiB, IBV_ACCESS_REMOTE_READ), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(DeviceLimits, ReregAboveMaxMrSizeIsEinvalAndKeepsTheMr) {
  setenv("SOFTVERBS_MAX_MR_SIZE", "1M", 1);
  Open();
  ibv_mr* mr = Register(0, kMiB, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, buf_, 2 * kMiB, 0),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(mr->length, kMiB);
}

TEST_F(DeviceLimits, BadMaxMrSizeFailsOpenWithEinvalAndAMessage) {
  for (const char* bad : {"0", "1X", "M", "-4096", "1.5M", "99999999999T"}) {
    setenv("SOFTVERBS_MAX_MR_SIZE", bad, 1);
    testing::internal::CaptureStderr();
    errno = 0;
    EXPECT_EQ(ibv_open_device(list_[0]), nullptr) << bad;
    EXPECT_EQ(errno, EINVAL) << bad;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("SOFTVERBS_MAX_MR_SIZE="), std::string::npos) << err;
  }
}

TEST_F(DeviceLimits, MaxMrIsTheSlotCount) {
  setenv("SOFTVERBS_SLOTS", "3", 1);
  Open();
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_EQ(attr.max_mr, 3);
}

TEST_F(DeviceLimits, OneMrMoreThanMaxMrIsEnomemWhateverItsPinning) {
  setenv("SOFTVERBS_SLOTS", "3", 1);
  Open();
  // Written to (io_uring), read-only (mlock) and written to again: each
  // counts against max_mr.
  ASSERT_NE(Register(0, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  ASSERT_NE(Register(4096, 4096, IBV_ACCESS_REMOTE_READ), nullptr) << "errno " << errno;
  ASSERT_NE(Register(8192, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  for (int access : {IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ}) {
    errno = 0;
    EXPECT_EQ(Register(12288, 4096, access), nullptr);
    EXPECT_EQ(errno, ENOMEM);
  }
  // A deregistration frees an entry.
  EXPECT_EQ(ibv_dereg_mr(mrs_.back()), 0);
  mrs_.pop_back();
  EXPECT_NE(Register(12288, 4096, IBV_ACCESS_REMOTE_READ), nullptr);
}

TEST_F(DeviceLimits, MaxMrCanExceedTheSlotTableForMrsWithoutAWriteRight) {
  setenv("SOFTVERBS_SLOTS", "2", 1);
  setenv("SOFTVERBS_MAX_MR", "4", 1);
  Open();
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_EQ(attr.max_mr, 4);
  ASSERT_NE(Register(0, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  ASSERT_NE(Register(4096, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  errno = 0;
  EXPECT_EQ(Register(8192, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr) << "the pin table is full";
  EXPECT_EQ(errno, ENOMEM);
  ASSERT_NE(Register(8192, 4096, IBV_ACCESS_REMOTE_READ), nullptr) << "errno " << errno;
  ASSERT_NE(Register(12288, 4096, IBV_ACCESS_REMOTE_READ), nullptr) << "errno " << errno;
  errno = 0;
  EXPECT_EQ(Register(16384, 4096, IBV_ACCESS_REMOTE_READ), nullptr) << "max_mr reached";
  EXPECT_EQ(errno, ENOMEM);
}

TEST_F(DeviceLimits, BadMaxMrFailsOpenWithEinvalAndAMessage) {
  for (const char* bad : {"0", "16777217", "many", "1K"}) {
    setenv("SOFTVERBS_MAX_MR", bad, 1);
    testing::internal::CaptureStderr();
    errno = 0;
    EXPECT_EQ(ibv_open_device(list_[0]), nullptr) << bad;
    EXPECT_EQ(errno, EINVAL) << bad;
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("SOFTVERBS_MAX_MR="), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace softverbs
