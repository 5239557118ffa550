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
  auto driver = MrcacheDriver::Create(
      config, std::make_unique<CountingRegistrar>(std::move(test_registrar), counters));
  if (!driver.ok()) return driver.status();
  return Replay(trace, **driver, *counters, {true, nullptr});
}

TEST(ReplayMrcache, ReusesRegistrations) {
  absl::StatusOr<ReplayResult> r =
      ReplayThroughMrcache(Parse("alloc 1 100000\nalloc 2 5000\nxfer 1 0 100000\nxfer 2 0 5000\n"
                                 "xfer 1 0 100000\nxfer 2 0 5000\nxfer 1 0 10\nfree 1\nfree 2\n"),
                           1 << 30);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transfers, 5u);
  EXPECT_EQ(r->hits, 3u);
  EXPECT_EQ(r->registrations, 2u);
  EXPECT_EQ(r->stale, 0u);
  EXPECT_EQ(r->verified, 5u);
}

// Two overlapping halves of a buffer, then the whole buffer. (TestRegistrar
// pins nothing, so no pin budget applies, however low RLIMIT_MEMLOCK is.)
const char kOverlap[] =
    "alloc 1 100000\nxfer 1 0 60000\nxfer 1 40000 60000\nxfer 1 0 100000\n"
    "xfer 1 0 100000\nfree 1\n";

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
  absl::StatusOr<ReplayResult> r =
      ReplayThroughMrcache(Parse("alloc 1 100000\nxfer 1 0 100000\nxfer 1 0 100000\nfree 1\n"
                                 "alloc 2 100000\nxfer 2 0 100000\nfree 2\n"),
                           1 << 30);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->hits, 1u);
  EXPECT_EQ(r->registrations, 2u);
}

// Recorded traces (mrcache-run --record): registrations held from reg to
// dereg, releases at the recorded addresses.

Trace Recorded(const std::string& events) { return Parse("# mrcache-record 1\n" + events); }

TEST(ReplayRecorded, HeldRegistrationServesTheRequestsInsideIt) {
  absl::StatusOr<ReplayResult> r = ReplayThroughMrcache(
      Recorded("reg 1 0x7f0000010000 65536 1\nreg 2 0x7f0000012000 4096 1\ndereg 2\ndereg 1\n"),
      1 << 30);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->transfers, 2u);
  EXPECT_EQ(r->registrations, 1u);
  EXPECT_EQ(r->hits, 1u);
  EXPECT_EQ(r->stale, 0u);
  EXPECT_EQ(r->verified, 2u);
}

TEST(ReplayRecorded, ReleaseMakesTheNextRegistrationThereMiss) {
  const std::string reg = "reg 1 0x7f0000010000 65536 1\ndereg 1\n";
  absl::StatusOr<ReplayResult> kept = ReplayThroughMrcache(Recorded(reg + reg), 1 << 30);
  absl::StatusOr<ReplayResult> released =
      ReplayThroughMrcache(Recorded(reg + "release 0x7f0000018000 4096\n" + reg), 1 << 30);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_EQ(kept->registrations, 1u);
  EXPECT_EQ(released->registrations, 2u);
  EXPECT_EQ(released->stale, 0u);
}

TEST(ReplayRecorded, ReleaseElsewhereChangesNothing) {
  const std::string reg = "reg 1 0x7f0000010000 65536 1\ndereg 1\n";
  absl::StatusOr<ReplayResult> r = ReplayThroughMrcache(
      Recorded(reg + "release 0x7f0000020000 4096\nrelease 0x1000 4096\n" + reg), 1 << 30);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->registrations, 1u);
}

// Two overlapping requests, then their union: merging sees the recorded
// overlap, so the union is one region only with merging on.
TEST(ReplayRecorded, RelativeLayoutIsKeptSoOverlapsMerge) {
  const char kEvents[] =
      "reg 1 0x7f0000010000 8192 1\nreg 2 0x7f0000011000 8192 1\ndereg 1\ndereg 2\n"
      "reg 3 0x7f0000010000 12288 1\ndereg 3\n";
  absl::StatusOr<ReplayResult> merged = ReplayThroughMrcache(Recorded(kEvents), 1 << 30);
  absl::StatusOr<ReplayResult> unmerged = ReplayThroughMrcache(Recorded(kEvents), 0);
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_TRUE(unmerged.ok()) << unmerged.status();
  EXPECT_EQ(merged->hits, 1u);
  EXPECT_EQ(unmerged->hits, 0u);
}

TEST(ReplayRecorded, RegistrationsLiveAtTheEndAreDeregistered) {
  // Replay fails on registrations != deregistrations.
  absl::StatusOr<ReplayResult> r = ReplayThroughMrcache(
      Recorded("reg 1 0x555500001000 100 1\nreg 2 0x7f0000010000 4096 1\n"), 1 << 30);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->registrations, 2u);
}

}  // namespace
}  // namespace mrbench
