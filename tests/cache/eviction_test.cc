// eviction_test.cc: ClockEviction on its own (eviction.h), with Regions made
// here and a Use probe that says which of them are in use: which region a
// pass takes, which it places again, and which misses a full cache admits.
// No cache, no registrar, no lock: the policy is a plain object.
#include "mrcache/core/eviction.h"

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace mrcache {
namespace {

using Goal = EvictionPolicy::Goal;

// Regions "in use": held, or hit since placed.
class FakeUse : public EvictionPolicy::Use {
 public:
  bool UnusedSincePlaced(const Region* r) override { return used.count(r) == 0; }
  std::set<const Region*> used;
};

class ClockEvictionTest : public ::testing::Test {
 protected:
  static constexpr size_t kPage = 4096;

  // Installs a region of `pages` pages at the next free address.
  Region* Install(size_t pages = 1) {
    regions_.emplace_back(new Region);
    Region* r = regions_.back().get();
    r->start = next_;
    r->end = next_ + pages * kPage;
    next_ = r->end + kPage;
    policy_.Installed(r, ++tick_);
    return r;
  }
  // The next victim of a pass for `goal`, removed from the policy as the
  // cache would.
  Region* Evict(Goal goal = Goal::kRegions) {
    EvictionPolicy::Pass pass{goal, ++tick_, policy_.StepsFor(regions_.size()), &use_};
    Region* victim = policy_.NextVictim(&pass);
    if (victim != nullptr) policy_.Removed(victim);
    return victim;
  }

  ClockEviction policy_{16};
  FakeUse use_;
  uint64_t tick_ = 0;
  uintptr_t next_ = 0x100000;
  std::vector<std::unique_ptr<Region>> regions_;
};

TEST_F(ClockEvictionTest, TakesTheLeastRecentlyInstalledUnusedRegion) {
  Region* a = Install();
  Region* b = Install();
  Install();
  EXPECT_EQ(Evict(), a);
  EXPECT_EQ(Evict(), b);
}

TEST_F(ClockEvictionTest, ATouchedRegionGoesLast) {
  Region* a = Install();
  Region* b = Install();
  Region* c = Install();
  policy_.Touched(a, ++tick_);
  EXPECT_EQ(Evict(), b);
  EXPECT_EQ(Evict(), c);
  EXPECT_EQ(Evict(), a);
}

TEST_F(ClockEvictionTest, ARegionInUseIsNeverTaken) {
  Region* a = Install();
  Region* b = Install();
  use_.used = {a, b};
  EXPECT_EQ(Evict(), nullptr) << "every region is in use: the pass gives up";
  use_.used = {a};
  EXPECT_EQ(Evict(), b);
}

TEST_F(ClockEvictionTest, ARegionUsedInAPassOutlivesOneUsedOnceForRegions) {
  Region* popular = Install();
  Region* once = Install();
  use_.used = {popular};
  // The pass finds `popular` used (a period of use, back to the head) and
  // takes `once`.
  EXPECT_EQ(Evict(), once);
  EXPECT_EQ(popular->periods_used, 1);
  use_.used.clear();
  Region* later = Install();
  // `popular` spends its period before it may go: `later` goes first.
  EXPECT_EQ(Evict(), later);
  EXPECT_EQ(popular->periods_used, 0);
  EXPECT_EQ(Evict(), popular);
}

TEST_F(ClockEvictionTest, PeriodsOfUseSaturate) {
  Region* r = Install();
  use_.used = {r};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Evict(), nullptr);
  EXPECT_EQ(r->periods_used, ClockEviction::kMaxPeriodsUsed);
}

TEST_F(ClockEvictionTest, ForBytesTheLargestNeverReusedRegionGoesBeforeTheTail) {
  policy_.ExpectEvictionsForBytes();
  Region* small = Install(1);
  Install(1);
  Region* large = Install(64);
  EXPECT_EQ(Evict(Goal::kBytes), large);
  EXPECT_EQ(Evict(Goal::kBytes), small);
}

TEST_F(ClockEvictionTest, ForBytesAReusedLargeRegionIsNotPreferred) {
  policy_.ExpectEvictionsForBytes();
  Region* small = Install(1);
  Region* large = Install(64);
  policy_.Touched(large, ++tick_);  // reused: out of the never-reused lists
  EXPECT_EQ(Evict(Goal::kBytes), small);
}

TEST_F(ClockEvictionTest, ForBytesPeriodsOfUseAreNotSpent) {
  policy_.ExpectEvictionsForBytes();
  Region* r = Install();
  r->periods_used = 2;
  EXPECT_EQ(Evict(Goal::kBytes), r);
}

TEST_F(ClockEvictionTest, RegionsInstalledBeforeEvictionsForBytesGoFromTheTail) {
  Region* small = Install(1);
  Install(64);  // not listed by size: evictions for bytes were not expected yet
  policy_.ExpectEvictionsForBytes();
  EXPECT_EQ(Evict(Goal::kBytes), small);
}

TEST_F(ClockEvictionTest, AMergeUnionKeepsThePeriodsItsPartsEarned) {
  Region* part = Install();
  part->periods_used = 2;
  Region u;
  policy_.Merged(&u, part);
  EXPECT_EQ(u.periods_used, 2);
}

TEST_F(ClockEvictionTest, ClearForgetsEveryRegion) {
  Install();
  Install();
  policy_.Clear();
  EXPECT_EQ(policy_.lru_head(), nullptr);
  EXPECT_EQ(Evict(), nullptr);
}

TEST(ClockEvictionAdmissionTest, AFullCacheAdmitsPagesAtTheirSecondMiss) {
  ClockEviction policy(ClockEviction::kAdmissionMinRegions);
  EXPECT_FALSE(policy.AdmitsToFullCache(100, 101));
  EXPECT_TRUE(policy.AdmitsToFullCache(100, 101));
  EXPECT_FALSE(policy.AdmitsToFullCache(200, 202));
}

TEST(ClockEvictionAdmissionTest, ASmallCacheAdmitsEveryMiss) {
  ClockEviction policy(ClockEviction::kAdmissionMinRegions - 1);
  EXPECT_TRUE(policy.AdmitsToFullCache(100, 101));
  EXPECT_TRUE(policy.AdmitsToFullCache(200, 201));
}

TEST(ClockEvictionAdmissionTest, OnlyACacheLargeEnoughForAdmissionMayRefuse) {
  EXPECT_FALSE(ClockEviction(ClockEviction::kAdmissionMinRegions - 1).MayRefuseAdmission());
  EXPECT_TRUE(ClockEviction(ClockEviction::kAdmissionMinRegions).MayRefuseAdmission());
}

}  // namespace
}  // namespace mrcache
