// pin_budget_test.cc: the pinned-memory budget (README "Pinned-memory
// budget", mrcache/registrars/pin_budget.h) under a real RLIMIT_MEMLOCK.
//
// Every scenario runs in a child process that drops CAP_IPC_LOCK and lowers
// RLIMIT_MEMLOCK to 1 MiB (tests/registrars/low_memlock.h), so the budget is
// 1 MiB - 128 KiB of headroom = 896 KiB. The registrar is `sim` with
// sim_mlock=1: it pins with mlock, which the kernel charges per process
// against the limit (like ibv_reg_mr), so other tests running at the same
// time cannot change the outcome (io_uring charges per user). Buffers are
// 64 KiB, page-aligned, with an unmapped page between neighbours. The tests
// count registrar calls and evictions; they never time anything.
//
// Behaviour:
//  (a) a working set larger than the limit never makes more registrar calls
//      than registering and deregistering every request would, and never
//      pins more than the budget;
//  (b) a request that fits alone succeeds while other regions are unused,
//      evicting least recently used regions only until it fits;
//  (b') making room for bytes, the largest unused region goes first, not
//      several small older ones, however recently it was registered,
//      unless it was hit since it was last placed; a merge union weighs its
//      bytes per region it merged;
//  (b'') a merge union that joins other requests' bytes takes at most a
//      sixteenth of the budget, one that absorbs a region whose requested
//      bytes the request covers up to a quarter; joining waits until a
//      window of misses shows the cache's regions living (few die by
//      invalidation), and stops while they do not; with four threads
//      mapping, getting and unmapping meanwhile nothing leaks and the pinned
//      bytes stay within the budget;
//  (c) a request that cannot fit is ENOMEM naming the limit and the bytes
//      pinned, evicts nothing, and nothing leaks;
//  (d) two caches share the budget: the same pin_budget_bytes, and one
//      cache's request takes room from the other's unused regions;
//  (e) pins the cache does not know about lower the budget at the first
//      refusal, without emptying the cache, and it recovers once they go;
//  (e') what a refusal taught is shared by the caches alive and forgotten
//      when the last one is destroyed;
//  (f) a request over a quarter of the budget that does not fit beside the
//      pinned bytes gets a registration for itself, deregistered at put,
//      rather than displacing the cache for good; seen again soon, it is
//      cached;
//  (g) the budget binds only registrars that pin (Registrar::pins_memory()):
//      sim without sim_mlock keeps a working set three times the limit
//      registered, sim with it stays within the budget, and a custom
//      registrar is taken to pin unless its config sets custom_pins=0;
//  and the budget rule itself (BudgetForLimit).
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/core/address_churn.h"
#include "mrcache/errno_status.h"
#include "mrcache/mrcache.h"
#include "mrcache/registrars/pin_budget.h"
#include "mrcache/registrars/sim_registrar.h"
#include "tests/cache/counting_registrar.h"
#include "tests/cache/regions_live.h"
#include "tests/registrars/low_memlock.h"

namespace mrcache {
namespace {

using testing::CountingRegistrar;
using testing::RegistrarCounters;

constexpr size_t kKiB = 1024;
constexpr size_t kLimit = 1024 * kKiB;
constexpr size_t kBudget = kLimit - kLimit / 8;  // 896 KiB
constexpr size_t kBuffer = 64 * kKiB;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// `n` buffers of `bytes` each, with an unmapped page between neighbours (so
// that no two requests overlap or merge), every page touched.
class Buffers {
 public:
  Buffers(int n, size_t bytes) : n_(n), bytes_(bytes), stride_(bytes + kPage) {
    base_ = static_cast<char*>(
        mmap(nullptr, n * stride_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) {
      base_ = nullptr;
      return;
    }
    for (int i = 0; i < n; ++i) {
      std::memset(at(i), 1, bytes_);
      munmap(at(i) + bytes_, kPage);
    }
  }
  ~Buffers() {
    if (base_ != nullptr) munmap(base_, n_ * stride_);
  }
  bool ok() const { return base_ != nullptr; }
  char* at(int i) const { return base_ + i * stride_; }

 private:
  int n_;
  size_t bytes_, stride_;
  char* base_ = nullptr;
};

// A cache over an mlock-ing sim registrar, counted.
struct Counted {
  std::shared_ptr<RegistrarCounters> counters = std::make_shared<RegistrarCounters>();
  std::unique_ptr<Cache> cache;
  int setup_errno = 0;

  explicit Counted(size_t max_merge_bytes = size_t{1} << 30, bool mlock = true) {
    Config config;
    config.registrar = "sim";
    config.sim_mlock = mlock;
    config.sim_base_ns = 0;
    config.sim_page_ns = 0;
    config.monitor = "none";
    config.max_merge_bytes = max_merge_bytes;
    auto made = Cache::Create(
        config, std::make_unique<CountingRegistrar>(MakeSimRegistrar(config), counters));
    if (!made.ok()) {
      setup_errno = StatusToErrno(made.status());
      return;
    }
    cache = std::move(*made);
  }
  // Register calls that failed.
  int refusals() const { return counters->register_calls.load() - counters->registrations.load(); }
  size_t pinned() const {
    std::lock_guard<std::mutex> lock(counters->mu);
    size_t bytes = 0;
    for (const auto& entry : counters->live) bytes += entry.second.length;
    return bytes;
  }
  // Get and put; the errno of a failure.
  int Touch(char* addr, size_t length) {
    auto r = cache->Acquire(addr, length, kAccessLocalWrite);
    if (!r.ok()) return StatusToErrno(r.status());
    (void)cache->Put(*r);
    return 0;
  }
  // A window of misses in which `deaths` regions die by invalidation, then an
  // empty cache (regions_live.h); false if it could not be run.
  bool LiveAWindow(int deaths = 0) {
    return testing::LiveAWindow(*cache, static_cast<size_t>(deaths));
  }
  // Touches the range again: the registrations it made (1 if it had been
  // evicted, 0 if it stayed cached).
  int Reregistrations(char* addr, size_t length) {
    const int before = counters->registrations.load();
    Touch(addr, length);
    return counters->registrations.load() - before;
  }
};

template <typename Outcome, typename Body>
Outcome RunLimited(Body body) {
  auto result = mrcache_test::RunWithLowMemlock<Outcome>(kLimit, body);
  EXPECT_TRUE(result.child_ok) << "the child process died";
  EXPECT_EQ(result.setup_errno, 0)
      << "could not drop CAP_IPC_LOCK or lower the limit: " << std::strerror(result.setup_errno);
  return result.outcome;
}

TEST(PinBudgetRuleTest, IsTheLimitMinusAnEighthOfHeadroom) {
  EXPECT_EQ(BudgetForLimit(8 << 20, true), size_t{7} << 20);
  EXPECT_EQ(BudgetForLimit(kLimit, true), kBudget);
}

TEST(PinBudgetRuleTest, HeadroomIsAtLeast64KiBAndAtMostHalf) {
  EXPECT_EQ(BudgetForLimit(256 * kKiB, true), 192 * kKiB);
  EXPECT_EQ(BudgetForLimit(64 * kKiB, true), 32 * kKiB);
}

TEST(PinBudgetRuleTest, NoBudgetWhenUnlimitedOrExempt) {
  EXPECT_EQ(BudgetForLimit(RLIM_INFINITY, true), 0u);
  EXPECT_EQ(BudgetForLimit(8 << 20, false), 0u);
}

struct WorkingSetOutcome {
  int setup_errno = 0;
  int gets = 0, failed_gets = 0;
  int register_calls = 0, deregistrations = 0, registrations_at_end = 0;
  size_t peak_pinned = 0;
  uint64_t pin_budget_bytes = 0;
};

WorkingSetOutcome RunWorkingSetLargerThanTheLimit() {
  WorkingSetOutcome out;
  constexpr int kCount = 32;  // 2 MiB: twice the limit
  Buffers bufs(kCount, kBuffer);
  {
    Counted c;
    if (c.setup_errno != 0 || !bufs.ok()) {
      out.setup_errno = c.setup_errno ? c.setup_errno : ENOMEM;
      return out;
    }
    out.pin_budget_bytes = c.cache->stats().pin_budget_bytes;
    // Cyclic (every get misses under LRU), then a skewed pattern.
    uint64_t x = 12345;
    for (int i = 0; i < 4 * kCount; ++i) {
      int b =
          i < 2 * kCount ? i % kCount : static_cast<int>((x = x * 6364136223846793005u + 1) >> 59);
      ++out.gets;
      if (c.Touch(bufs.at(b), kBuffer) != 0) ++out.failed_gets;
      out.peak_pinned = std::max(out.peak_pinned, c.pinned());
    }
    out.register_calls = c.counters->register_calls.load();
  }
  // (The counters outlive the cache: everything is deregistered now.)
  return out;
}

TEST(PinBudgetTest, WorkingSetLargerThanTheLimitNeverCostsMoreCallsThanNoCache) {
  const WorkingSetOutcome o = RunLimited<WorkingSetOutcome>(RunWorkingSetLargerThanTheLimit);
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.pin_budget_bytes, kBudget);
  EXPECT_EQ(o.failed_gets, 0);
  // Without a cache: one register and one deregister per get. With it: at
  // most one register per get (no refusals within the budget), and at most
  // one deregister per register.
  EXPECT_LE(o.register_calls, o.gets);
  EXPECT_LE(o.peak_pinned, kBudget);
  std::printf(
      "RELIABILITY pin_budget working_set=2MiB limit=1MiB gets=%d register_calls=%d "
      "peak_pinned=%zu\n",
      o.gets, o.register_calls, o.peak_pinned);
}

struct FitsAloneOutcome {
  int setup_errno = 0;
  int big_errno = -1;
  int refusals = 0;
  uint64_t evictions = 0;
  int recent_reregistered = 0;  // of the regions that should have stayed
};

FitsAloneOutcome RunRequestThatFitsAlone() {
  FitsAloneOutcome out;
  constexpr int kCount = 12;  // 768 KiB of unused regions
  Buffers small(kCount, kBuffer);
  Buffers big(1, 512 * kKiB);
  Counted c(/*max_merge_bytes=*/0);
  if (c.setup_errno != 0 || !small.ok() || !big.ok()) {
    out.setup_errno = c.setup_errno ? c.setup_errno : ENOMEM;
    return out;
  }
  for (int i = 0; i < kCount; ++i) c.Touch(small.at(i), kBuffer);
  out.big_errno = c.Touch(big.at(0), 512 * kKiB);
  out.refusals = c.refusals();
  out.evictions = c.cache->stats().evictions;
  // 768 + 512 - 896 = 384 KiB were missing: the six least recently used
  // buffers (0..5) went; 6..11 must still be cached.
  const int before = c.counters->registrations.load();
  for (int i = 6; i < kCount; ++i) c.Touch(small.at(i), kBuffer);
  out.recent_reregistered = c.counters->registrations.load() - before;
  return out;
}

TEST(PinBudgetTest, RequestThatFitsAloneSucceedsWhileOtherRegionsAreUnused) {
  const FitsAloneOutcome o = RunLimited<FitsAloneOutcome>(RunRequestThatFitsAlone);
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.big_errno, 0) << std::strerror(o.big_errno);
  EXPECT_EQ(o.refusals, 0) << "the budget made room before the registrar was asked";
  EXPECT_EQ(o.evictions, 6u) << "least recently used regions, only until the request fit";
  EXPECT_EQ(o.recent_reregistered, 0);
}

struct LargestFirstOutcome {
  int setup_errno = 0;
  int request_errno = -1;
  uint64_t evictions = 0;
  int oldest_reregistered = -1;  // the oldest small region, touched again
  int large_reregistered = -1;   // the large one, touched again
};

// Small regions and a large one, all unused, then a request the budget
// lacks room for.
struct MakingRoom {
  size_t small, large, request;
  int small_count;
  int small_before_large;  // how many small regions are older than the large one
  bool hit_large;          // the large region is hit again before the request
};

LargestFirstOutcome RunMakingRoom(const MakingRoom& m) {
  LargestFirstOutcome out;
  Buffers small(m.small_count, m.small);
  Buffers large(1, m.large);
  Buffers request(1, m.request);
  Counted c(/*max_merge_bytes=*/0);
  if (c.setup_errno != 0 || !small.ok() || !large.ok() || !request.ok()) {
    out.setup_errno = c.setup_errno ? c.setup_errno : ENOMEM;
    return out;
  }
  for (int i = 0; i < m.small_before_large; ++i) c.Touch(small.at(i), m.small);
  c.Touch(large.at(0), m.large);
  for (int i = m.small_before_large; i < m.small_count; ++i) c.Touch(small.at(i), m.small);
  if (m.hit_large) c.Touch(large.at(0), m.large);
  out.request_errno = c.Touch(request.at(0), m.request);
  out.evictions = c.cache->stats().evictions;
  out.oldest_reregistered = c.Reregistrations(small.at(0), m.small);
  out.large_reregistered = c.Reregistrations(large.at(0), m.large);
  return out;
}

// Oldest first: one small region, the large one, then 30 small ones: 16 +
// 256 + 480 = 752 KiB of the 896 KiB budget. 752 + 192 - 896 = 48 KiB are
// missing. Least recently used order would evict the oldest small region and
// then the large one; by size, the large one alone makes room.
LargestFirstOutcome RunMakingRoomNearTheTail(bool hit_large) {
  return RunMakingRoom({16 * kKiB, 256 * kKiB, 192 * kKiB, 31, 1, hit_large});
}

TEST(PinBudgetTest, MakingRoomEvictsTheLargestOfTheLeastRecentlyUsedRegions) {
  const LargestFirstOutcome o =
      RunLimited<LargestFirstOutcome>([] { return RunMakingRoomNearTheTail(/*hit_large=*/false); });
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.request_errno, 0) << std::strerror(o.request_errno);
  EXPECT_EQ(o.evictions, 1u) << "one large region, not the small older one as well";
  EXPECT_EQ(o.oldest_reregistered, 0) << "the oldest small region stayed cached";
  EXPECT_EQ(o.large_reregistered, 1) << "the large region was the one evicted";
}

TEST(PinBudgetTest, MakingRoomKeepsALargeRegionHitSinceItWasPlaced) {
  const LargestFirstOutcome o =
      RunLimited<LargestFirstOutcome>([] { return RunMakingRoomNearTheTail(/*hit_large=*/true); });
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.request_errno, 0) << std::strerror(o.request_errno);
  EXPECT_EQ(o.evictions, 3u) << "the three oldest small regions (48 KiB)";
  EXPECT_EQ(o.oldest_reregistered, 1) << "the oldest small region was evicted";
  EXPECT_EQ(o.large_reregistered, 0) << "the large region, in use lately, stayed cached";
}

// 40 small regions, then a large one, the most recently used of all, far
// beyond any window of least recently used regions: 640 + 192 + 128 - 896 =
// 64 KiB are missing, four small regions or the large one alone.
LargestFirstOutcome RunMakingRoomFarFromTheTail() {
  return RunMakingRoom({16 * kKiB, 192 * kKiB, 128 * kKiB, 40, 40, false});
}

TEST(PinBudgetTest, MakingRoomEvictsTheLargestUnusedRegionHoweverRecentlyItWasRegistered) {
  const LargestFirstOutcome o = RunLimited<LargestFirstOutcome>(RunMakingRoomFarFromTheTail);
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.request_errno, 0) << std::strerror(o.request_errno);
  EXPECT_EQ(o.evictions, 1u) << "the large region alone, not four small older ones";
  EXPECT_EQ(o.oldest_reregistered, 0) << "the oldest small region stayed cached";
  EXPECT_EQ(o.large_reregistered, 1) << "the large region was the one evicted";
}

struct UnionOutcome {
  int setup_errno = 0;
  int request_errno = -1;
  uint64_t merges = 0;
  uint64_t evictions = 0;
  int union_reregistered = -1;   // a part of the union, touched again
  int single_reregistered = -1;  // the single 96 KiB region, touched again
};

// Four overlapping 12 KiB requests merge into one region of 52 KiB (the
// oldest; within the sixteenth of the budget a union joining requests may
// take), then a single 24 KiB region and 48 small ones follow.
UnionOutcome RunMakingRoomBesideAUnion() {
  UnionOutcome out;
  constexpr size_t kPart = 12 * kKiB, kSingle = 24 * kKiB, kSmall = 16 * kKiB;
  constexpr size_t kRequest = 64 * kKiB;
  constexpr int kParts = 4, kSmallCount = 48;
  Buffers whole(1, kParts * kPart + kPage);
  Buffers single(1, kSingle);
  Buffers small(kSmallCount, kSmall);
  Buffers request(1, kRequest);
  Counted c;  // merging on; monitor none, so nothing is bridged
  if (c.setup_errno != 0 || !whole.ok() || !single.ok() || !small.ok() || !request.ok()) {
    out.setup_errno = c.setup_errno ? c.setup_errno : ENOMEM;
    return out;
  }
  if (!c.LiveAWindow()) {
    out.setup_errno = ENOMEM;
    return out;
  }
  // Each part reaches 64 bytes into the next: every request after the first
  // overlaps the region before it and registers their union.
  for (int i = 0; i < kParts; ++i) c.Touch(whole.at(0) + i * kPart, kPart + 64);
  out.merges = c.cache->stats().merges;
  c.Touch(single.at(0), kSingle);
  for (int i = 0; i < kSmallCount; ++i) c.Touch(small.at(i), kSmall);
  // 52 + 24 + 768 + 64 - 896 = 12 KiB are missing. By bytes alone the
  // union (the least recently used, and the largest) would go; by bytes per
  // region merged it weighs 13 KiB, a small region 16 KiB and the single
  // region 24 KiB.
  const uint64_t evictions_before = c.cache->stats().evictions;
  out.request_errno = c.Touch(request.at(0), kRequest);
  out.evictions = c.cache->stats().evictions - evictions_before;
  out.union_reregistered = c.Reregistrations(whole.at(0) + kPart, kPart);
  out.single_reregistered = c.Reregistrations(single.at(0), kSingle);
  return out;
}

TEST(PinBudgetTest, MakingRoomWeighsAMergeUnionByTheRegionsItMerged) {
  const UnionOutcome o = RunLimited<UnionOutcome>(RunMakingRoomBesideAUnion);
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  ASSERT_EQ(o.merges, 3u) << "the four requests made one union";
  EXPECT_EQ(o.request_errno, 0) << std::strerror(o.request_errno);
  EXPECT_EQ(o.evictions, 1u);
  EXPECT_EQ(o.single_reregistered, 1) << "the single region, the heaviest, was evicted";
  EXPECT_EQ(o.union_reregistered, 0) << "the union of four stayed cached";
}

struct WideningOutcome {
  int setup_errno = 0;
  uint64_t merges = 0;
  int registrations = 0;
};

// What the cache saw before the two requests below.
enum class History {
  kNone,           // nothing: a fresh cache
  kRegionsLive,    // a window of misses in which no region died
  kChurn,          // that, then a window in which one region in 8 died
  kChurnThenLive,  // that, then a window with one death fewer than churning takes
};

// Two requests in one buffer, the second from `second_offset` for
// `second_length` bytes, after the first (the buffer's first `first_length`
// bytes), after `history`.
WideningOutcome RunTwoRequests(size_t first_length, size_t second_offset, size_t second_length,
                               History history = History::kRegionsLive) {
  WideningOutcome out;
  Buffers buffer(1, 256 * kKiB);
  Counted c;  // merging on; monitor none, so nothing is bridged
  if (c.setup_errno != 0 || !buffer.ok()) {
    out.setup_errno = c.setup_errno ? c.setup_errno : ENOMEM;
    return out;
  }
  constexpr int kChurnDeaths =
      static_cast<int>(AddressChurn::kWindowMisses / AddressChurn::kMissesPerDeath);
  bool ran = true;
  if (history != History::kNone) ran = ran && c.LiveAWindow();
  if (history == History::kChurn || history == History::kChurnThenLive) {
    ran = ran && c.LiveAWindow(kChurnDeaths);
  }
  if (history == History::kChurnThenLive) ran = ran && c.LiveAWindow(kChurnDeaths - 1);
  if (!ran) {
    out.setup_errno = ENOMEM;
    return out;
  }
  const uint64_t merges_before = c.cache->stats().merges;
  const int registrations_before = c.counters->registrations.load();
  c.Touch(buffer.at(0), first_length);
  c.Touch(buffer.at(0) + second_offset, second_length);
  out.merges = c.cache->stats().merges - merges_before;
  out.registrations = c.counters->registrations.load() - registrations_before;
  return out;
}

// The budget is 896 KiB: a union joining two requests may take 56 KiB, one
// absorbing a request it covers 224 KiB.
TEST(PinBudgetTest, UnderTheBudgetAUnionJoiningTwoRequestsTakesAtMostASixteenth) {
  const WideningOutcome small = RunLimited<WideningOutcome>(
      [] { return RunTwoRequests(24 * kKiB, 24 * kKiB - 64, 24 * kKiB); });
  ASSERT_EQ(small.setup_errno, 0) << std::strerror(small.setup_errno);
  EXPECT_EQ(small.merges, 1u) << "a 48 KiB union of neighbours is registered";
  const WideningOutcome large = RunLimited<WideningOutcome>(
      [] { return RunTwoRequests(40 * kKiB, 40 * kKiB - 64, 40 * kKiB); });
  ASSERT_EQ(large.setup_errno, 0) << std::strerror(large.setup_errno);
  EXPECT_EQ(large.merges, 0u) << "an 80 KiB union of neighbours is not";
  EXPECT_EQ(large.registrations, 2) << "each request registered its own pages";
}

TEST(PinBudgetTest, UnderTheBudgetAFreshCacheJoinsNoRequestsBeforeItsRegionsLiveAWindow) {
  const WideningOutcome o = RunLimited<WideningOutcome>(
      [] { return RunTwoRequests(24 * kKiB, 24 * kKiB - 64, 24 * kKiB, History::kNone); });
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.merges, 0u) << "no evidence yet that joined buffers would live together";
  EXPECT_EQ(o.registrations, 2) << "each request registered its own pages";
}

TEST(PinBudgetTest, UnderTheBudgetJoiningStopsWhileRegionsDieByInvalidation) {
  const WideningOutcome o = RunLimited<WideningOutcome>(
      [] { return RunTwoRequests(24 * kKiB, 24 * kKiB - 64, 24 * kKiB, History::kChurn); });
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.merges, 0u) << "one region in 8 died in the last window";
  EXPECT_EQ(o.registrations, 2);
}

TEST(PinBudgetTest, UnderTheBudgetJoiningResumesOnceRegionsLiveAgain) {
  const WideningOutcome o = RunLimited<WideningOutcome>(
      [] { return RunTwoRequests(24 * kKiB, 24 * kKiB - 64, 24 * kKiB, History::kChurnThenLive); });
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.merges, 1u) << "fewer than one region in 8 died in the last window";
  EXPECT_EQ(o.registrations, 2) << "the first request's region, then the union";
}

TEST(PinBudgetTest, UnderTheBudgetARequestCoveringAnotherAbsorbsItUpToAQuarter) {
  const WideningOutcome o =
      RunLimited<WideningOutcome>([] { return RunTwoRequests(16 * kKiB, 0, 160 * kKiB); });
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.merges, 1u) << "the 160 KiB request replaced the 16 KiB region it covers";
  EXPECT_EQ(o.registrations, 2);
}

struct ChurningThreadsOutcome {
  int setup_errno = 0;
  int unexpected_errors = 0;
  int gets = 0;
  uint64_t merges = 0;
  size_t peak_pinned = 0;
  int registrations = 0, deregistrations = 0;  // after the cache is gone
};

// Four threads each map a buffer of 1-16 pages, get and put byte ranges of
// it that share pages with each other (a union would join them), and now
// and then invalidate and unmap it and map another: regions keep dying
// while others join, after a first window in which they lived.
ChurningThreadsOutcome RunThreadsMappingAndUnmappingWhileJoining() {
  ChurningThreadsOutcome out;
  std::shared_ptr<RegistrarCounters> counters;
  {
    Counted c;
    counters = c.counters;
    if (c.setup_errno != 0 || !c.LiveAWindow()) {
      out.setup_errno = c.setup_errno ? c.setup_errno : ENOMEM;
      return out;
    }
    constexpr int kThreads = 4;
    constexpr int kOps = 3000;
    std::atomic<int> unexpected{0}, gets{0};
    std::atomic<size_t> peak{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&c, &unexpected, &gets, &peak, t] {
        uint64_t x = 0x9e3779b97f4a7c15ull * (t + 1);
        auto next = [&x](uint64_t n) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          return (x >> 33) % n;
        };
        char* buf = nullptr;
        size_t len = 0;
        for (int op = 0; op < kOps; ++op) {
          if (buf == nullptr || next(16) == 0) {
            if (buf != nullptr) {
              (void)c.cache->Invalidate(buf, len);  // as a runtime does before it frees
              munmap(buf, len);
            }
            len = (1 + next(16)) * kPage;
            buf = static_cast<char*>(
                mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
            if (buf == MAP_FAILED) {
              buf = nullptr;
              unexpected.fetch_add(1);
              return;
            }
            std::memset(buf, 1, len);
          }
          const size_t off = next(len);
          const int err = c.Touch(buf + off, 1 + next(len - off));
          gets.fetch_add(1);
          // Neither ENOMEM nor EAGAIN can happen: each thread releases only
          // its own buffer, and the regions in use (one per thread, at most
          // a quarter of the budget each once widened) fit the budget.
          if (err != 0) {
            unexpected.fetch_add(1);
            std::fprintf(stderr, "a get failed: %s\n", std::strerror(err));
          }
          if (t == 0 && op % 64 == 0) {
            const size_t now = c.pinned();
            if (now > peak.load()) peak.store(now);
          }
        }
        if (buf != nullptr) {
          (void)c.cache->Invalidate(buf, len);
          munmap(buf, len);
        }
      });
    }
    for (std::thread& th : threads) th.join();
    out.unexpected_errors = unexpected.load();
    out.gets = gets.load();
    out.merges = c.cache->stats().merges;
    out.peak_pinned = peak.load();
  }
  out.registrations = counters->registrations.load();
  out.deregistrations = counters->deregistrations.load();
  return out;
}

TEST(PinBudgetTest, ThreadsMappingAndUnmappingWhileUnionsJoinLeakNothing) {
  const ChurningThreadsOutcome o =
      RunLimited<ChurningThreadsOutcome>(RunThreadsMappingAndUnmappingWhileJoining);
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.unexpected_errors, 0) << "a get failed";
  EXPECT_EQ(o.gets, 4 * 3000);
  EXPECT_GT(o.merges, 0u) << "unions joined while the regions lived";
  EXPECT_LE(o.peak_pinned, kBudget);
  EXPECT_EQ(o.registrations, o.deregistrations) << "every registration was deregistered";
}

struct CannotFitOutcome {
  int setup_errno = 0;
  int err = 0;
  char message[512] = {};
  uint64_t evictions = 0;
  int refusals = 0;
  int registrations = 0, deregistrations = 0;  // after the cache is gone
};

CannotFitOutcome RunRequestThatCannotFit() {
  CannotFitOutcome out;
  Buffers small(4, kBuffer);
  Buffers big(1, 2 * kLimit);
  std::shared_ptr<RegistrarCounters> counters;
  {
    Counted c;
    counters = c.counters;
    if (c.setup_errno != 0 || !small.ok() || !big.ok()) {
      out.setup_errno = c.setup_errno ? c.setup_errno : ENOMEM;
      return out;
    }
    for (int i = 0; i < 4; ++i) c.Touch(small.at(i), kBuffer);
    auto r = c.cache->Acquire(big.at(0), 2 * kLimit, kAccessLocalWrite);
    if (r.ok()) {
      (void)c.cache->Put(*r);
    } else {
      out.err = StatusToErrno(r.status());
      std::snprintf(out.message, sizeof out.message, "%s",
                    std::string(r.status().message()).c_str());
    }
    out.evictions = c.cache->stats().evictions;
    out.refusals = c.refusals();
  }
  out.registrations = counters->registrations.load();
  out.deregistrations = counters->deregistrations.load();
  return out;
}

TEST(PinBudgetTest, RequestThatCannotFitIsEnomemNamingTheLimitAndLeaksNothing) {
  const CannotFitOutcome o = RunLimited<CannotFitOutcome>(RunRequestThatCannotFit);
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.err, ENOMEM);
  EXPECT_NE(std::strstr(o.message, "RLIMIT_MEMLOCK is 1048576 bytes"), nullptr) << o.message;
  EXPECT_NE(std::strstr(o.message, "mrcache pins 262144 bytes"), nullptr) << o.message;
  EXPECT_EQ(o.evictions, 0u) << "evicting cannot make it fit: the cache keeps its regions";
  EXPECT_EQ(o.refusals, 1) << "tried once, not retried";
  EXPECT_GT(o.registrations, 0);
  EXPECT_EQ(o.registrations, o.deregistrations);
}

struct TwoCachesOutcome {
  int setup_errno = 0;
  uint64_t budget_a = 0, budget_b = 0;
  int b_errno = -1;
  uint64_t a_evictions = 0;
  int refusals = 0;
  size_t peak_pinned = 0;
};

TwoCachesOutcome RunTwoCaches() {
  TwoCachesOutcome out;
  constexpr int kCount = 12;
  Buffers small(kCount, kBuffer);
  Buffers big(1, 512 * kKiB);
  Counted a(0), b(0);
  if (a.setup_errno != 0 || b.setup_errno != 0 || !small.ok() || !big.ok()) {
    out.setup_errno = a.setup_errno ? a.setup_errno : b.setup_errno ? b.setup_errno : ENOMEM;
    return out;
  }
  out.budget_a = a.cache->stats().pin_budget_bytes;
  out.budget_b = b.cache->stats().pin_budget_bytes;
  for (int i = 0; i < kCount; ++i) a.Touch(small.at(i), kBuffer);  // 768 KiB unused in a
  auto r = b.cache->Acquire(big.at(0), 512 * kKiB, kAccessLocalWrite);
  out.peak_pinned = a.pinned() + b.pinned();
  if (r.ok()) {
    out.b_errno = 0;
    (void)b.cache->Put(*r);
  } else {
    out.b_errno = StatusToErrno(r.status());
  }
  out.a_evictions = a.cache->stats().evictions;
  out.refusals = a.refusals() + b.refusals();
  return out;
}

TEST(PinBudgetTest, TwoCachesShareOneBudget) {
  const TwoCachesOutcome o = RunLimited<TwoCachesOutcome>(RunTwoCaches);
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.budget_a, kBudget);
  EXPECT_EQ(o.budget_b, kBudget);
  EXPECT_EQ(o.b_errno, 0) << std::strerror(o.b_errno);
  EXPECT_EQ(o.a_evictions, 6u) << "the other cache gave back only what was missing";
  EXPECT_EQ(o.refusals, 0);
  EXPECT_LE(o.peak_pinned, kBudget);
}

struct ForeignPinsOutcome {
  int setup_errno = 0;
  int gets = 0, failed_gets = 0, refusals = 0;
  uint64_t misses = 0, evictions = 0;
  uint64_t lowered_budget = 0, recovered_budget = 0;
};

ForeignPinsOutcome RunForeignPins() {
  ForeignPinsOutcome out;
  constexpr int kCount = 16;               // 1 MiB
  constexpr size_t kForeign = 512 * kKiB;  // pinned by the application itself
  Buffers bufs(kCount, kBuffer);
  Buffers foreign(1, kForeign);
  Counted c(0);
  // Raw system calls: ASan's mlock interceptor does nothing (as the sim
  // registrar's comment says).
  if (c.setup_errno != 0 || !bufs.ok() || !foreign.ok() ||
      syscall(SYS_mlock, foreign.at(0), kForeign) != 0) {
    out.setup_errno = c.setup_errno ? c.setup_errno : errno ? errno : ENOMEM;
    return out;
  }
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < kCount; ++i) {
      ++out.gets;
      if (c.Touch(bufs.at(i), kBuffer) != 0) ++out.failed_gets;
    }
  }
  CacheStats s = c.cache->stats();
  out.lowered_budget = s.pin_budget_bytes;
  out.misses = s.misses;
  out.evictions = s.evictions;
  out.refusals = c.refusals();
  syscall(SYS_munlock, foreign.at(0), kForeign);
  // Once the foreign pins are gone, successes raise the budget back (by
  // 1/16 of each registration: 384 KiB take 96 registrations of 64 KiB).
  for (int round = 0; round < 12; ++round) {
    for (int i = 0; i < kCount; ++i) c.Touch(bufs.at(i), kBuffer);
  }
  out.recovered_budget = c.cache->stats().pin_budget_bytes;
  return out;
}

TEST(PinBudgetTest, ForeignPinsLowerTheBudgetWhichRecoversWhenTheyGo) {
  const ForeignPinsOutcome o = RunLimited<ForeignPinsOutcome>(RunForeignPins);
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.failed_gets, 0);
  EXPECT_GT(o.refusals, 0) << "the application's own 512 KiB exceed the headroom";
  EXPECT_LT(o.lowered_budget, kBudget);
  EXPECT_LE(o.refusals, o.gets / 4) << "no thrashing: a refusal teaches the budget";
  EXPECT_LT(o.evictions, o.misses) << "regions stayed cached; no flush per miss";
  EXPECT_EQ(o.recovered_budget, kBudget);
  std::printf(
      "RELIABILITY pin_budget foreign=512KiB gets=%d misses=%llu refusals=%d evictions=%llu "
      "lowered_budget=%llu recovered_budget=%llu\n",
      o.gets, static_cast<unsigned long long>(o.misses), o.refusals,
      static_cast<unsigned long long>(o.evictions),
      static_cast<unsigned long long>(o.lowered_budget),
      static_cast<unsigned long long>(o.recovered_budget));
}

struct LessonOutcome {
  int setup_errno = 0;
  uint64_t lowered_budget = 0;       // cache A's, after the refusal
  uint64_t second_cache_budget = 0;  // cache B's, created while A lives
  uint64_t next_cache_budget = 0;    // cache C's, created after A and B are gone
};

// Cache A learns from a refusal (the application pins 512 KiB itself); B
// is created while A lives; C after both are destroyed, the foreign pins
// still in place.
LessonOutcome RunLessonLifetime() {
  LessonOutcome out;
  constexpr int kCount = 16;
  constexpr size_t kForeign = 512 * kKiB;
  Buffers bufs(kCount, kBuffer);
  Buffers foreign(1, kForeign);
  if (!bufs.ok() || !foreign.ok() || syscall(SYS_mlock, foreign.at(0), kForeign) != 0) {
    out.setup_errno = errno ? errno : ENOMEM;
    return out;
  }
  {
    Counted a(0);
    if (a.setup_errno != 0) {
      out.setup_errno = a.setup_errno;
      return out;
    }
    for (int i = 0; i < kCount; ++i) a.Touch(bufs.at(i), kBuffer);
    out.lowered_budget = a.cache->stats().pin_budget_bytes;
    Counted b(0);
    if (b.setup_errno != 0) {
      out.setup_errno = b.setup_errno;
      return out;
    }
    out.second_cache_budget = b.cache->stats().pin_budget_bytes;
  }
  Counted c(0);
  if (c.setup_errno != 0) {
    out.setup_errno = c.setup_errno;
    return out;
  }
  out.next_cache_budget = c.cache->stats().pin_budget_bytes;
  syscall(SYS_munlock, foreign.at(0), kForeign);
  return out;
}

TEST(PinBudgetTest, ARefusalsLessonIsSharedWhileACacheLivesAndForgottenAfterTheLast) {
  const LessonOutcome o = RunLimited<LessonOutcome>(RunLessonLifetime);
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_LT(o.lowered_budget, kBudget) << "the foreign pins exceed the headroom";
  EXPECT_EQ(o.second_cache_budget, o.lowered_budget);
  EXPECT_EQ(o.next_cache_budget, kBudget);
}

struct PassesOutcome {
  int setup_errno = 0;
  uint64_t pin_budget_bytes = 0;
  int failed_gets = 0;
  int registrations = 0;
  uint64_t evictions = 0;
  size_t peak_pinned = 0;
  int registrations_at_end = 0, deregistrations_at_end = 0;
};

// Three passes over 48 buffers of 64 KiB (3 MiB, three times the limit)
// through a sim registrar that pins with mlock or not.
PassesOutcome RunThreePasses(bool mlock) {
  PassesOutcome out;
  constexpr int kCount = 48;
  Buffers bufs(kCount, kBuffer);
  std::shared_ptr<RegistrarCounters> counters;
  {
    Counted c(size_t{1} << 30, mlock);
    counters = c.counters;
    if (c.setup_errno != 0 || !bufs.ok()) {
      out.setup_errno = c.setup_errno ? c.setup_errno : ENOMEM;
      return out;
    }
    for (int pass = 0; pass < 3; ++pass) {
      for (int i = 0; i < kCount; ++i) {
        if (c.Touch(bufs.at(i), kBuffer) != 0) ++out.failed_gets;
        out.peak_pinned = std::max(out.peak_pinned, c.pinned());
      }
    }
    const CacheStats s = c.cache->stats();
    out.pin_budget_bytes = s.pin_budget_bytes;
    out.evictions = s.evictions;
    out.registrations = counters->registrations.load();
  }
  out.registrations_at_end = counters->registrations.load();
  out.deregistrations_at_end = counters->deregistrations.load();
  return out;
}

TEST(PinBudgetTest, SimRegistrarIsNotBoundByTheMemlockLimit) {
  const PassesOutcome o = RunLimited<PassesOutcome>([] { return RunThreePasses(false); });
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.pin_budget_bytes, 0u) << "sim without sim_mlock pins nothing: no budget";
  EXPECT_EQ(o.failed_gets, 0);
  EXPECT_EQ(o.registrations, 48) << "each buffer registered once; the later passes hit";
  EXPECT_EQ(o.evictions, 0u);
  EXPECT_EQ(o.peak_pinned, 48 * kBuffer) << "three times the limit stays registered";
  EXPECT_EQ(o.registrations_at_end, o.deregistrations_at_end);
}

TEST(PinBudgetTest, PinningRegistrarIsStillBoundByTheMemlockLimit) {
  const PassesOutcome o = RunLimited<PassesOutcome>([] { return RunThreePasses(true); });
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.pin_budget_bytes, kBudget) << "sim_mlock pins: the budget applies";
  EXPECT_EQ(o.failed_gets, 0);
  EXPECT_GT(o.evictions, 0u);
  EXPECT_LE(o.peak_pinned, kBudget);
  EXPECT_LE(o.registrations, 3 * 48) << "never more calls than registering every get";
  EXPECT_EQ(o.registrations_at_end, o.deregistrations_at_end);
}

// Custom-registrar callbacks that pin nothing, counting live registrations.
struct CustomCounts {
  int registrations = 0;
  int live = 0;
};
int CountingReg(void* ctx, void* addr, size_t length, int access, uint64_t* handle, uint32_t* lkey,
                uint32_t* rkey) {
  auto* counts = static_cast<CustomCounts*>(ctx);
  ++counts->registrations;
  ++counts->live;
  *handle = reinterpret_cast<uintptr_t>(addr);
  *lkey = *rkey = 1;
  return 0;
}
int CountingDereg(void* ctx, uint64_t handle) {
  --static_cast<CustomCounts*>(ctx)->live;
  return 0;
}

struct CustomOutcome {
  int setup_errno = 0;
  uint64_t pin_budget_bytes = 1;
  int failed_gets = 0;
  int registrations = 0;
  int live_at_end = -1;
};

// Three passes over 48 buffers of 64 KiB through a custom registrar whose
// config leaves custom_pins alone or sets it to `custom_pins`.
CustomOutcome RunCustomRegistrar(const char* custom_pins) {
  CustomOutcome out;
  constexpr int kCount = 48;
  Buffers bufs(kCount, kBuffer);
  CustomCounts counts;
  mrc_config_t* cfg = nullptr;
  mrc_cache_t* cache = nullptr;
  const mrc_registrar_ops_t ops{CountingReg, CountingDereg};
  int err = bufs.ok() ? mrc_config_create(&cfg) : ENOMEM;
  if (err == 0) err = mrc_config_set(cfg, "monitor", "none");
  if (err == 0 && custom_pins != nullptr) err = mrc_config_set(cfg, "custom_pins", custom_pins);
  if (err == 0) err = mrc_cache_create_custom(cfg, &ops, &counts, &cache);
  mrc_config_destroy(cfg);
  if (err != 0) {
    out.setup_errno = err;
    return out;
  }
  for (int pass = 0; pass < 3; ++pass) {
    for (int i = 0; i < kCount; ++i) {
      mrc_region_t* r = nullptr;
      if (mrc_get(cache, bufs.at(i), kBuffer, kAccessLocalWrite, &r) != 0) {
        ++out.failed_gets;
        continue;
      }
      mrc_put(cache, r);
    }
  }
  mrc_stats_t s{};
  mrc_stats(cache, &s);
  out.pin_budget_bytes = s.pin_budget_bytes;
  out.registrations = counts.registrations;
  mrc_cache_destroy(cache);
  out.live_at_end = counts.live;
  return out;
}

TEST(PinBudgetTest, CustomRegistrarIsTakenToPinByDefault) {
  const CustomOutcome o =
      RunLimited<CustomOutcome>([] { return RunCustomRegistrar(/*custom_pins=*/nullptr); });
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.pin_budget_bytes, kBudget) << "callbacks that call ibv_reg_mr pin";
  EXPECT_EQ(o.failed_gets, 0);
  EXPECT_GT(o.registrations, 48) << "3 MiB cannot stay registered within 896 KiB";
  EXPECT_EQ(o.live_at_end, 0);
}

TEST(PinBudgetTest, CustomRegistrarWithCustomPinsZeroIsNotBoundByTheMemlockLimit) {
  const CustomOutcome o = RunLimited<CustomOutcome>([] { return RunCustomRegistrar("0"); });
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.pin_budget_bytes, 0u);
  EXPECT_EQ(o.failed_gets, 0);
  EXPECT_EQ(o.registrations, 48) << "each buffer registered once; the later passes hit";
  EXPECT_EQ(o.live_at_end, 0);
}

struct LargeOutcome {
  int setup_errno = 0;
  int first_errno = -1, second_errno = -1, third_errno = -1;
  uint64_t evictions_first = 0, bypassed_first = 0;
  size_t pinned_after_first = 0;
  int small_reregistered = 0;  // of the nine small regions the first use left
  int second_registrations = 0, third_registrations = 0;
  uint64_t bypassed_end = 0;
  int registrations_at_end = 0, deregistrations_at_end = 0;
};

// 12 unused 64 KiB regions (768 KiB of the 896 KiB budget), then a 320 KiB
// buffer (more than a quarter of the budget) three times, with three other
// small buffers filling the room again after its first use.
LargeOutcome RunLargeRequest() {
  LargeOutcome out;
  constexpr int kSmall = 15;
  constexpr size_t kLarge = 320 * kKiB;
  Buffers small(kSmall, kBuffer);
  Buffers large(1, kLarge);
  std::shared_ptr<RegistrarCounters> counters;
  {
    Counted c(/*max_merge_bytes=*/0);
    counters = c.counters;
    if (c.setup_errno != 0 || !small.ok() || !large.ok()) {
      out.setup_errno = c.setup_errno ? c.setup_errno : ENOMEM;
      return out;
    }
    for (int i = 0; i < 12; ++i) c.Touch(small.at(i), kBuffer);
    out.first_errno = c.Touch(large.at(0), kLarge);
    out.evictions_first = c.cache->stats().evictions;
    out.bypassed_first = c.cache->stats().bypassed;
    out.pinned_after_first = c.pinned();
    int before = counters->registrations.load();
    for (int i = 3; i < 12; ++i) c.Touch(small.at(i), kBuffer);
    out.small_reregistered = counters->registrations.load() - before;
    for (int i = 12; i < kSmall; ++i) c.Touch(small.at(i), kBuffer);  // the room is full again
    before = counters->registrations.load();
    out.second_errno = c.Touch(large.at(0), kLarge);
    out.second_registrations = counters->registrations.load() - before;
    before = counters->registrations.load();
    out.third_errno = c.Touch(large.at(0), kLarge);
    out.third_registrations = counters->registrations.load() - before;
    out.bypassed_end = c.cache->stats().bypassed;
  }
  out.registrations_at_end = counters->registrations.load();
  out.deregistrations_at_end = counters->deregistrations.load();
  return out;
}

TEST(PinBudgetTest, LargeRequestThatWouldEvictIsRegisteredForItselfAndReleasedAtPut) {
  const LargeOutcome o = RunLimited<LargeOutcome>(RunLargeRequest);
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.first_errno, 0) << std::strerror(o.first_errno);
  EXPECT_EQ(o.evictions_first, 3u) << "768 + 320 - 896 KiB: three regions, only until it fit";
  EXPECT_EQ(o.bypassed_first, 1u);
  EXPECT_EQ(o.pinned_after_first, 9 * kBuffer) << "its registration went at its put";
  EXPECT_EQ(o.small_reregistered, 0) << "the nine other regions stayed cached";
  EXPECT_EQ(o.registrations_at_end, o.deregistrations_at_end);
}

TEST(PinBudgetTest, LargeRequestSeenAgainSoonIsCached) {
  const LargeOutcome o = RunLimited<LargeOutcome>(RunLargeRequest);
  ASSERT_EQ(o.setup_errno, 0) << std::strerror(o.setup_errno);
  EXPECT_EQ(o.second_errno, 0) << std::strerror(o.second_errno);
  EXPECT_EQ(o.second_registrations, 1);
  EXPECT_EQ(o.third_errno, 0) << std::strerror(o.third_errno);
  EXPECT_EQ(o.third_registrations, 0) << "the second use cached it";
  EXPECT_EQ(o.bypassed_end, 1u);
  EXPECT_EQ(o.registrations_at_end, o.deregistrations_at_end);
}

}  // namespace
}  // namespace mrcache
