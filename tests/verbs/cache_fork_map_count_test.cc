// The cache under libibverbs' fork protection (softverbs with
// SOFTVERBS_FORK=dontfork and RDMAV_FORK_SAFE=1): every registration is
// MADV_DONTFORK'ed, which splits mappings. 40,000 cached one-page regions of
// adjacent pages, and 40,000 with an unmapped page between each two, keep the
// process's map count within +1,000 of where it started. A process that may
// not pin 40,000 pages (twice their 160 MiB under RLIMIT_MEMLOCK, without
// CAP_IPC_LOCK) caches as many as half its limit pins, leaving the other half
// to softverbs' io_uring rings and the cache's pin budget headroom, with the
// same assertions and the full run's allowance per region (+1,000 per
// 40,000, at least +64 for what does not grow with the regions: the cache's
// and the allocator's own mappings, which a sanitizer's allocator adds to).
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "mrcache/mrcache.h"
#include "tests/softverbs/softverbs_client.h"
#include "tests/softverbs/vm_maps.h"

namespace {

constexpr int kFullScaleRegions = 40000;
constexpr long kFullScaleMapCountAllowance = 1000;
constexpr long kLeastMapCountAllowance = 64;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

bool HasCapIpcLock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32));
}

// How many one-page regions a test caches: 40,000 where this process may pin
// twice their bytes, else as many as half its RLIMIT_MEMLOCK pins (0 if the
// limit cannot be read).
int RegionsThisProcessMayPin() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return 0;
  if (HasCapIpcLock() || limit.rlim_cur == RLIM_INFINITY ||
      limit.rlim_cur >= 2 * kFullScaleRegions * kPage) {
    return kFullScaleRegions;
  }
  return static_cast<int>(limit.rlim_cur / 2 / kPage);
}

// The mappings `regions` cached regions may add: the full run's +1,000 for
// 40,000 in proportion, never below kLeastMapCountAllowance.
long MapCountAllowance(int regions) {
  return std::max(kLeastMapCountAllowance,
                  kFullScaleMapCountAllowance * regions / kFullScaleRegions);
}

class CacheForkMapCount : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(client_.loaded()) << "libibverbs.so.1 is not softverbs";
    regions_ = RegionsThisProcessMayPin();
    ASSERT_GT(regions_, 0) << "RLIMIT_MEMLOCK lets this process pin no page";
    if (regions_ < kFullScaleRegions) {
      printf("RLIMIT_MEMLOCK allows %d one-page regions (half the limit), not %d\n", regions_,
             kFullScaleRegions);
    }
    before_ = client_.Counters();
    list_ = ibv_get_device_list(nullptr);
    ASSERT_NE(list_, nullptr);
    ASSERT_EQ(ibv_is_fork_initialized(), IBV_FORK_ENABLED);
    ctx_ = ibv_open_device(list_[0]);
    ASSERT_NE(ctx_, nullptr);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    ASSERT_EQ(mrc_config_create(&cfg_), 0);
    ASSERT_EQ(mrc_config_set(cfg_, "registrar", "verbs"), 0);
    ASSERT_EQ(mrc_config_set(cfg_, "monitor", "none"), 0);
    ASSERT_EQ(mrc_config_set(cfg_, "max_regions", "100000"), 0);
    ASSERT_EQ(mrc_cache_create(cfg_, pd_, &cache_), 0);
  }

  void TearDown() override {
    mrc_cache_destroy(cache_);
    mrc_config_destroy(cfg_);
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_ != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
    if (list_ != nullptr) ibv_free_device_list(list_);
    const softverbs_counters now = client_.Counters();
    EXPECT_EQ(now.registrations - before_.registrations,
              now.deregistrations - before_.deregistrations)
        << "registrations != deregistrations";
  }

  softverbs::Client client_;
  softverbs_counters before_{};
  int regions_ = 0;  // cached by each test
  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  mrc_config_t* cfg_ = nullptr;
  mrc_cache_t* cache_ = nullptr;
};

TEST_F(CacheForkMapCount,
       RegionsOfAdjacentPagesKeepTheMapCountAtFortyThousandOrAsManyAsHalfTheMemlockLimitPins) {
  const size_t bytes = regions_ * kPage;
  char* buf = static_cast<char*>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(buf, MAP_FAILED);
  const long before = softverbs::MapCount();
  for (int i = 0; i < regions_; ++i) {
    mrc_region_t* region = nullptr;
    // REMOTE_READ: a pin without write access, so softverbs' max_mr
    // (SOFTVERBS_MAX_MR), not its 16,384-entry io_uring table, is the limit.
    ASSERT_EQ(mrc_get(cache_, buf + i * kPage, kPage, IBV_ACCESS_REMOTE_READ, &region), 0)
        << "get " << i;
    ASSERT_EQ(mrc_put(cache_, region), 0);
  }
  mrc_stats_t stats{};
  ASSERT_EQ(mrc_stats_sized(cache_, &stats, sizeof stats), 0);
  const long cached = softverbs::MapCount();
  printf("map count: %ld before, %ld with %llu regions cached (+%ld allowed)\n", before, cached,
         static_cast<unsigned long long>(stats.regions), MapCountAllowance(regions_));
  EXPECT_EQ(stats.regions, static_cast<uint64_t>(regions_));
  EXPECT_LE(cached - before, MapCountAllowance(regions_));
  ASSERT_EQ(mrc_flush(cache_), 0);
  munmap(buf, bytes);
}

TEST_F(CacheForkMapCount,
       RegionsWithUnmappedGapsKeepTheMapCountAtFortyThousandOrAsManyAsHalfTheMemlockLimitPins) {
  const size_t bytes = 2 * regions_ * kPage;
  char* buf = static_cast<char*>(
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(buf, MAP_FAILED);
  // Every other page unmapped: one-page mappings, nothing between them.
  for (int i = 0; i < regions_; ++i) ASSERT_EQ(munmap(buf + (2 * i + 1) * kPage, kPage), 0);
  const long before = softverbs::MapCount();
  for (int i = 0; i < regions_; ++i) {
    mrc_region_t* region = nullptr;
    ASSERT_EQ(mrc_get(cache_, buf + 2 * i * kPage, kPage, IBV_ACCESS_REMOTE_READ, &region), 0)
        << "get " << i;
    ASSERT_EQ(mrc_put(cache_, region), 0);
  }
  mrc_stats_t stats{};
  ASSERT_EQ(mrc_stats_sized(cache_, &stats, sizeof stats), 0);
  const long cached = softverbs::MapCount();
  printf(
      "map count: %ld before, %ld with %llu regions cached one unmapped page apart (+%ld "
      "allowed)\n",
      before, cached, static_cast<unsigned long long>(stats.regions), MapCountAllowance(regions_));
  EXPECT_EQ(stats.regions, static_cast<uint64_t>(regions_));
  EXPECT_LE(cached - before, MapCountAllowance(regions_));
  ASSERT_EQ(mrc_flush(cache_), 0);
  for (int i = 0; i < regions_; ++i) munmap(buf + 2 * i * kPage, kPage);
}

}  // namespace
