// pluggable_eviction_test.cc: the eviction policy is a component the cache
// takes (CacheImpl::Create's `eviction`): a policy written here, plain LRU
// with no periods of use, no size classes and no admission, is plugged in
// with no other file changed, and the cache evicts what it names and admits
// what it admits. Counted through stats, never timed; every test ends with
// registrations == deregistrations (the fixture).
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/core/cache_impl.h"
#include "mrcache/core/eviction.h"
#include "mrcache/registrars/sim_registrar.h"
#include "tests/cache/spaced_regions_fixture.h"

namespace mrcache {
namespace {

// Least recently placed first; a region hit since it was placed goes back to
// the head (the cache tells of write-locked uses only: Use knows the rest).
class PlainLru final : public EvictionPolicy {
 public:
  void Installed(Region* r, uint64_t tick) override {
    r->lru_stamp = r->install_stamp = tick;
    PushFront(r);
  }
  void Merged(Region*, const Region*) override {}
  void Touched(Region* r, uint64_t tick) override {
    r->lru_stamp = tick;
    Unlink(r);
    PushFront(r);
  }
  void Removed(Region* r) override {
    Unlink(r);
    ++removed;
  }
  void Clear() override { head_ = tail_ = nullptr; }
  size_t StepsFor(size_t regions) const override { return 2 * regions + 1; }
  Region* NextVictim(Pass* pass) override {
    while (tail_ != nullptr && pass->steps_left > 0) {
      --pass->steps_left;
      Region* r = tail_;
      if (pass->use->UnusedSincePlaced(r)) {
        victims.push_back(r->start);
        return r;
      }
      Touched(r, pass->tick);
    }
    return nullptr;
  }
  void ExpectEvictionsForBytes() override {}
  bool AdmitsToFullCache(uint64_t, uint64_t) override { return true; }

  std::vector<uintptr_t> victims;  // the start of each region named
  size_t removed = 0;

 private:
  void PushFront(Region* r) {
    r->lru_prev = nullptr;
    r->lru_next = head_;
    if (head_ != nullptr) head_->lru_prev = r;
    head_ = r;
    if (tail_ == nullptr) tail_ = r;
  }
  void Unlink(Region* r) {
    if (r->lru_prev != nullptr) r->lru_prev->lru_next = r->lru_next;
    if (r->lru_next != nullptr) r->lru_next->lru_prev = r->lru_prev;
    if (head_ == r) head_ = r->lru_next;
    if (tail_ == r) tail_ = r->lru_prev;
    r->lru_prev = r->lru_next = nullptr;
  }
  Region* head_ = nullptr;
  Region* tail_ = nullptr;
};

class PluggableEvictionTest : public testing::SpacedRegionsTest {
 protected:
  void Create(size_t max_regions) {
    Config config;
    config.monitor = "none";
    config.sim_base_ns = config.sim_page_ns = 0;
    config.sim_mlock = false;
    config.max_regions = max_regions;
    config.max_merge_bytes = 0;
    config.bridge_bytes = 0;
    auto policy = std::make_unique<PlainLru>();
    lru_ = policy.get();
    auto cache = CacheImpl::Create(config, MakeSimRegistrar(config), std::move(policy));
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
  }
  uintptr_t RegionStart(size_t i) const {
    return reinterpret_cast<uintptr_t>(Spot(i)) & ~(uintptr_t{kPage} - 1);
  }

  PlainLru* lru_ = nullptr;  // owned by cache_
};

TEST_F(PluggableEvictionTest, TheCacheEvictsTheRegionThePluggedPolicyNames) {
  Create(3);
  for (size_t i = 0; i < 4; ++i) GetPut(Spot(i));
  ASSERT_EQ(lru_->victims.size(), 1u);
  EXPECT_EQ(lru_->victims[0], RegionStart(0));
  const CacheStats s = cache_->stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.regions, 3u);
}

TEST_F(PluggableEvictionTest, AHitSinceInstalledSavesARegionFromThePluggedPolicy) {
  Create(3);
  for (size_t i = 0; i < 3; ++i) GetPut(Spot(i));
  GetPut(Spot(0));  // a hit: region 0 is no longer the least recently used
  GetPut(Spot(3));
  ASSERT_EQ(lru_->victims.size(), 1u);
  EXPECT_EQ(lru_->victims[0], RegionStart(1));
}

TEST_F(PluggableEvictionTest, APolicyThatAdmitsEveryMissCachesAFullCachesFirstMiss) {
  // ClockEviction would serve this miss by a registration of its own
  // (admission_test.cc); PlainLru admits it.
  Create(ClockEviction::kAdmissionMinRegions);
  for (size_t i = 0; i <= ClockEviction::kAdmissionMinRegions; ++i) GetPut(Spot(i));
  const CacheStats s = cache_->stats();
  EXPECT_EQ(s.bypassed, 0u);
  EXPECT_EQ(s.evictions, 1u);
}

TEST_F(PluggableEvictionTest, ThePolicyIsToldOfEveryRegionThatLeaves) {
  Create(100);
  for (size_t i = 0; i < 5; ++i) GetPut(Spot(i));
  ASSERT_TRUE(cache_->Invalidate(Spot(2), kPage).ok());
  EXPECT_EQ(lru_->removed, 1u);
  ASSERT_TRUE(cache_->Flush().ok());
  EXPECT_EQ(lru_->removed, 5u);
}

}  // namespace
}  // namespace mrcache
