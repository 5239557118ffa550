// release_generations_test.cc: a memory release voids the lookup entries of
// the regions it overlaps, and only those (mrcache/core/cache_impl.h,
// "Generations"). An unrelated munmap leaves other threads' and this
// thread's hits lock-free; a release anywhere in a cached region -- even far
// from the addresses a get asked for, across a 2 MiB boundary -- makes the
// next get of that region miss. Runs on CacheImpl with the sim registrar and
// a monitor that reports every release; every test ends with registrations
// == deregistrations.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "mrcache/core/cache_impl.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/registrars/sim_registrar.h"

namespace mrcache {
namespace {

constexpr int kRW = kAccessLocalWrite | kAccessRemoteWrite;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr size_t kTwoMiB = size_t{2} << 20;
constexpr size_t kAreaBytes = 8 * kTwoMiB;

class ReleaseGenerationsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Config config;
    config.monitor = "patch";
    auto patch = AcquireMonitor(config.monitor);
    if (!patch.ok() && StatusToErrno(patch.status()) == ENOTSUP) {
      GTEST_SKIP() << "the patch monitor cannot exist in this build: " << patch.status();
    }
    ASSERT_TRUE(patch.ok()) << patch.status();
    config.sim_base_ns = config.sim_page_ns = 0;
    auto cache = CacheImpl::Create(config, MakeSimRegistrar(config));
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = std::move(*cache);
    area_ = static_cast<char*>(
        mmap(nullptr, kAreaBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(area_, MAP_FAILED);
    std::memset(area_, 1, kAreaBytes);
    // A 2 MiB boundary with 2 MiB of the area on either side.
    boundary_ = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(area_) + 2 * kTwoMiB) &
                                        ~uintptr_t{kTwoMiB - 1});
  }

  void TearDown() override {
    if (!cache_) return;
    EXPECT_TRUE(cache_->Flush().ok());
    CacheStats s = cache_->stats();
    EXPECT_EQ(s.registrations, s.deregistrations);
    cache_.reset();
    munmap(area_, kAreaBytes);
  }

  // Gets and puts [addr, addr + length); returns the region it was answered with.
  Region* GetPut(char* addr, size_t length) {
    auto r = cache_->Acquire(addr, length, kRW);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return nullptr;
    EXPECT_TRUE(cache_->Put(*r).ok());
    return *r;
  }

  // Replaces the page at p: a reported release of [p, p + page), after
  // which the same addresses hold a fresh page.
  void ReleasePage(char* p) {
    ASSERT_EQ(munmap(p, kPage), 0);
    ASSERT_EQ(mmap(p, kPage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0),
              p);
    p[0] = 1;
  }

  std::unique_ptr<CacheImpl> cache_;
  char* area_ = nullptr;
  char* boundary_ = nullptr;
};

TEST_F(ReleaseGenerationsTest, ReleasesOfOtherMemoryLeaveHitsLockFree) {
  char* mine = boundary_;
  Region* region = GetPut(mine, kPage);  // miss
  ASSERT_EQ(GetPut(mine, kPage), region);
  const uint64_t locked_before = cache_->locked_hits();
  const uint64_t misses_before = cache_->stats().misses;
  constexpr int kRounds = 50;  // 100 reports (before and after each call)
  for (int i = 0; i < kRounds; ++i) {
    ReleasePage(mine + 2 * kTwoMiB + (i % 16) * kPage);  // another 2 MiB bucket
    EXPECT_EQ(GetPut(mine, kPage), region);
  }
  // The ring asks every thread to drain once per quarter of its capacity
  // (256 reports), so 100 reports may cost one locked get, not more.
  EXPECT_LE(cache_->locked_hits() - locked_before, 1u);
  EXPECT_EQ(cache_->stats().misses, misses_before);
}

TEST_F(ReleaseGenerationsTest, AReleaseInARegionsOtherBucketVoidsItsLookupEntries) {
  // One region across the 2 MiB boundary; gets of its first page hit it.
  char* first = boundary_ - 8 * kPage;
  Region* region = GetPut(first, 16 * kPage);
  ASSERT_EQ(GetPut(first, kPage), region);
  const uint64_t misses_before = cache_->stats().misses;
  // A release of a page the region registered, past the boundary: far from
  // the page the lookup entry was filled for.
  ReleasePage(boundary_ + 4 * kPage);
  GetPut(first, kPage);
  EXPECT_EQ(cache_->stats().misses, misses_before + 1)
      << "a get after a release inside its region was answered with the old region";
  EXPECT_GE(cache_->stats().invalidations, 1u);
}

TEST_F(ReleaseGenerationsTest, AReleaseInARegionsOwnBucketVoidsItsLookupEntries) {
  char* first = boundary_ + kPage;
  Region* region = GetPut(first, 16 * kPage);
  ASSERT_EQ(GetPut(first, kPage), region);
  const uint64_t misses_before = cache_->stats().misses;
  ReleasePage(first + 15 * kPage);
  GetPut(first, kPage);
  EXPECT_EQ(cache_->stats().misses, misses_before + 1);
}

}  // namespace
}  // namespace mrcache
