// The offline optimum on traces small enough to compute by hand.
#include "bench/belady.h"

#include "gtest/gtest.h"

namespace mrbench {
namespace {

// Region k is [k*0x1000, (k+1)*0x1000).
CacheEvent A(uintptr_t k) { return {CacheEvent::kAccess, k * 0x1000, (k + 1) * 0x1000, 7}; }
CacheEvent R(uintptr_t k) { return {CacheEvent::kRelease, k * 0x1000, k * 0x1000 + 10, 0}; }

TEST(Belady, UnlimitedCacheMissesOncePerRegion) {
  OptimalResult r = OptimalHits({A(1), A(2), A(1), A(2), A(3), A(1)}, 0);
  EXPECT_EQ(r.accesses, 6u);
  EXPECT_EQ(r.hits, 3u);
  EXPECT_EQ(r.registrations, 3u);
  EXPECT_EQ(r.registered_bytes, 3u * 0x1000);
}

TEST(Belady, DoesNotKeepARegionNeverUsedAgain) {
  // Capacity 2: region 3 is never used again, so MIN does not keep it, and
  // 1 and 2 both hit.
  OptimalResult r = OptimalHits({A(1), A(2), A(3), A(1), A(2)}, 2);
  EXPECT_EQ(r.hits, 2u);
  EXPECT_EQ(r.registrations, 3u);
}

TEST(Belady, EvictsTheRegionNeededFurthestAway) {
  // Capacity 2: 1 2 3 2 3 1. At 3, region 1 (next at 5) is furthest: evict it.
  OptimalResult r = OptimalHits({A(1), A(2), A(3), A(2), A(3), A(1)}, 2);
  EXPECT_EQ(r.hits, 2u);
  EXPECT_EQ(r.registrations, 4u);
}

TEST(Belady, ClassicSequenceWithCapacityThree) {
  // 1 2 3 4 1 2 5 1 2 3 4 5 with 3 regions: MIN gets 5 hits (7 misses).
  std::vector<CacheEvent> e;
  for (uintptr_t k : {1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5}) e.push_back(A(k));
  EXPECT_EQ(OptimalHits(e, 3).hits, 5u);
  EXPECT_EQ(OptimalHits(e, 4).hits, 6u);
}

TEST(Belady, ReleaseDropsOverlappingRegions) {
  OptimalResult r = OptimalHits({A(1), A(2), R(1), A(1), A(2)}, 0);
  EXPECT_EQ(r.hits, 1u);  // only region 2 survives the release
  EXPECT_EQ(r.registrations, 3u);
}

TEST(Belady, RegionToBeReleasedIsTheFirstVictim) {
  // Capacity 2. At A(3), region 1 will be released before its next use, so it
  // is evicted and 2 and 3 both hit afterwards.
  OptimalResult r = OptimalHits({A(1), A(2), A(3), R(1), A(2), A(3), A(1)}, 2);
  EXPECT_EQ(r.hits, 2u);
}

TEST(Belady, ARegionServesTransfersInsideIt) {
  const CacheEvent big = {CacheEvent::kAccess, 0x1000, 0x5000, 7};
  const CacheEvent inside = {CacheEvent::kAccess, 0x2000, 0x3000, 7};
  OptimalResult r = OptimalHits({big, inside, inside, big}, 1);
  EXPECT_EQ(r.hits, 3u);
  EXPECT_EQ(r.registrations, 1u);
  // The nested range alone does not serve the larger one.
  r = OptimalHits({inside, big, inside}, 0);
  EXPECT_EQ(r.hits, 1u);
  EXPECT_EQ(r.registrations, 2u);
}

TEST(Belady, DifferentAccessIsADifferentRegion) {
  CacheEvent read_only = A(1);
  read_only.access = 1;
  EXPECT_EQ(OptimalHits({A(1), read_only, A(1)}, 0).hits, 1u);
}

TEST(Belady, PeakPinnedCountsTheRegionInUse) {
  OptimalResult r = OptimalHits({A(1), A(2), A(3)}, 1);
  EXPECT_EQ(r.peak_pinned_bytes, 0x1000u);  // none is reused, none kept
  r = OptimalHits({A(1), A(2), A(1), A(2)}, 0);
  EXPECT_EQ(r.peak_pinned_bytes, 0x2000u);
}

TEST(Belady, AByteCapacityBoundsTheCachedBytes) {
  // A(n) is one page: two pages of capacity hold two regions, not three.
  // A(3) needs room: A(2), needed after A(1), goes; A(1) and A(3) hit.
  OptimalResult r = OptimalHits({A(1), A(2), A(3), A(1), A(2), A(3)}, 0, 0x2000);
  EXPECT_EQ(r.hits, 2u);
  EXPECT_EQ(r.peak_pinned_bytes, 0x2000u) << "the region being registered fits the capacity too";
}

TEST(Belady, ARegionLargerThanTheByteCapacityIsNeverKept) {
  const CacheEvent big = {CacheEvent::kAccess, 0x10000, 0x14000, 7};
  OptimalResult r = OptimalHits({big, big, A(1), A(1)}, 0, 0x2000);
  EXPECT_EQ(r.hits, 1u);  // only A(1)'s second transfer
}

TEST(BeladyTrace, EventsFollowTheTrace) {
  absl::StatusOr<Trace> t =
      ParseTrace("alloc 1 100000\nxfer 1 0 100000\nxfer 1 0 10\nfree 1\n", "t");
  ASSERT_TRUE(t.ok());
  std::vector<CacheEvent> e = TraceEvents(*t);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].kind, CacheEvent::kAccess);
  EXPECT_EQ(e[0].start % 4096, 0u);
  EXPECT_EQ(e[0].end % 4096, 0u);
  EXPECT_GE(e[0].end - e[0].start, 100000u);
  EXPECT_EQ(e[2].kind, CacheEvent::kRelease);
  EXPECT_EQ(e[2].end - e[2].start, 100000u);
}

}  // namespace
}  // namespace mrbench
