// entry_validity_test.cc: a thread's lookup entry answers a get lock-free
// until its own region leaves the index; other regions leaving does not void
// it (the validity rules in mrcache/core/cache_impl.h). Observed through
// counters (locked_hits, registrations), never timing; the sim registrar at
// zero cost, no monitor (spaced_regions_fixture.h); every test ends with
// registrations == deregistrations.
#include <cstdint>

#include <gtest/gtest.h>

#include "mrcache/core/cache_impl.h"
#include "tests/cache/spaced_regions_fixture.h"

namespace mrcache {
namespace {

class EntryValidityTest : public testing::SpacedRegionsTest {
 protected:
  void SetUp() override {
    SpacedRegionsTest::SetUp();
    CreateCache([](Config& config) {
      config.max_merge_bytes = 0;
      config.bridge_bytes = 0;
    });
  }
  // Gets region i until the thread's entry answers it (the first get
  // installs the region, the second fills the entry if the first did not).
  void Warm(size_t i) {
    GetPut(Spot(i));
    GetPut(Spot(i));
  }
  // The region a get of spot i returns, put at once.
  Region* RegionOf(size_t i) {
    auto r = cache_->Acquire(Spot(i), kPage, kRW);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return nullptr;
    EXPECT_TRUE(cache_->Put(*r).ok());
    return *r;
  }
};

TEST_F(EntryValidityTest, AWarmEntryAnswersWithoutTheLock) {
  Warm(0);
  const uint64_t locked = cache_->locked_hits();
  GetPut(Spot(0));
  EXPECT_EQ(cache_->locked_hits(), locked);
}

TEST_F(EntryValidityTest, AnotherRegionLeavingTheIndexLeavesTheEntryAnswering) {
  Warm(0);
  Warm(1);
  ASSERT_TRUE(cache_->Invalidate(Spot(1), kPage).ok());
  const uint64_t locked = cache_->locked_hits();
  const uint64_t registrations = cache_->stats().registrations;
  GetPut(Spot(0));
  EXPECT_EQ(cache_->locked_hits(), locked) << "the get of region 0 took the lock";
  EXPECT_EQ(cache_->stats().registrations, registrations);
}

TEST_F(EntryValidityTest, ARegionLeavingTheIndexVoidsItsOwnEntry) {
  Warm(0);
  ASSERT_TRUE(cache_->Invalidate(Spot(0), kPage).ok());
  const uint64_t registrations = cache_->stats().registrations;
  GetPut(Spot(0));
  EXPECT_EQ(cache_->stats().registrations, registrations + 1)
      << "the invalidated region answered from the entry";
}

TEST_F(EntryValidityTest, AnEntryNeverAnswersWithARegionAllocatedWhereItsOwnWas) {
  // Region 0 leaves, then enough regions come and go for its memory to be
  // freed and reused: the thread's entry for it must not answer with
  // whatever now lives at that address.
  Warm(0);
  ASSERT_TRUE(cache_->Invalidate(Spot(0), kPage).ok());
  for (size_t i = 1; i < 3 * 256; ++i) {
    Warm(i);
    ASSERT_TRUE(cache_->Invalidate(Spot(i), kPage).ok());
  }
  Region* r = RegionOf(0);
  ASSERT_NE(r, nullptr);
  EXPECT_LE(r->start, reinterpret_cast<uintptr_t>(Spot(0)));
  EXPECT_GE(r->end, reinterpret_cast<uintptr_t>(Spot(0)) + kPage);
}

}  // namespace
}  // namespace mrcache
