// seen_filter_test.cc: SeenFilter (mrcache/core/seen_filter.h) remembers a
// key for at least one window of calls and at most two, and rounds its size
// to a power of two; keys with structure share bits no more often than
// random keys.
#include "mrcache/core/seen_filter.h"

#include <cstdint>
#include <functional>
#include <random>

#include <gtest/gtest.h>

namespace mrcache {
namespace {

TEST(SeenFilterTest, AKeyIsNotSeenTheFirstTime) {
  SeenFilter f(1024, 16);
  EXPECT_FALSE(f.TestAndSet(42));
}

TEST(SeenFilterTest, AKeyIsSeenWithinAWindowOfCalls) {
  SeenFilter f(1 << 16, 64);
  EXPECT_FALSE(f.TestAndSet(42));
  // 62 other keys and 42 again: 64 calls, within one window.
  for (uint64_t k = 1000; k < 1062; ++k) f.TestAndSet(k);
  EXPECT_TRUE(f.TestAndSet(42));
}

TEST(SeenFilterTest, AKeyIsSeenAcrossOneRotation) {
  SeenFilter f(1 << 16, 64);
  for (uint64_t k = 1000; k < 1063; ++k) f.TestAndSet(k);
  EXPECT_FALSE(f.TestAndSet(42));  // the 64th call: the filter rotates after it
  for (uint64_t k = 2000; k < 2063; ++k) f.TestAndSet(k);
  EXPECT_TRUE(f.TestAndSet(42)) << "the previous bitset still has it";
}

TEST(SeenFilterTest, AKeyIsForgottenAfterTwoWindows) {
  SeenFilter f(1 << 16, 64);
  EXPECT_FALSE(f.TestAndSet(42));
  for (uint64_t k = 1000; k < 1000 + 2 * 64; ++k) f.TestAndSet(k);
  EXPECT_FALSE(f.TestAndSet(42));
}

TEST(SeenFilterTest, SizeIsAPowerOfTwoOfAtLeast64Bits) {
  EXPECT_EQ(SeenFilter(1, 1).bits(), 64u);
  EXPECT_EQ(SeenFilter(1000, 1).bits(), 1024u);
  EXPECT_EQ(SeenFilter(4096, 1).bits(), 4096u);
  EXPECT_EQ(SeenFilter(64, 0).window(), 1u);
}

// How often each of 100 distinct keys, key(base, i) for i < 100, is taken
// as seen in a filter of 2,048 bits (no rotation within them), over 1,000
// bases from a fixed generator: the total, and the most for one base.
struct FalseSeens {
  int total = 0;
  int most = 0;
};
FalseSeens CountFalseSeens(const std::function<uint64_t(uint64_t, uint64_t)>& key) {
  std::mt19937_64 bases(7);
  FalseSeens counts;
  for (int b = 0; b < 1000; ++b) {
    // A page number as a user address has (below 2^47 bytes).
    const uint64_t base = bases() >> 29;
    SeenFilter f(2048, 1000);
    int seen = 0;
    for (uint64_t i = 0; i < 100; ++i) seen += f.TestAndSet(key(base, i)) ? 1 : 0;
    counts.total += seen;
    if (seen > counts.most) counts.most = seen;
  }
  return counts;
}

// 100 random keys in 2,048 bits: sum over i < 100 of i/2048, about 2.4 false
// "seen"s per base, 2,400 over 1,000 bases; Poisson-like, so no base far
// above (P(12 or more) is about 1e-5 a base).
constexpr int kExpectedTotal = 2400;
constexpr int kMostForOneBase = 12;

TEST(SeenFilterTest, RandomKeysShareBitsAtTheRateOfTheirCount) {
  std::mt19937_64 random(11);
  const FalseSeens c = CountFalseSeens([&](uint64_t, uint64_t) { return random(); });
  EXPECT_GT(c.total, kExpectedTotal * 8 / 10);
  EXPECT_LT(c.total, kExpectedTotal * 12 / 10);
  EXPECT_LE(c.most, kMostForOneBase);
}

TEST(SeenFilterTest, KeysAtAStrideShareBitsNoMoreOftenThanRandomKeys) {
  for (uint64_t stride : {uint64_t{1}, uint64_t{16}, uint64_t{4096}, uint64_t{1} << 32}) {
    const FalseSeens c =
        CountFalseSeens([stride](uint64_t base, uint64_t i) { return base + i * stride; });
    EXPECT_LT(c.total, kExpectedTotal * 12 / 10) << "stride " << stride;
    EXPECT_LE(c.most, kMostForOneBase) << "stride " << stride;
  }
}

TEST(SeenFilterTest, PageRangeKeysOfRegionsAtAStrideShareBitsNoMoreOftenThanRandomKeys) {
  // The key a cache forms of a miss's first and end page numbers, for
  // one-page regions 16 pages apart (CacheImpl::NotAdmittedLocked).
  const FalseSeens c = CountFalseSeens([](uint64_t base, uint64_t i) {
    const uint64_t first = base + 16 * i;
    return first * 0x100000001B3ull ^ (first + 1);
  });
  EXPECT_LT(c.total, kExpectedTotal * 12 / 10);
  EXPECT_LE(c.most, kMostForOneBase);
}

}  // namespace
}  // namespace mrcache
