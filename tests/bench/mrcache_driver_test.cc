// Replaying traces through mrcache (the `mrcache` and `mrcache-nomerge`
// configurations): reuse, merging, invalidation on free, no leaks.
#include "bench/mrcache_driver.h"

#include <memory>

#include "gtest/gtest.h"
#include "tests/bench/test_registrar.h"

namespace mrbench {
namespace {

Trace Parse(absl::string_view text) {
  absl::StatusOr<Trace> t = ParseTrace(text, "t");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Trace{};
}

// Replay fails if registrations != deregistrations after the cache is destroyed.
absl::StatusOr<ReplayResult> ReplayThroughMrcache(const Trace& trace, size_t max_merge_bytes) {
  mrcache::Config config;
  config.max_regions = 16;
  config.max_merge_bytes = max_merge_bytes;
  auto counters = std::make_shared<RegistrarCounters>();
  auto test_registrar = std::make_unique<TestRegistrar>();
  auto driver = MrcacheDriver::Create(config, std::make_unique<CountingRegistrar>(std::move(test_registrar), counters));
  if (!driver.ok()) return driver.status();
  return Replay(trace, **driver, *counters, {true, nullptr});
}

TEST(ReplayMrcache, ReusesRegistrations) {
  absl::StatusOr<ReplayResult> r = ReplayThroughMrcache(Parse("alloc 1 100000\nalloc 2 5000\nxfer 1 0 100000\nxfer 2 0 5000\n"
                                             "xfer 1 0 100000\nxfer 2 0 5000\nxfer 1 0 10\nfree 1\nfree 2\n"),
                                       1 << 30);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transfers, 5u);
  EXPECT_EQ(r->hits, 3u);
  EXPECT_EQ(r->registrations, 2u);
  EXPECT_EQ(r->stale, 0u);
  EXPECT_EQ(r->verified, 5u);
}

// Two overlapping halves of a buffer, then the whole buffer.
const char kOverlap[] = "alloc 1 1000000\nxfer 1 0 600000\nxfer 1 400000 600000\nxfer 1 0 1000000\n"
                        "xfer 1 0 1000000\nfree 1\n";

TEST(ReplayMrcache, MergingCoversTheUnionOnce) {
  absl::StatusOr<ReplayResult> merged = ReplayThroughMrcache(Parse(kOverlap), 1 << 30);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->registrations, 2u);  // first half, then the union
  EXPECT_EQ(merged->hits, 2u);
}

TEST(ReplayMrcache, NoMergeRegistersEachNewRange) {
  absl::StatusOr<ReplayResult> plain = ReplayThroughMrcache(Parse(kOverlap), 0);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->registrations, 3u);
  EXPECT_EQ(plain->hits, 1u);
}

TEST(ReplayMrcache, FreeInvalidatesAndNothingLeaks) {
  absl::StatusOr<ReplayResult> r = ReplayThroughMrcache(Parse("alloc 1 100000\nxfer 1 0 100000\nxfer 1 0 100000\nfree 1\n"
                                             "alloc 2 100000\nxfer 2 0 100000\nfree 2\n"),
                                       1 << 30);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hits, 1u);
  EXPECT_EQ(r->registrations, 2u);
}

}  // namespace
}  // namespace mrbench
