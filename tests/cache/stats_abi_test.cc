// stats_abi_test.cc: mrc_stats across versions. An application compiled
// against an older mrcache.h has a smaller mrc_stats_t; the library must fill
// what that application knows and never write past it.
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

#include "mrcache/mrcache.h"

namespace {

// The counters of the first release's mrc_stats_t, as an old application
// declared them.
struct FirstReleaseStats {
  uint64_t hits, misses, registrations, deregistrations, evictions, invalidations, merges, regions,
      pinned_bytes, registrar_ns;
};

// A struct between canaries, so that a write past its end is seen.
template <typename T>
struct Guarded {
  unsigned char before[64];
  T stats;
  unsigned char after[64];
};

constexpr unsigned char kCanary = 0xa5;

int Reg(void*, void*, size_t, int, uint64_t* handle, uint32_t* lkey, uint32_t* rkey) {
  static uint64_t next = 1;
  *handle = next++;
  *lkey = *rkey = 7;
  return 0;
}
int Dereg(void*, uint64_t) { return 0; }

class StatsAbiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mrc_config_t* cfg = nullptr;
    ASSERT_EQ(mrc_config_create(&cfg), 0);
    ASSERT_EQ(mrc_config_set(cfg, "monitor", "none"), 0);
    mrc_registrar_ops_t ops = {&Reg, &Dereg};
    ASSERT_EQ(mrc_cache_create_custom(cfg, &ops, nullptr, &cache_), 0);
    mrc_config_destroy(cfg);
    // One miss, then one hit: hits = misses = registrations = 1.
    mrc_region_t* r = nullptr;
    ASSERT_EQ(mrc_get(cache_, buf_, 100, 1, &r), 0);
    ASSERT_EQ(mrc_put(cache_, r), 0);
    ASSERT_EQ(mrc_get(cache_, buf_, 100, 1, &r), 0);
    ASSERT_EQ(mrc_put(cache_, r), 0);
  }
  void TearDown() override { mrc_cache_destroy(cache_); }

  template <typename T>
  static Guarded<T> Poisoned() {
    Guarded<T> g;
    std::memset(&g, kCanary, sizeof g);
    return g;
  }
  template <typename T>
  static bool CanariesIntact(const Guarded<T>& g) {
    for (unsigned char c : g.before)
      if (c != kCanary) return false;
    for (unsigned char c : g.after)
      if (c != kCanary) return false;
    return true;
  }

  mrc_cache_t* cache_ = nullptr;
  alignas(4096) char buf_[4096];
};

TEST_F(StatsAbiTest, AnOlderSmallerStructIsFilledAndNothingPastItIsWritten) {
  auto g = Poisoned<FirstReleaseStats>();
  ASSERT_EQ(mrc_stats_sized(cache_, reinterpret_cast<mrc_stats_t*>(&g.stats), sizeof g.stats), 0);
  EXPECT_TRUE(CanariesIntact(g));
  EXPECT_EQ(g.stats.hits, 1u);
  EXPECT_EQ(g.stats.misses, 1u);
  EXPECT_EQ(g.stats.registrations, 1u);
  EXPECT_EQ(g.stats.regions, 1u);
}

TEST_F(StatsAbiTest, TheMacroPassesThisHeadersSize) {
  auto g = Poisoned<mrc_stats_t>();
  EXPECT_EQ(mrc_stats(cache_, &g.stats), 0);
  EXPECT_TRUE(CanariesIntact(g));
  EXPECT_EQ(g.stats.hits, 1u);
  EXPECT_EQ(g.stats.remote_private, 0u);
}

TEST_F(StatsAbiTest, TheUnsizedEntryPointWritesOnlyTheFieldsItsHeaderHad) {
  // Binaries built before mrc_stats_sized call the symbol mrc_stats directly;
  // their struct ended at remote_private.
  struct UnsizedEraStats {
    uint64_t fields[14];
  };
  auto g = Poisoned<UnsizedEraStats>();
  (mrc_stats)(cache_, reinterpret_cast<mrc_stats_t*>(&g.stats));
  EXPECT_TRUE(CanariesIntact(g));
  EXPECT_EQ(g.stats.fields[0], 1u);  // hits
}

TEST_F(StatsAbiTest, ANewerLargerStructHasItsUnknownFieldsZeroed) {
  struct NewerStats {
    mrc_stats_t known;
    uint64_t future[4];
  };
  auto g = Poisoned<NewerStats>();
  ASSERT_EQ(mrc_stats_sized(cache_, reinterpret_cast<mrc_stats_t*>(&g.stats), sizeof g.stats), 0);
  EXPECT_TRUE(CanariesIntact(g));
  EXPECT_EQ(g.stats.known.hits, 1u);
  for (uint64_t f : g.stats.future) {
    EXPECT_EQ(f, 0u);
  }
}

TEST_F(StatsAbiTest, ASizeEndingInsideAFieldLeavesThatFieldAlone) {
  auto g = Poisoned<mrc_stats_t>();
  ASSERT_EQ(mrc_stats_sized(cache_, &g.stats, sizeof(uint64_t) + 3), 0);
  EXPECT_TRUE(CanariesIntact(g));
  EXPECT_EQ(g.stats.hits, 1u);
  uint64_t poisoned;
  std::memset(&poisoned, kCanary, sizeof poisoned);
  EXPECT_EQ(g.stats.misses, poisoned);
}

TEST_F(StatsAbiTest, NullArgumentsAndZeroSizeAreEinval) {
  mrc_stats_t s;
  EXPECT_EQ(mrc_stats_sized(nullptr, &s, sizeof s), EINVAL);
  EXPECT_EQ(mrc_stats_sized(cache_, nullptr, sizeof s), EINVAL);
  EXPECT_EQ(mrc_stats_sized(cache_, &s, 0), EINVAL);
}

}  // namespace
