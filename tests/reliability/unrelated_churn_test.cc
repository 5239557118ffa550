// unrelated_churn_test.cc: a get never fails because *other* memory changed.
//
// Setting: a busy allocator next door -- one thread maps and unmaps 4 KiB of
// unrelated memory as fast as it can, in the free pages just below and just
// above the test's buffer (one unmapped page apart, so never part of the
// buffer's mapping) -- while the test thread creates a cache with the
// default configuration (merging and bridging on) and gets pages of the
// buffer: the first a miss in an empty cache, the next a miss that plans a
// bridge over the buffer towards the first region. The neighbour's releases
// land on both sides of what that miss registers, inside its bridging block.
// The sim registrar takes 50 us per registration, so releases keep arriving
// while it runs.
//
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <infiniband/verbs.h>

#include "mrcache/mrcache.h"

namespace {

constexpr int kRW = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr int kRuns = 100;
constexpr size_t kBufferPages = 64;
constexpr size_t kGetsPerRun = 8;

// The buffer's layout: kSide free pages, one unmapped separator page, the
// buffer, one separator, kSide free pages.
constexpr size_t kSide = 16;
constexpr size_t kAreaPages = 2 * kSide + 2 + kBufferPages;

class UnrelatedChurnTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // A hang (a get that never returns) fails the test rather than the run.
    alarm(120);
    churner_ = std::thread([this] {
      for (uint64_t n = 0; !stop_.load(std::memory_order_acquire); ++n) {
        char* area = area_.load(std::memory_order_acquire);
        char* want = nullptr;
        if (area != nullptr) {
          // Alternately below and above the buffer, at varying pages.
          size_t page = (n / 2) % kSide + (n % 2 == 0 ? 0 : kSide + 2 + kBufferPages);
          want = area + page * kPage;
        }
        void* p = mmap(want, kPage, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | (want ? MAP_FIXED_NOREPLACE : 0), -1, 0);
        if (p != MAP_FAILED && (want == nullptr || p == want)) {
          static_cast<char*>(p)[0] = 1;
          munmap(p, kPage);
          churned_.fetch_add(1, std::memory_order_relaxed);
        } else if (p != MAP_FAILED) {
          munmap(p, kPage);  // an old kernel placed it elsewhere
        }
        rounds_.fetch_add(1, std::memory_order_release);
      }
    });
  }

  void TearDown() override {
    stop_ = true;
    churner_.join();
    alarm(0);
  }

  // Maps the area and hands its free pages to the neighbour; returns the buffer.
  char* MapArea() {
    char* area = static_cast<char*>(mmap(nullptr, kAreaPages * kPage, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (area == MAP_FAILED) return nullptr;
    char* buf = area + (kSide + 1) * kPage;
    munmap(area, (kSide + 1) * kPage);
    munmap(buf + kBufferPages * kPage, (kSide + 1) * kPage);
    std::memset(buf, 1, kBufferPages * kPage);  // resident: bridging may widen over it
    area_.store(area, std::memory_order_release);
    return buf;
  }

  // Takes the free pages back from the neighbour, then unmaps the buffer.
  void UnmapArea(char* buf) {
    area_.store(nullptr, std::memory_order_release);
    // A round that read the area before is over two rounds later.
    uint64_t seen = rounds_.load(std::memory_order_acquire);
    while (rounds_.load(std::memory_order_acquire) < seen + 2) std::this_thread::yield();
    munmap(buf, kBufferPages * kPage);
  }

  // A cache with the default configuration but the given monitor, on the sim
  // registrar taking 50 us per registration; nullptr if the monitor cannot
  // be installed here.
  mrc_cache_t* NewCache() {
    mrc_config_t* cfg = nullptr;
    EXPECT_EQ(mrc_config_create(&cfg), 0);
    EXPECT_EQ(mrc_config_set(cfg, "registrar", "sim"), 0);
    EXPECT_EQ(mrc_config_set(cfg, "sim_base_ns", "50000"), 0);
    EXPECT_EQ(mrc_config_set(cfg, "monitor", GetParam().c_str()), 0);
    mrc_cache_t* cache = nullptr;
    int rc = mrc_cache_create(cfg, nullptr, &cache);
    mrc_config_destroy(cfg);
    if (rc == ENOTSUP) return nullptr;
    EXPECT_EQ(rc, 0) << mrc_strerror(rc);
    return cache;
  }

  std::atomic<bool> stop_{false};
  std::atomic<char*> area_{nullptr};
  std::atomic<uint64_t> churned_{0}, rounds_{0};
  std::thread churner_;
};

TEST_P(UnrelatedChurnTest, MissesNeverFailWhileUnrelatedMemoryIsReleased) {
  int eagain = 0, other_failures = 0;
  uint64_t churned_before = churned_.load();
  for (int run = 0; run < kRuns; ++run) {
    mrc_cache_t* cache = NewCache();
    if (cache == nullptr) GTEST_SKIP() << "monitor " << GetParam() << " cannot be installed here";
    char* buf = MapArea();
    ASSERT_NE(buf, nullptr);
    for (size_t i = 0; i < kGetsPerRun; ++i) {
      // Pages 0, 8, 16, ...: the first is a miss in an empty cache, the
      // next a miss beside it (bridged over the buffer, which the rest hit).
      mrc_region_t* r = nullptr;
      int rc = mrc_get(cache, buf + i * (kBufferPages / kGetsPerRun) * kPage, kPage, kRW, &r);
      if (rc == EAGAIN) {
        ++eagain;
      } else if (rc != 0) {
        ++other_failures;
        ADD_FAILURE() << "mrc_get: " << mrc_strerror(rc);
      } else {
        EXPECT_EQ(mrc_put(cache, r), 0);
      }
    }
    mrc_stats_t s;
    ASSERT_EQ(mrc_flush(cache), 0);
    ASSERT_EQ(mrc_stats(cache, &s), 0);
    EXPECT_EQ(s.registrations, s.deregistrations);
    mrc_cache_destroy(cache);
    UnmapArea(buf);
  }
  EXPECT_EQ(eagain, 0) << "gets failed with EAGAIN while only unrelated memory was released";
  EXPECT_EQ(other_failures, 0);
  // The scenario happened: the neighbour kept releasing throughout.
  EXPECT_GT(churned_.load() - churned_before, static_cast<uint64_t>(kRuns));
  std::printf("RELIABILITY unrelated_churn monitor=%s runs=%d gets=%zu eagain=%d releases=%llu\n",
              GetParam().c_str(), kRuns, kRuns * kGetsPerRun, eagain,
              static_cast<unsigned long long>(churned_.load() - churned_before));
}

INSTANTIATE_TEST_SUITE_P(Monitors, UnrelatedChurnTest, ::testing::Values("patch", "auto"),
                         [](const auto& info) { return info.param; });

}  // namespace
