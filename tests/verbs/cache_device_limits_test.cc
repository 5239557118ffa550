// cache_device_limits_test.cc: the cache on the verbs registrar against
// softverbs' device limits. With SOFTVERBS_MAX_MR_SIZE=1M (the device's
// max_mr_size) no region the cache registers is longer: merging and bridging
// stop below it, and a 2 MiB request fails EINVAL with a logged message
// naming max_mr_size, registering nothing. With SOFTVERBS_MAX_MR (max_mr)
// reached by cached regions, a miss evicts unused ones and succeeds; with
// every one held it fails ENOMEM. Registrations == deregistrations.
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/registrars/verbs_registrar.h"
#include "tests/cache/counting_registrar.h"
#include "tests/cache/region_limit_cases.h"
#include "tests/softverbs/softverbs_client.h"

namespace mrcache {
namespace {

using testing::CountingRegistrar;
using testing::kMiB;
using testing::LimitArea;
using testing::LimitProbe;
using testing::RegistrarCounters;

class CacheDeviceLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(client_.loaded()) << "libibverbs.so.1 is not softverbs";
    before_ = client_.Counters();
    ASSERT_NE(area_.base(), nullptr);
    config_.registrar = "verbs";
  }

  void TearDown() override {
    cache_.reset();
    EXPECT_EQ(counters_->registrations.load(), counters_->deregistrations.load());
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_ != nullptr) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
    if (list_ != nullptr) ibv_free_device_list(list_);
    unsetenv("SOFTVERBS_MAX_MR_SIZE");
    unsetenv("SOFTVERBS_MAX_MR");
    const softverbs_counters now = client_.Counters();
    EXPECT_EQ(now.live_mrs, before_.live_mrs) << "the test leaked MRs";
  }

  // Opens softverbs0 with `variable`=`value` (the device reads it then).
  void Open(const char* variable, const char* value) {
    if (variable != nullptr) setenv(variable, value, 1);
    list_ = ibv_get_device_list(nullptr);
    ASSERT_NE(list_, nullptr);
    ctx_ = ibv_open_device(list_[0]);
    ASSERT_NE(ctx_, nullptr) << "errno " << errno;
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
  }

  // The cache over the verbs registrar, counted.
  Cache& cache() {
    if (!cache_) {
      auto verbs = MakeVerbsRegistrar(pd_, config_);
      EXPECT_TRUE(verbs.ok()) << verbs.status();
      auto made =
          Cache::Create(config_, std::make_unique<CountingRegistrar>(std::move(*verbs), counters_));
      EXPECT_TRUE(made.ok()) << made.status();
      cache_ = std::move(*made);
    }
    return *cache_;
  }

  softverbs::Client client_;
  softverbs_counters before_{};
  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  Config config_;
  std::shared_ptr<RegistrarCounters> counters_ = std::make_shared<RegistrarCounters>();
  LimitArea area_;
  std::unique_ptr<Cache> cache_;
};

TEST_F(CacheDeviceLimits, TheRegistrarReportsTheDevicesMaxMrSize) {
  Open("SOFTVERBS_MAX_MR_SIZE", "1M");
  EXPECT_EQ(cache().registrar().max_region_bytes(), kMiB);
}

TEST_F(CacheDeviceLimits, ADeviceWithoutAMaxMrSizeLimitsNothing) {
  Open(nullptr, nullptr);
  EXPECT_EQ(cache().registrar().max_region_bytes(), 0u);
}

TEST_F(CacheDeviceLimits, MaxRegionBytesBelowTheDevicesLimitWins) {
  Open("SOFTVERBS_MAX_MR_SIZE", "1M");
  config_.max_region_bytes = 256 << 10;
  EXPECT_EQ(cache().registrar().max_region_bytes(), 256u << 10);
}

TEST_F(CacheDeviceLimits, MergingNeverMakesARegionAboveMaxMrSize) {
  Open("SOFTVERBS_MAX_MR_SIZE", "1M");
  LimitProbe probe(counters_.get());
  testing::GetsThatWouldMergePastOneMiB(cache(), area_, kAccessLocalWrite);
  testing::GetsThatWouldMergePastOneMiB(cache(), area_, kAccessLocalWrite | kAccessRemoteRead);
  EXPECT_LE(probe.longest(), kMiB);
  EXPECT_TRUE(probe.refusals().empty()) << probe.refusals().front();
}

TEST_F(CacheDeviceLimits, BridgingNeverMakesARegionAboveMaxMrSize) {
  Open("SOFTVERBS_MAX_MR_SIZE", "1M");
  config_.monitor = testing::CompleteMonitor();
  if (config_.monitor.empty()) GTEST_SKIP() << "no monitor that bridging needs in this build";
  LimitProbe probe(counters_.get());
  testing::GetsThatWouldBridgePastOneMiB(cache(), area_);
  EXPECT_LE(probe.longest(), kMiB);
  EXPECT_TRUE(probe.refusals().empty()) << probe.refusals().front();
}

TEST_F(CacheDeviceLimits, ARequestAboveMaxMrSizeIsEinvalNamingIt) {
  Open("SOFTVERBS_MAX_MR_SIZE", "1M");
  LimitProbe probe(counters_.get());
  for (int access : {static_cast<int>(kAccessLocalWrite), kAccessLocalWrite | kAccessRemoteRead}) {
    auto region = cache().Get(area_.base() + kMiB, 2 * kMiB, access);
    ASSERT_FALSE(region.ok());
    EXPECT_EQ(StatusToErrno(region.status()), EINVAL);
    EXPECT_NE(region.status().message().find("max_mr_size (softverbs0) of 1048576 bytes"),
              std::string::npos)
        << region.status();
  }
  ASSERT_FALSE(probe.refusals().empty()) << "the refusal was not logged";
  EXPECT_NE(probe.refusals().back().find("max_mr_size"), std::string::npos)
      << probe.refusals().back();
  EXPECT_EQ(counters_->registrations.load(), 0) << "registered something else instead";
}

TEST_F(CacheDeviceLimits, WhenMaxMrIsReachedAMissEvictsUnusedRegionsAndSucceeds) {
  Open("SOFTVERBS_MAX_MR", "4");
  config_.monitor = "none";  // nothing bridges: one region per get
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(
        testing::GetAndPut(cache(), area_.base() + (1 + 2 * i) * page, 100, kAccessLocalWrite),
        page)
        << "get " << i;
  }
  const CacheStats stats = cache().stats();
  EXPECT_EQ(stats.misses, 8u);
  EXPECT_GE(stats.evictions, 4u);
  EXPECT_EQ(stats.registrar_failures, 0u);
  EXPECT_LE(counters_->live.size(), 4u);
}

TEST_F(CacheDeviceLimits, WhenMaxMrIsReachedByHeldRegionsAMissIsEnomem) {
  Open("SOFTVERBS_MAX_MR", "4");
  config_.monitor = "none";
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<RegionRef> held;
  for (int i = 0; i < 4; ++i) {
    auto region = cache().Get(area_.base() + (1 + 2 * i) * page, 100, kAccessLocalWrite);
    ASSERT_TRUE(region.ok()) << region.status();
    held.push_back(std::move(*region));
  }
  auto fifth = cache().Get(area_.base() + 9 * page, 100, kAccessLocalWrite);
  ASSERT_FALSE(fifth.ok());
  EXPECT_EQ(StatusToErrno(fifth.status()), ENOMEM) << fifth.status();
}

}  // namespace
}  // namespace mrcache
