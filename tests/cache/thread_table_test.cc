// thread_table_test.cc: the per-thread lookup table (mrcache/core/thread_cache.h).
// Its lines come in sets of ThreadCache::kWays, so regions whose home lines
// coincide all stay in it; its size follows the thread's own working set
// (growing while gets displace each other, up to two lines per cached region
// and ThreadCache::kMaxLines; shrinking once the thread uses a few regions);
// a resize keeps every reference while other threads invalidate; and a
// region whose slot another region takes over keeps the recency it had there.
// A thread whose last window of gets only missed (streaming) installs regions
// without lookup entries until a get hits.
// Everything is observed through counters -- locked_hits(), stats() and
// thread_table_lines() -- never through timing. Runs on CacheImpl with the sim
// registrar at zero cost and no monitor; every test ends with registrations
// == deregistrations.
#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/core/cache_impl.h"
#include "mrcache/core/thread_cache.h"
#include "mrcache/registrars/sim_registrar.h"
#include "tests/cache/spaced_regions_fixture.h"

namespace mrcache {
namespace {

// A seeded pseudo-random index in [0, n).
struct RandomIndex {
  std::mt19937_64 engine;
  explicit RandomIndex(uint64_t seed) : engine(seed) {}
  size_t Next(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(engine); }
};

class ThreadTableTest : public testing::SpacedRegionsTest {
 protected:
  void SetUp() override {
    SpacedRegionsTest::SetUp();
    CreateCache([](Config&) {});
  }

  // Caches regions 0 .. n-1 (one miss each).
  void Fill(size_t n) {
    for (size_t i = 0; i < n; ++i) GetPut(Spot(i));
  }

  // `gets` random gets over regions 0 .. n-1; returns how many took the lock.
  uint64_t RandomGets(size_t n, size_t gets, RandomIndex* random) {
    const uint64_t before = cache_->locked_hits();
    for (size_t k = 0; k < gets; ++k) {
      GetPut(Spot(random->Next(n)));
      if (::testing::Test::HasFatalFailure()) return 0;
    }
    return cache_->locked_hits() - before;
  }

  // Random gets over regions 0 .. n-1 until a round of n * 2 of them takes
  // the lock less than 2% of the time, at most `rounds` rounds (the table
  // adapts on slow paths only). Returns the rounds it took, or rounds + 1.
  int Settle(size_t n, int rounds, RandomIndex* random) {
    for (int round = 1; round <= rounds; ++round) {
      if (RandomGets(n, n * 2, random) * 50 < n * 2) return round;
    }
    return rounds + 1;
  }
};

TEST_F(ThreadTableTest, RegionsSharingAHomeLineAllStayInTheTable) {
  GetPut(Spot(0));  // attaches this thread: a fresh table
  const size_t lines = cache_->thread_table_lines();
  ASSERT_EQ(lines, ThreadCache::kMinLines);
  // kWays regions whose first pages hash to region 0's home line.
  const size_t home = ThreadCache::PageHash(reinterpret_cast<uintptr_t>(Spot(0))) & (lines - 1);
  std::vector<char*> same{Spot(0)};
  for (size_t i = 1; i < kMaxRegions && same.size() < ThreadCache::kWays; ++i) {
    if ((ThreadCache::PageHash(reinterpret_cast<uintptr_t>(Spot(i))) & (lines - 1)) == home) {
      same.push_back(Spot(i));
    }
  }
  ASSERT_EQ(same.size(), ThreadCache::kWays);
  for (char* p : same) GetPut(p);
  const uint64_t locked = cache_->locked_hits();
  const uint64_t misses = cache_->stats().misses;
  for (int round = 0; round < 100; ++round) {
    for (char* p : same) GetPut(p);
  }
  EXPECT_EQ(cache_->locked_hits() - locked, 0u) << "alternating gets of one home line stay hits";
  EXPECT_EQ(cache_->stats().misses, misses);
  EXPECT_EQ(cache_->thread_table_lines(), lines) << "no slow path, no resize";
}

TEST_F(ThreadTableTest, AFreshThreadInstallsRegionsWithLookupEntries) {
  GetPut(Spot(0));  // a miss
  const uint64_t locked = cache_->locked_hits();
  GetPut(Spot(0));
  EXPECT_EQ(cache_->locked_hits(), locked) << "the second get is a lock-free hit";
}

TEST_F(ThreadTableTest, AThreadThatOnlyMissesInstallsRegionsWithoutLookupEntries) {
  Fill(ThreadCache::kMinLines * 2);  // two windows of misses alone: streaming
  GetPut(Spot(ThreadCache::kMinLines * 2));
  const uint64_t locked = cache_->locked_hits();
  const uint64_t hits = cache_->stats().hits;
  GetPut(Spot(ThreadCache::kMinLines * 2));
  EXPECT_EQ(cache_->locked_hits(), locked + 1) << "no entry: the next get takes the lock";
  GetPut(Spot(ThreadCache::kMinLines * 2));
  EXPECT_EQ(cache_->locked_hits(), locked + 1) << "which filled one: the third is lock-free";
  EXPECT_EQ(cache_->stats().hits, hits + 2);
}

TEST_F(ThreadTableTest, AHitEndsStreaming) {
  Fill(ThreadCache::kMinLines * 2);
  GetPut(Spot(0));  // a locked hit: no longer streaming
  const size_t fresh = ThreadCache::kMinLines * 2;
  GetPut(Spot(fresh));  // a miss, installed with its entry
  const uint64_t locked = cache_->locked_hits();
  GetPut(Spot(fresh));
  EXPECT_EQ(cache_->locked_hits(), locked);
}

TEST_F(ThreadTableTest, RegionsEachUsedTwiceHitWithoutTheLockTheSecondTime) {
  // A window never passes without hits, so the thread never streams.
  for (size_t i = 0; i < ThreadCache::kMinLines * 8; ++i) {
    GetPut(Spot(i));
    GetPut(Spot(i));
  }
  EXPECT_EQ(cache_->locked_hits(), 0u);
  EXPECT_EQ(cache_->stats().hits, ThreadCache::kMinLines * 8);
}

TEST_F(ThreadTableTest, RandomHitsOverTenThousandRegionsStayInTheTable) {
  Fill(kMaxRegions);
  RandomIndex random(1);
  const int rounds = Settle(kMaxRegions, 20, &random);
  ASSERT_LE(rounds, 20) << "the table never held the working set; lines now "
                        << cache_->thread_table_lines();
  const uint64_t misses = cache_->stats().misses;
  const uint64_t locked = RandomGets(kMaxRegions, 100000, &random);
  EXPECT_LT(locked, 2000u) << "under 2% of random gets take the lock (lines "
                           << cache_->thread_table_lines() << ")";
  EXPECT_EQ(cache_->stats().misses, misses);
  EXPECT_GE(cache_->thread_table_lines(), kMaxRegions);
  EXPECT_LE(cache_->thread_table_lines(), ThreadCache::kMaxLines);
}

TEST_F(ThreadTableTest, TableGrowsToTwoLinesPerCachedRegionAtMost) {
  const size_t n = 1000;
  Fill(n);
  RandomIndex random(2);
  size_t most = 0;
  for (int round = 0; round < 40; ++round) {
    RandomGets(n, n * 2, &random);
    if (cache_->thread_table_lines() > most) most = cache_->thread_table_lines();
  }
  EXPECT_GT(most, n) << "a working set of 1,000 regions grows the table past 1,000 lines";
  EXPECT_LE(most, 2048u) << "the power of two that two lines per cached region reach, no more";
}

TEST_F(ThreadTableTest, TableStaysSmallForAThreadThatUsesAFewRegions) {
  Fill(2000);  // this thread's table grows; the cache holds 2,000 regions
  size_t lines = 0;
  std::thread([&] {
    // Eight regions over and over, and a new one now and then (slow paths,
    // at which the table is judged).
    for (size_t round = 0; round < 100; ++round) {
      for (size_t k = 0; k < 200; ++k) GetPut(Spot(k % 8));
      GetPut(Spot(2000 + round));
    }
    lines = cache_->thread_table_lines();
  }).join();
  EXPECT_EQ(lines, ThreadCache::kMinLines) << "4 KiB, whatever the cache holds";
}

TEST_F(ThreadTableTest, TableShrinksWhenTheWorkingSetDoes) {
  const size_t n = 2000;
  Fill(n);
  RandomIndex random(3);
  ASSERT_LE(Settle(n, 40, &random), 40) << "lines " << cache_->thread_table_lines();
  const size_t grown = cache_->thread_table_lines();
  ASSERT_GE(grown, n);
  // Four regions over and over, and a miss now and then.
  size_t round = 0;
  for (; round < 200 && cache_->thread_table_lines() > ThreadCache::kMinLines; ++round) {
    for (size_t k = 0; k < 400; ++k) GetPut(Spot(k % 4));
    GetPut(Spot(n + round));
    ASSERT_LE(cache_->thread_table_lines(), grown) << "it never grows meanwhile";
  }
  EXPECT_EQ(cache_->thread_table_lines(), ThreadCache::kMinLines) << "after " << round << " rounds";
  // The four regions are hits again in the small table.
  for (size_t k = 0; k < 4; ++k) GetPut(Spot(k));
  const uint64_t locked = cache_->locked_hits();
  for (size_t k = 0; k < 400; ++k) GetPut(Spot(k % 4));
  EXPECT_EQ(cache_->locked_hits(), locked);
}

TEST_F(ThreadTableTest, ARegionWhoseSlotIsTakenOverKeepsItsRecencyForEviction) {
  // Six regions fit; no merging, so each spot is one region.
  CreateCache([](Config& config) {
    config.max_regions = 6;
    config.max_merge_bytes = 0;
    config.bridge_bytes = 0;
  });
  // In a fresh table: five spots whose regions share one set of kWays slots
  // (a to e), and two elsewhere (f, g).
  auto set_of = [](const char* p) {
    return (ThreadCache::PageHash(reinterpret_cast<uintptr_t>(p)) & (ThreadCache::kMinLines - 1)) &
           ~(ThreadCache::kWays - 1);
  };
  std::vector<char*> same, other;
  for (size_t i = 0; i < kMaxRegions && (same.size() < 5 || other.size() < 2); ++i) {
    if (set_of(Spot(i)) == set_of(Spot(0))) {
      if (same.size() < 5) same.push_back(Spot(i));
    } else if (other.size() < 2) {
      other.push_back(Spot(i));
    }
  }
  ASSERT_EQ(same.size(), 5u);
  ASSERT_EQ(other.size(), 2u);
  char *a = same[0], *e = same[4], *f = other[0], *g = other[1];
  for (size_t k = 0; k < 4; ++k) GetPut(same[k]);  // a, b, c, d: misses, a placed first
  ASSERT_EQ(cache_->thread_table_lines(), ThreadCache::kMinLines);
  const uint64_t locked = cache_->locked_hits();
  GetPut(a);  // a lock-free hit: a's slot records the use, not a's Region
  GetPut(f);  // a miss: time moves on
  for (size_t k = 1; k < 4; ++k) GetPut(same[k]);  // b, c, d used after a
  ASSERT_EQ(cache_->locked_hits(), locked) << "a, b, c and d were lock-free hits";
  GetPut(e);  // takes over the set's least recently used slot: a's
  ASSERT_EQ(cache_->stats().regions, 6u);
  // A miss over the limit evicts the least recently used region: f (placed
  // after a, never used since), not a, which was used after f's placement
  // but through the slot it lost.
  GetPut(g);
  ASSERT_EQ(cache_->thread_table_lines(), ThreadCache::kMinLines) << "the sets stayed as planned";
  const uint64_t registrations = cache_->stats().registrations;
  GetPut(a);
  EXPECT_EQ(cache_->stats().registrations, registrations) << "a stayed cached";
  GetPut(f);
  EXPECT_EQ(cache_->stats().registrations, registrations + 1) << "f was the one evicted";
}

TEST_F(ThreadTableTest, ResizeUnderConcurrentInvalidationKeepsEveryReference) {
  // Two threads each hold references to eight regions of their own while
  // their tables grow (random gets over 2,000 regions) and shrink (four
  // regions), and a third invalidates regions, held ones included, all the
  // while. Every put must succeed (no count lost in a migration), and at the
  // end every registration is deregistered (none kept by a stale count).
  const size_t n = 2000;
  Fill(n);
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::thread invalidator([&] {
    RandomIndex random(9);
    while (!done.load(std::memory_order_relaxed)) {
      if (!cache_->Invalidate(Spot(random.Next(n + 32)), kPage).ok()) ++failures;
    }
  });
  auto worker = [&](uint64_t seed, size_t own) {
    RandomIndex random(seed);
    std::vector<Region*> held;
    for (size_t i = 0; i < 8; ++i) {
      auto r = cache_->Acquire(Spot(n + own + i), kPage, kRW);
      if (!r.ok()) {
        ++failures;
        continue;
      }
      held.push_back(*r);
    }
    auto get_put = [&](size_t i) {
      auto r = cache_->Acquire(Spot(i), kPage, kRW);
      if (!r.ok() || !cache_->Put(*r).ok()) ++failures;
    };
    for (int cycle = 0; cycle < 3; ++cycle) {
      for (size_t k = 0; k < 6000; ++k) get_put(random.Next(n));
      for (size_t k = 0; k < 6000; ++k) get_put(k % 100 == 99 ? random.Next(n) : k % 4);
    }
    for (Region* r : held) {
      if (!cache_->Put(r).ok()) ++failures;
    }
  };
  std::thread a(worker, 1, 0), b(worker, 2, 16);
  a.join();
  b.join();
  done = true;
  invalidator.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_TRUE(cache_->Flush().ok());
  EXPECT_EQ(cache_->stats().regions, 0u) << "no region kept by a count a resize lost";
}

}  // namespace
}  // namespace mrcache
