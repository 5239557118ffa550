// invalidation_ring_test.cc: the bounded ring that memory hooks push released
// ranges into (mrcache/core/invalidation_ring.h). It reports overflow only when a
// range really could not be stored, whatever the number of producers.
#include "mrcache/core/invalidation_ring.h"

#include <atomic>
#include <cstdint>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace mrcache {
namespace {

TEST(InvalidationRingTest, DrainReturnsEveryPushedRangeInOrder) {
  InvalidationRing ring;
  for (uintptr_t i = 0; i < 10; ++i) ring.Push(i * 4096, i * 4096 + 100);
  std::vector<std::pair<uintptr_t, uintptr_t>> seen;
  bool lost = ring.Drain([&](uintptr_t s, uintptr_t e) { seen.emplace_back(s, e); });
  EXPECT_FALSE(lost);
  ASSERT_EQ(seen.size(), 10u);
  for (uintptr_t i = 0; i < 10; ++i) {
    EXPECT_EQ(seen[i], std::make_pair(i * 4096, i * 4096 + 100));
  }
  EXPECT_TRUE(ring.empty());
}

TEST(InvalidationRingTest, AFullRingReportsOverflowAndKeepsWhatItStored) {
  InvalidationRing ring;
  for (uint64_t i = 0; i < InvalidationRing::kCapacity + 1; ++i) ring.Push(i, i + 1);
  uint64_t count = 0;
  bool lost = ring.Drain([&](uintptr_t, uintptr_t) { ++count; });
  EXPECT_TRUE(lost);
  EXPECT_EQ(count, InvalidationRing::kCapacity + 1);  // the stored ranges, then the lost hull
  EXPECT_TRUE(ring.empty());
}

// A burst that overflows the ring costs precision only around the ranges
// that found no slot: their hull, aligned to kLostGrain, comes last.
TEST(InvalidationRingTest, RangesThatFindTheRingFullAreDrainedAsTheirAlignedHull) {
  InvalidationRing ring;
  const uintptr_t grain = InvalidationRing::kLostGrain;
  for (uint64_t i = 0; i < InvalidationRing::kCapacity; ++i) ring.Push(i, i + 1);
  const uintptr_t a = 0x7f0000000000 + 3 * grain + 4096, b = 0x7f0000000000 + 9 * grain + 8192;
  ring.Push(b, b + 4096);
  ring.Push(a, a + 4096);
  std::vector<std::pair<uintptr_t, uintptr_t>> seen;
  EXPECT_TRUE(ring.Drain([&](uintptr_t s, uintptr_t e) { seen.emplace_back(s, e); }));
  ASSERT_EQ(seen.size(), InvalidationRing::kCapacity + 1);
  EXPECT_EQ(seen.back(), std::make_pair(0x7f0000000000 + 3 * grain, 0x7f0000000000 + 10 * grain));
  EXPECT_TRUE(ring.empty());
  // The next lap starts with an empty hull.
  ring.Push(a, a + 4096);
  seen.clear();
  EXPECT_FALSE(ring.Drain([&](uintptr_t s, uintptr_t e) { seen.emplace_back(s, e); }));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], std::make_pair(a, a + 4096));
}

// A release reaching the end of the address space stays unbounded.
TEST(InvalidationRingTest, ALostRangeToTheEndOfTheAddressSpaceStaysUnbounded) {
  InvalidationRing ring;
  for (uint64_t i = 0; i < InvalidationRing::kCapacity; ++i) ring.Push(i, i + 1);
  ring.Push(4096, UINTPTR_MAX);
  std::pair<uintptr_t, uintptr_t> last{1, 1};
  EXPECT_TRUE(ring.Drain([&](uintptr_t s, uintptr_t e) { last = {s, e}; }));
  EXPECT_EQ(last, std::make_pair(uintptr_t{0}, UINTPTR_MAX));
}

// Producers that race for the same ticket never mistake a slot their rival
// just claimed for a full ring.
TEST(InvalidationRingTest, ConcurrentProducersNeverReportOverflowWhileThereIsRoom) {
  InvalidationRing ring;
  constexpr int kProducers = 4;
  constexpr int kPerRound = 250;  // 1,000 per drain, below the capacity
  constexpr int kRounds = 2000;
  std::atomic<int> started{0}, finished{0};
  auto producer = [&](int id) {
    for (int n = 0; n < kRounds; ++n) {
      while (started.load(std::memory_order_acquire) <= n) std::this_thread::yield();
      for (int k = 0; k < kPerRound; ++k) {
        uintptr_t start = (static_cast<uintptr_t>(id) << 40) | (static_cast<uintptr_t>(k) << 12);
        ring.Push(start, start + 4096);
      }
      finished.fetch_add(1, std::memory_order_acq_rel);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kProducers; ++i) threads.emplace_back(producer, i);
  int overflows = 0;
  uint64_t drained = 0;
  for (int n = 0; n < kRounds; ++n) {
    started.store(n + 1, std::memory_order_release);
    while (finished.load(std::memory_order_acquire) < kProducers * (n + 1))
      std::this_thread::yield();
    std::set<uintptr_t> round;
    if (ring.Drain([&](uintptr_t s, uintptr_t) { round.insert(s); })) ++overflows;
    EXPECT_EQ(round.size(), static_cast<size_t>(kProducers * kPerRound));
    drained += round.size();
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overflows, 0);
  EXPECT_EQ(drained, uint64_t{kProducers} * kPerRound * kRounds);
}

}  // namespace
}  // namespace mrcache
