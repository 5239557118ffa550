// admission_test.cc: which misses a full cache admits (CacheImpl's admission
// rule, README, "Admission when the cache is full"). With max_regions of at least 64, a
// miss that finds the cache full by count and would register exactly its
// own pages is cached only if the same pages missed lately; otherwise it
// gets a registration of its own, deregistered at its put, and evicts
// nothing. Pages that come back are cached at their second miss; a miss that
// merges, and any miss of a smaller cache, is cached at once; a refused
// registration of its own falls back to evicting. Counted through stats and
// the registrar's calls, never timed; every test ends with registrations ==
// deregistrations (the fixture).
#include <cerrno>
#include <memory>

#include <gtest/gtest.h>

#include "mrcache/core/cache_impl.h"
#include "mrcache/registrars/sim_registrar.h"
#include "tests/cache/counting_registrar.h"
#include "tests/cache/spaced_regions_fixture.h"

namespace mrcache {
namespace {

using testing::CountingRegistrar;
using testing::RegistrarCounters;

class AdmissionTest : public testing::SpacedRegionsTest {
 protected:
  static constexpr size_t kFull = 64;  // ClockEviction::kAdmissionMinRegions

  // A cache of `max_regions` over a counted sim registrar; merging as asked.
  void Create(size_t max_regions, bool merge = false) {
    Config config;
    config.monitor = "none";
    config.sim_base_ns = config.sim_page_ns = 0;
    config.sim_mlock = false;
    config.max_regions = max_regions;
    config.max_merge_bytes = merge ? size_t{1} << 30 : 0;
    config.bridge_bytes = 0;
    auto cache = CacheImpl::Create(
        config, std::make_unique<CountingRegistrar>(MakeSimRegistrar(config), counters_));
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
  }
  // Regions 0 .. n-1, each got and put once.
  void Fill(size_t n) {
    for (size_t i = 0; i < n; ++i) GetPut(Spot(i));
  }

  std::shared_ptr<RegistrarCounters> counters_ = std::make_shared<RegistrarCounters>();
};

TEST_F(AdmissionTest, AFullCachesFirstMissOfNewPagesIsRegisteredForItselfAndDeregisteredAtPut) {
  Create(kFull);
  Fill(kFull);
  const CacheStats before = cache_->stats();
  GetPut(Spot(kFull));
  const CacheStats after = cache_->stats();
  EXPECT_EQ(after.registrations, before.registrations + 1);
  EXPECT_EQ(after.deregistrations, before.deregistrations + 1) << "deregistered at its put";
  EXPECT_EQ(after.evictions, 0u) << "nothing cached made room for it";
  EXPECT_EQ(after.bypassed, before.bypassed + 1);
  EXPECT_EQ(after.regions, kFull);
  EXPECT_EQ(after.misses, before.misses + 1);
}

TEST_F(AdmissionTest, PagesThatMissAgainAreCached) {
  Create(kFull);
  Fill(kFull);
  GetPut(Spot(kFull));  // its own registration
  GetPut(Spot(kFull));  // missed lately: cached, the least recently used goes
  CacheStats s = cache_->stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.bypassed, 1u);
  const uint64_t registrations = s.registrations;
  GetPut(Spot(kFull));
  s = cache_->stats();
  EXPECT_EQ(s.registrations, registrations) << "the third get hits";
}

TEST_F(AdmissionTest, PagesAskedForOnceDoNotPushOutRegionsInUse) {
  Create(kFull);
  Fill(kFull);
  for (size_t i = 0; i < 100; ++i) {
    GetPut(Spot(kFull + i));  // a scan: each page once
    GetPut(Spot(i % kFull));  // the working set keeps hitting
  }
  // Without admission each scanned page would evict a region in use: 100
  // evictions. A scanned page whose filter bit another page set is taken as
  // seen (seen_filter.h: about 2.4 of 100 pages in its 2,048 bits, as many
  // whatever the addresses) and cached, evicting a region of the working
  // set; that region is registered for itself at its next get and cached
  // at the one after, evicting the scanned page: about two evictions for
  // each. The bounds hold up to 15 such pages (P about 1e-8).
  const CacheStats s = cache_->stats();
  EXPECT_LE(s.evictions, 30u);
  EXPECT_GE(s.bypassed, 85u);
}

TEST_F(AdmissionTest, AMissThatMergesIsCachedAtOnce) {
  Create(kFull, /*merge=*/true);
  Fill(kFull);
  // Two pages from region 0's page on: overlaps region 0, so the union is
  // registered (a merge), not the request alone.
  auto r = cache_->Acquire(Spot(0), 2 * kPage, kRW);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(cache_->Put(*r).ok());
  const CacheStats s = cache_->stats();
  EXPECT_EQ(s.bypassed, 0u);
  EXPECT_EQ(s.merges, 1u);
}

TEST_F(AdmissionTest, ACacheOfFewerThan64RegionsCachesEveryMiss) {
  Create(kFull - 1);
  Fill(kFull - 1);
  GetPut(Spot(kFull));
  const CacheStats s = cache_->stats();
  EXPECT_EQ(s.bypassed, 0u);
  EXPECT_EQ(s.evictions, 1u);
}

TEST_F(AdmissionTest, ARefusedRegistrationOfItsOwnFallsBackToEvicting) {
  Create(kFull);
  Fill(kFull);
  counters_->fail_errno = ENOMEM;
  counters_->fail_count = 1;  // the registration of its own
  GetPut(Spot(kFull));
  const CacheStats s = cache_->stats();
  EXPECT_EQ(counters_->faults_injected.load(), 1);
  EXPECT_EQ(s.bypassed, 0u);
  EXPECT_EQ(s.evictions, 1u) << "the normal path made room and registered it";
  EXPECT_EQ(s.registrar_failures, 0u) << "a refusal the cache recovered from";
  EXPECT_EQ(s.regions, kFull);
}

}  // namespace
}  // namespace mrcache
