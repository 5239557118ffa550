// bridging_test.cc: a miss in stable, resident memory registers the resident
// part of its mapping around it (within its bridge_bytes block) once a second
// region shows up there; never over untouched memory, never past its mapping,
// never without a monitor that reports every release, never where regions
// died by invalidation, never for requests with remote rights (their rkey
// reaches only pages requested with them). Runs on the sim registrar (counts)
// and, for the stale oracle, on uring. Every test ends with registrations ==
// deregistrations.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "mrcache/cache.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/registrars/sim_registrar.h"
#include "mrcache/registrars/uring_registrar.h"
#include "tests/cache/counting_registrar.h"
#include "tests/cache/region_limit_cases.h"

namespace mrcache {
namespace {

using testing::CompleteMonitor;
using testing::CountingRegistrar;
using testing::RegistrarCounters;

constexpr int kRW = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
constexpr int kLocal = kAccessLocalWrite;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr size_t kPages = 64;

// `len` bytes (at most 1 MiB) of fresh anonymous memory that lie in one
// 1 MiB-aligned block, and so in one block of bridge_bytes' default (128
// MiB) and of the 1 MiB blocks the cache bridges within under the pin budget
// of an 8 MiB RLIMIT_MEMLOCK: a bridge never crosses a block boundary, so one
// in a test's buffer would make the test depend on where the kernel put it.
// MAP_FAILED if nothing can be mapped.
char* MapWithinOneBridgeBlock(size_t len) {
  constexpr uintptr_t kBlock = uintptr_t{1} << 20;
  void* raw = mmap(nullptr, 2 * len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return static_cast<char*>(MAP_FAILED);
  const uintptr_t first = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t boundary = (first + kBlock - 1) & ~(kBlock - 1);
  const uintptr_t start = boundary > first && boundary < first + len ? boundary : first;
  if (start > first) munmap(raw, start - first);
  munmap(reinterpret_cast<void*>(start + len), first + 2 * len - (start + len));
  return reinterpret_cast<char*>(start);
}

class BridgingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    monitor_ = CompleteMonitor();
    if (monitor_.empty()) GTEST_SKIP() << "neither patch nor symbols+uffd can exist in this build";
    config_.monitor = monitor_;
    area_ = MapWithinOneBridgeBlock(kPages * kPage);
    ASSERT_NE(area_, MAP_FAILED);
  }

  void TearDown() override {
    cache_.reset();
    EXPECT_EQ(state_->registrations.load(), state_->deregistrations.load());
    if (area_ != nullptr && area_ != MAP_FAILED) munmap(area_, kPages * kPage);
  }

  void TouchAll() { std::memset(area_, 1, kPages * kPage); }

  Cache& cache(bool uring = false) {
    if (!cache_) {
      std::unique_ptr<Registrar> inner;
      if (uring) {
        auto r = MakeUringRegistrar(config_);
        EXPECT_TRUE(r.ok()) << r.status();
        inner = std::move(*r);
      } else {
        config_.sim_base_ns = config_.sim_page_ns = 0;
        inner = MakeSimRegistrar(config_);
      }
      auto c =
          Cache::Create(config_, std::make_unique<CountingRegistrar>(std::move(inner), state_));
      EXPECT_TRUE(c.ok()) << c.status();
      cache_ = std::move(*c);
    }
    return *cache_;
  }

  Region* Get(size_t page, size_t length = 100, int access = kLocal) {
    auto r = cache().Acquire(area_ + page * kPage + 8, length, access);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : nullptr;
  }
  void Put(Region* r) { ASSERT_TRUE(cache().Put(r).ok()); }

  // Pages 2 and 40 of a resident mapping get regions of their own page only.
  void ExpectTwoResidentRequestsStayApart() {
    TouchAll();
    Put(Get(2));
    Region* r = Get(40);
    EXPECT_EQ(GetRegionInfo(r).length, kPage);
    Put(r);
    EXPECT_EQ(state_->live.size(), 2u);
  }

  std::string monitor_;
  Config config_;
  std::shared_ptr<RegistrarCounters> state_ = std::make_shared<RegistrarCounters>();
  std::unique_ptr<Cache> cache_;
  char* area_ = nullptr;
};

TEST_F(BridgingTest, SecondRegionInAResidentMappingRegistersTheWholeMapping) {
  // Keep the mapping apart from its neighbours (different protections), so
  // that its extent is exactly the area.
  TouchAll();
  ASSERT_EQ(mprotect(area_, kPage, PROT_READ), 0);
  ASSERT_EQ(mprotect(area_ + (kPages - 1) * kPage, kPage, PROT_READ), 0);
  Put(Get(2));
  Region* r = Get(40);
  RegionInfo info = GetRegionInfo(r);
  EXPECT_EQ(info.addr, area_ + kPage);
  EXPECT_EQ(info.length, (kPages - 2) * kPage);
  Put(r);
  Put(Get(20));
  EXPECT_EQ(state_->registrations.load(), 2) << "the rest of the mapping hits";
}

TEST_F(BridgingTest, NeverBridgesOverUntouchedMemory) {
  area_[2 * kPage] = 1;
  area_[40 * kPage] = 1;
  Put(Get(2));
  Region* r = Get(40);
  EXPECT_EQ(GetRegionInfo(r).length, kPage) << "pages 3-39 were never touched";
  Put(r);
}

TEST_F(BridgingTest, NeverBridgesPastItsMapping) {
  TouchAll();
  ASSERT_EQ(mprotect(area_ + 32 * kPage, 32 * kPage, PROT_READ), 0);  // a second mapping
  Put(Get(2));
  Region* r = Get(10);
  RegionInfo info = GetRegionInfo(r);
  EXPECT_LE(static_cast<char*>(info.addr) + info.length, area_ + 32 * kPage);
  EXPECT_GT(info.length, kPage) << "bridged inside the first mapping";
  Put(r);
}

TEST_F(BridgingTest, NoBridgingWithoutAMonitorThatSeesEveryRelease) {
  config_.monitor = "none";  // e.g. a heap trim would go unreported
  ExpectTwoResidentRequestsStayApart();
}

TEST_F(BridgingTest, BridgeBytesZeroTurnsBridgingOff) {
  config_.bridge_bytes = 0;
  ExpectTwoResidentRequestsStayApart();
}

TEST_F(BridgingTest, NoBridgingWhereRegionsRecentlyDiedByInvalidation) {
  TouchAll();
  Put(Get(2));
  ASSERT_TRUE(cache().Invalidate(area_ + 2 * kPage + 8, 1).ok());
  Put(Get(5));
  Region* r = Get(40);
  EXPECT_EQ(GetRegionInfo(r).length, kPage);
  Put(r);
}

TEST_F(BridgingTest, AnyInvalidationInsideABridgedRegionDropsIt) {
  TouchAll();
  Put(Get(2));
  Put(Get(40));
  ASSERT_EQ(state_->live.size(), 1u) << "bridged";
  // Bytes no request named: the bridged region counts as used everywhere.
  ASSERT_TRUE(cache().Invalidate(area_ + 20 * kPage + 100, 1).ok());
  EXPECT_EQ(state_->live.size(), 0u);
}

TEST_F(BridgingTest, UnmappingAGapPageOfABridgedRegionLeavesNothingStale) {
  // The oracle (docs/ARCHITECTURE.md) on the real pinning registrar: memory
  // between the two requests is unmapped and mapped again; the monitor must
  // drop the bridged region, so a device write reaches the new page.
  if (!UringAvailable()) GTEST_SKIP() << "io_uring unavailable";
  cache(/*uring=*/true);
  TouchAll();
  Put(Get(2));
  Put(Get(40));
  ASSERT_EQ(state_->live.size(), 1u) << "bridged";
  char* gap = area_ + 20 * kPage;
  ASSERT_EQ(munmap(gap, kPage), 0);
  ASSERT_EQ(
      mmap(gap, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
      gap);
  auto r = cache().Acquire(gap + 8, 100, kLocal);
  ASSERT_TRUE(r.ok()) << r.status();
  const char msg[] = "written by the device";
  RegionInfo info = GetRegionInfo(*r);
  ASSERT_TRUE(
      cache().DeviceWrite(*r, gap + 8 - static_cast<char*>(info.addr), msg, sizeof msg).ok());
  EXPECT_STREQ(gap + 8, msg) << "the device wrote through a stale registration (" << monitor_
                             << ")";
  Put(*r);
}

// A bridge probe that finds the gap to a neighbour untouched must not switch
// merging off there: only invalidations cool merging (README, "Merge").
TEST_F(BridgingTest, AFailedBridgeProbeLeavesMergingOn) {
  constexpr size_t kBig = 1024;
  char* big = static_cast<char*>(
      mmap(nullptr, kBig * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(big, MAP_FAILED);
  std::memset(big, 1, 256 * kPage);                // pages [0, 256) resident
  std::memset(big + 320 * kPage, 1, 512 * kPage);  // pages [320, 832) resident
  auto get = [&](size_t first, size_t last) {
    // Local rights: remote ones never bridge, and the probe is the point.
    auto r = cache().Acquire(big + first * kPage, (last - first) * kPage, kLocal);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : nullptr;
  };
  Put(get(0, 256));
  Put(get(320, 832));  // probes the bridge to [0, 256): the gap is not resident
  Region* u = get(64, 768);
  ASSERT_NE(u, nullptr);
  RegionInfo info = GetRegionInfo(u);
  EXPECT_EQ(info.addr, big);
  EXPECT_EQ(info.length, 832 * kPage);
  EXPECT_EQ(cache().stats().merges, 1u);
  Put(u);
  cache_.reset();
  munmap(big, kBig * kPage);
}

TEST_F(BridgingTest, RemoteRightsNeverBridge) {
  TouchAll();
  Put(Get(2, 100, kRW));
  Region* r = Get(40, 100, kRW);
  RegionInfo info = GetRegionInfo(r);
  EXPECT_EQ(info.addr, area_ + 40 * kPage);
  EXPECT_EQ(info.length, kPage) << "the rkey would reach pages 3-39, which no remote request named";
  Put(r);
  EXPECT_EQ(state_->live.size(), 2u);
}

TEST_F(BridgingTest, RemoteRequestsThatOverlapStillMergeIntoTheirUnion) {
  TouchAll();
  Put(Get(2, 2 * kPage, kRW));
  Region* r = Get(3, 2 * kPage, kRW);
  RegionInfo info = GetRegionInfo(r);
  EXPECT_EQ(info.addr, area_ + 2 * kPage);
  EXPECT_EQ(info.length, 4 * kPage) << "pages 2-5: both requests, nothing else";
  Put(r);
  EXPECT_EQ(state_->live.size(), 1u);
}

TEST_F(BridgingTest, LocalOnlyRequestsStillBridgeBesideARemoteRegion) {
  TouchAll();
  Region* remote = Get(2, 100, kRW);
  Put(Get(10));
  Region* r = Get(40);
  EXPECT_GT(GetRegionInfo(r).length, 30 * kPage) << "local-only requests bridge";
  EXPECT_EQ(GetRegionInfo(remote).length, kPage) << "the remote region was not widened";
  Put(r);
  Put(remote);
  EXPECT_EQ(state_->live.size(), 2u);
}

}  // namespace
}  // namespace mrcache
