// shared_hits_test.cc: gets that the calling thread's lookup table does not
// answer but the index does (locked hits) take the cache lock only for
// reading (CacheImpl::HitShared, the locking rules in
// mrcache/core/cache_impl.h). What they must keep: a release still waiting in
// the invalidation ring is honoured first (those gets take the write lock),
// the hit counts as a use for eviction, and threads hitting while others
// miss, invalidate and resize their tables never lose a reference. Observed
// through counters (locked_hits, read_locked_hits, stats), never timing; the
// sim registrar at zero cost, no monitor (spaced_regions_fixture.h); every test ends with
// registrations
// == deregistrations.
#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/core/cache_impl.h"
#include "mrcache/registrars/sim_registrar.h"
#include "tests/cache/spaced_regions_fixture.h"

namespace mrcache {
namespace {

class SharedHitsTest : public testing::SpacedRegionsTest {
 protected:
  // No merging or bridging: each get of a new spot is one region.
  void Create(size_t max_regions) {
    CreateCache([max_regions](Config& config) {
      config.max_regions = max_regions;
      config.max_merge_bytes = 0;
      config.bridge_bytes = 0;
    });
  }
  // Gets and puts region i on a new thread: its first get of any region is
  // a locked one (a new thread's table is empty).
  void GetPutOnNewThread(size_t i) {
    std::thread([&] { GetPut(Spot(i)); }).join();
  }
};

TEST_F(SharedHitsTest, ALockedHitTakesTheLockOnlyForReading) {
  Create(0);
  GetPut(Spot(0));
  const uint64_t registrations = cache_->stats().registrations;
  GetPutOnNewThread(0);
  EXPECT_EQ(cache_->locked_hits(), 1u);
  EXPECT_EQ(cache_->read_locked_hits(), 1u);
  EXPECT_EQ(cache_->stats().registrations, registrations) << "a hit registers nothing";
}

TEST_F(SharedHitsTest, ALockedHitFillsTheLookupEntrySoTheNextGetTakesNoLock) {
  Create(0);
  GetPut(Spot(0));
  uint64_t locked_after_second = 0;
  std::thread([&] {
    GetPut(Spot(0));  // locked, read-only
    locked_after_second = cache_->locked_hits();
    for (int i = 0; i < 100; ++i) GetPut(Spot(0));
  }).join();
  EXPECT_EQ(locked_after_second, 1u);
  EXPECT_EQ(cache_->locked_hits(), 1u) << "the entry it filled answers the next gets";
}

TEST_F(SharedHitsTest, AReleaseWaitingInTheRingIsHonouredBeforeTheIndexIsRead) {
  Create(0);
  GetPut(Spot(0));
  const uintptr_t start = reinterpret_cast<uintptr_t>(Spot(0));
  // As a monitor reports an munmap: into the ring, not yet drained.
  cache_->OnMemoryRelease(start & ~(kPage - 1), (start & ~(kPage - 1)) + kPage);
  GetPutOnNewThread(0);
  EXPECT_EQ(cache_->read_locked_hits(), 0u) << "a reader cannot drain the ring";
  const CacheStats s = cache_->stats();
  EXPECT_EQ(s.invalidations, 1u);
  EXPECT_EQ(s.registrations, 2u) << "the released region was not handed out";
}

TEST_F(SharedHitsTest, AReleaseOfOtherMemoryWaitingInTheRingLeavesTheHitReadLocked) {
  Create(0);
  GetPut(Spot(0));
  const uintptr_t other = reinterpret_cast<uintptr_t>(Spot(1)) & ~(kPage - 1);
  cache_->OnMemoryRelease(other, other + kPage);  // waits in the ring, undrained
  GetPutOnNewThread(0);
  EXPECT_EQ(cache_->read_locked_hits(), 1u) << "the release does not touch region 0";
  EXPECT_EQ(cache_->stats().registrations, 1u);
}

TEST_F(SharedHitsTest, AReleaseOfOtherMemoryWaitingInTheRingLetsTheHitFillItsEntry) {
  // Else, with nobody missing (so nobody draining), every get of the
  // thread would stay a locked one.
  Create(0);
  GetPut(Spot(0));
  const uintptr_t other = reinterpret_cast<uintptr_t>(Spot(1)) & ~(kPage - 1);
  cache_->OnMemoryRelease(other, other + kPage);
  uint64_t locked_after_first = 0, locked_after_second = 0;
  std::thread([&] {
    GetPut(Spot(0));
    locked_after_first = cache_->locked_hits();
    GetPut(Spot(0));
    locked_after_second = cache_->locked_hits();
  }).join();
  EXPECT_EQ(locked_after_first, 1u);
  EXPECT_EQ(locked_after_second, locked_after_first) << "the second get took a lock";
}

TEST_F(SharedHitsTest, ManyReleasesWaitingInTheRingSendTheGetToAWriter) {
  // Past a few waiting releases a reader stops scanning them, and the get
  // takes the write lock, which drains them.
  Create(0);
  GetPut(Spot(0));
  for (size_t i = 1; i <= 64; ++i) {
    const uintptr_t other = reinterpret_cast<uintptr_t>(Spot(i)) & ~(kPage - 1);
    cache_->OnMemoryRelease(other, other + kPage);
  }
  GetPutOnNewThread(0);
  EXPECT_EQ(cache_->read_locked_hits(), 0u);
  EXPECT_EQ(cache_->locked_hits(), 1u) << "answered under the write lock";
  EXPECT_EQ(cache_->stats().registrations, 1u);
}

TEST_F(SharedHitsTest, AReadLockedHitCountsAsAUseForEviction) {
  Create(2);
  GetPut(Spot(0));       // the least recently used ...
  GetPut(Spot(1));       // ... then region 1
  GetPutOnNewThread(0);  // a read-locked hit on region 0
  ASSERT_EQ(cache_->read_locked_hits(), 1u);
  GetPut(Spot(2));  // a miss over max_regions: one region goes
  const uint64_t registrations = cache_->stats().registrations;
  GetPutOnNewThread(0);
  EXPECT_EQ(cache_->stats().registrations, registrations)
      << "region 0, used since region 1, stayed cached";
  GetPutOnNewThread(1);
  EXPECT_EQ(cache_->stats().registrations, registrations + 1) << "region 1 was the one evicted";
}

TEST_F(SharedHitsTest, AfterAMissTheNextLockedGetTakesTheWriteLock) {
  Create(0);
  for (size_t i = 0; i < 3; ++i) GetPut(Spot(i));
  std::thread([&] {
    GetPut(Spot(0));   // locked hit: read lock (a new thread expects hits)
    GetPut(Spot(10));  // a miss
    GetPut(Spot(1));   // locked hit after a miss: write lock
    GetPut(Spot(2));   // locked hit after a hit: read lock again
  }).join();
  EXPECT_EQ(cache_->locked_hits(), 3u);
  EXPECT_EQ(cache_->read_locked_hits(), 2u);
}

TEST_F(SharedHitsTest, ThreadsHittingWhileOthersMissAndInvalidateLoseNoReference) {
  // Four threads get random regions among 4,096 (more than their
  // tables hold at first, so many gets are locked hits), holding a few at a
  // time; one thread invalidates random regions, held ones included; the
  // cache is capped at half the regions, so misses evict. Every get must
  // cover its request, every put succeed, and at the end nothing is left.
  constexpr size_t kRegions = 4096;
  Create(kRegions / 2);
  for (size_t i = 0; i < kRegions; ++i) GetPut(Spot(i));
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::thread invalidator([&] {
    std::mt19937_64 random(7);
    while (!done.load(std::memory_order_relaxed)) {
      if (!cache_->Invalidate(Spot(random() % kRegions), kPage).ok()) ++failures;
      std::this_thread::yield();
    }
  });
  auto worker = [&](uint64_t seed) {
    std::mt19937_64 random(seed);
    std::vector<Region*> held;
    for (int k = 0; k < 20000; ++k) {
      char* p = Spot(random() % kRegions);
      auto r = cache_->Acquire(p, kPage, kRW);
      if (!r.ok()) {
        ++failures;
        continue;
      }
      const uintptr_t a = reinterpret_cast<uintptr_t>(p);
      if ((*r)->start > a || (*r)->end < a + kPage) ++failures;
      held.push_back(*r);
      if (held.size() == 4) {
        for (Region* h : held) {
          if (!cache_->Put(h).ok()) ++failures;
        }
        held.clear();
      }
    }
    for (Region* h : held) {
      if (!cache_->Put(h).ok()) ++failures;
    }
  };
  std::vector<std::thread> workers;
  for (uint64_t seed = 1; seed <= 4; ++seed) workers.emplace_back(worker, seed);
  for (std::thread& t : workers) t.join();
  done = true;
  invalidator.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(cache_->read_locked_hits(), 0u) << "the scenario exercised the read path";
}

}  // namespace
}  // namespace mrcache
