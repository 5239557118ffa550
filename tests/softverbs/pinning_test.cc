// Real pinning: non-ODP MRs hold their pages through io_uring fixed buffers,
// so a device-side write lands in the pages registered, even after the
// application replaced the mapping (the stale-registration oracle).
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/softverbs/fixture.h"

namespace softverbs {
namespace {

constexpr size_t kBytes = 256 * 1024;

using Pinning = SoftverbsTest;

bool AllZero(const void* p, size_t n) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

TEST_F(Pinning, DeviceWriteLandsInCurrentMemory) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  std::vector<char> data(3 * 4096 + 17, 'x');
  const uintptr_t at = reinterpret_cast<uintptr_t>(buf) + 4000;
  ASSERT_EQ(client_.device_write(mr->lkey, at, data.data(), data.size()), 0);
  EXPECT_EQ(memcmp(buf + 4000, data.data(), data.size()), 0);
  EXPECT_TRUE(AllZero(buf, 4000));
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, kBytes);
}

TEST_F(Pinning, StaleRegistrationWritesIntoTheOldPages) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  memset(buf, 0, kBytes);  // fault the pages in before they are pinned
  ibv_mr* mr = ibv_reg_mr(pd_, buf, kBytes, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(munmap(buf, kBytes), 0);
  void* again = mmap(buf, kBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(again, buf) << "could not map the same address again";
  const char data[] = "written by the device";
  ASSERT_EQ(client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(buf), data, sizeof data), 0);
  // The write went to the pages pinned at registration; the CPU sees new,
  // zero-filled pages at the same address.
  EXPECT_TRUE(AllZero(buf, kBytes));
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, kBytes);
}

TEST_F(Pinning, DeviceWriteThroughUnknownLkeyIsEinval) {
  char byte = 1;
  EXPECT_EQ(client_.device_write(0xdead00, 0x1000, &byte, 1), EINVAL);
}

TEST_F(Pinning, DeviceWriteOutsideTheMrIsErange) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, kBytes / 2, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  char two[2] = {1, 2};
  const uintptr_t last = reinterpret_cast<uintptr_t>(buf) + kBytes / 2 - 1;
  EXPECT_EQ(client_.device_write(mr->lkey, last, two, 2), ERANGE);
  EXPECT_EQ(client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(buf) - 1, two, 1), ERANGE);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, kBytes);
}

TEST_F(Pinning, DeviceWriteNeedsLocalWrite) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, kBytes, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  char byte = 1;
  EXPECT_EQ(client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(buf), &byte, 1), EACCES);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, kBytes);
}

TEST_F(Pinning, DeviceWriteAddressesTheMrByIova) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  const uint64_t iova = 0x40000000;
  ibv_mr* mr = ibv_reg_mr_iova2(pd_, buf, kBytes, iova, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  const char data[] = "by iova";
  ASSERT_EQ(client_.device_write(mr->lkey, iova + 100, data, sizeof data), 0);
  EXPECT_STREQ(buf + 100, "by iova");
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  munmap(buf, kBytes);
}

TEST_F(Pinning, CountersTrackPinnedBytesAndLiveMrs) {
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  const softverbs_counters before = client_.Counters();
  // 100 bytes straddling a page boundary pin two pages.
  ibv_mr* mr = ibv_reg_mr(pd_, buf + 4096 - 50, 100, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  softverbs_counters during = client_.Counters();
  EXPECT_EQ(during.registrations, before.registrations + 1);
  EXPECT_EQ(during.live_mrs, before.live_mrs + 1);
  EXPECT_EQ(during.bytes_pinned, before.bytes_pinned + 2 * 4096);
  EXPECT_GE(during.peak_bytes_pinned, during.bytes_pinned);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  softverbs_counters after = client_.Counters();
  EXPECT_EQ(after.deregistrations, before.deregistrations + 1);
  EXPECT_EQ(after.bytes_pinned, before.bytes_pinned);
  EXPECT_EQ(after.live_mrs, before.live_mrs);
  munmap(buf, kBytes);
}

TEST(PinningTable, FullPinTableIsEnomem) {
  setenv("SOFTVERBS_SLOTS", "2", 1);
  setenv("SOFTVERBS_ODP", "none", 1);
  ibv_device** list = ibv_get_device_list(nullptr);
  ASSERT_NE(list, nullptr);
  ibv_context* ctx = ibv_open_device(list[0]);
  unsetenv("SOFTVERBS_SLOTS");
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr attr;
  ASSERT_EQ(ibv_query_device(ctx, &attr), 0);
  EXPECT_EQ(attr.max_mr, 2);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  static char buf[3][4096];
  ibv_mr* a = ibv_reg_mr(pd, buf[0], 4096, IBV_ACCESS_LOCAL_WRITE);
  ibv_mr* b = ibv_reg_mr(pd, buf[1], 4096, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd, buf[2], 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ASSERT_EQ(ibv_dereg_mr(a), 0);
  ibv_mr* c = ibv_reg_mr(pd, buf[2], 4096, IBV_ACCESS_LOCAL_WRITE);
  EXPECT_NE(c, nullptr) << "a freed slot is reused";
  EXPECT_EQ(ibv_dereg_mr(b), 0);
  if (c != nullptr) {
    EXPECT_EQ(ibv_dereg_mr(c), 0);
  }
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
  ibv_free_device_list(list);
}

TEST_F(Pinning, ConcurrentRegistrationsKeepTheCountersConsistent) {
  constexpr int kThreads = 4, kRounds = 200;
  char* buf = static_cast<char*>(MapPages(kBytes));
  ASSERT_NE(buf, nullptr);
  const softverbs_counters before = client_.Counters();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      char* mine = buf + t * (kBytes / kThreads);
      for (int i = 0; i < kRounds; ++i) {
        ibv_mr* mr = ibv_reg_mr(pd_, mine, kBytes / kThreads, IBV_ACCESS_LOCAL_WRITE);
        if (mr == nullptr) {
          ++failures;
          continue;
        }
        char v = static_cast<char>(i);
        if (client_.device_write(mr->lkey, reinterpret_cast<uintptr_t>(mine), &v, 1) != 0 ||
            mine[0] != v || ibv_dereg_mr(mr) != 0) {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  const softverbs_counters after = client_.Counters();
  EXPECT_EQ(after.registrations - before.registrations, uint64_t{kThreads * kRounds});
  EXPECT_EQ(after.deregistrations - before.deregistrations, uint64_t{kThreads * kRounds});
  EXPECT_EQ(after.bytes_pinned, before.bytes_pinned);
  munmap(buf, kBytes);
}

}  // namespace
}  // namespace softverbs
