// admission_race_test.cc: a full cache's admission rule (README, "Admission
// when the cache is full") while other threads unmap and map memory again.
// Two threads get tens of thousands of one-page regions, half of their gets
// from a hot set (128 regions each) and half a scan that asks for each of
// 10,000 others (each thread its own) once, through a cache of 512 regions (so most scanned pages
// are registered for themselves and deregistered at put); after each scanned page's put the thread
// gives the page back (madvise MADV_DONTNEED, reported like an unmap). A third thread meanwhile
// unmaps and maps again whole chunks of 64 regions, hot ones included.
//
// Setting: the uring registrar (real kernel pinning) and the default monitor,
// through the C API. The oracle is release_race_test.cc's (write_oracle.h):
// mrc_region_device_write writes through the pinned pages, so a stale
// registration makes the CPU miss the bytes. A chunk's lock (shared for a
// get-write-check-put, exclusive for a remap) keeps a remap from falling
// between one get's steps, where even a correct cache would write to the old
// pages. Under ASan and TSan (tagged "sanitize") this also checks the
// admission filter's and the eviction lists' memory and locking.
//
// Iterations: MRCACHE_RACE_ITERATIONS gets per thread (default 20,000).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <infiniband/verbs.h>

#include "mrcache/mrcache.h"
#include "tests/reliability/write_oracle.h"

namespace {

using mrcache::testing::RaceIterations;
using mrcache::testing::Tally;
using mrcache::testing::WriteThroughCache;

constexpr int kRW = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));
constexpr size_t kHot = 768;
constexpr size_t kRegions = kHot + 20000;
constexpr size_t kMaxRegions = 512;  // fewer than the hot regions: the cache stays full
constexpr size_t kPerChunk = 64;
constexpr size_t kChunks = (kRegions + kPerChunk - 1) / kPerChunk;
constexpr int kGetters = 2;
constexpr uint64_t kGetsPerRemap = 32;

class AdmissionRaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mrc_config_t* cfg = nullptr;
    ASSERT_EQ(mrc_config_create(&cfg), 0);
    const std::string max_regions = std::to_string(kMaxRegions);
    const char* settings[][2] = {{"registrar", "uring"},
                                 {"max_regions", max_regions.c_str()},
                                 {"max_merge_bytes", "0"},
                                 {"bridge_bytes", "0"}};
    int rc = 0;
    for (const auto& kv : settings) {
      if (rc == 0) rc = mrc_config_set(cfg, kv[0], kv[1]);
    }
    if (rc == 0) rc = mrc_cache_create(cfg, nullptr, &cache_);
    mrc_config_destroy(cfg);
    if (rc == ENOTSUP) GTEST_SKIP() << "io_uring is not available here";
    ASSERT_EQ(rc, 0) << mrc_strerror(rc);
    // Regions two pages apart: none adjoins another, so none merges or bridges.
    area_ = static_cast<char*>(mmap(nullptr, AreaBytes(), PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    ASSERT_NE(area_, MAP_FAILED) << std::strerror(errno);
  }

  void TearDown() override {
    if (cache_ != nullptr) {
      EXPECT_EQ(mrc_flush(cache_), 0);
      mrc_stats_t s;
      mrc_stats(cache_, &s);
      EXPECT_EQ(s.regions, 0u) << "nothing is held at the end";
      EXPECT_EQ(s.registrations, s.deregistrations);
      mrc_cache_destroy(cache_);
    }
    if (area_ != nullptr && area_ != MAP_FAILED) munmap(area_, AreaBytes());
  }

  static size_t AreaBytes() { return 2 * kRegions * kPage; }
  char* Spot(size_t i) const { return area_ + 2 * i * kPage; }

  mrc_cache_t* cache_ = nullptr;
  char* area_ = nullptr;
};

TEST_F(AdmissionRaceTest, ScansBesideUnmapsNeverLeaveAStaleRegistration) {
  const int iterations = RaceIterations(20000);
  std::unique_ptr<std::shared_mutex[]> chunk_mu(new std::shared_mutex[kChunks]);
  Tally tally;
  std::atomic<int> madvise_failures{0}, remap_failures{0}, getters_left{kGetters};
  std::atomic<uint64_t> remaps{0}, gets_done{0};

  auto getter = [&](int id) {
    std::mt19937_64 rng(static_cast<uint64_t>(id) * 7919 + 1);
    // Each getter has its own share of the hot regions and scans its own
    // share of the cold ones, in turn: no page is written by two threads.
    const size_t hot_share = kHot / kGetters;
    const size_t cold_share = (kRegions - kHot) / kGetters;
    size_t scanned = 0;
    for (int op = 0; op < iterations; ++op) {
      const bool hot = op % 2 == 0;
      const size_t i = hot ? id * hot_share + rng() % hot_share
                           : kHot + id * cold_share + scanned++ % cold_share;
      std::shared_lock<std::shared_mutex> lock(chunk_mu[i / kPerChunk]);
      WriteThroughCache(cache_, Spot(i), kPage, kRW, static_cast<uint32_t>(id * 1000003 + op),
                        &tally);
      // A scanned page is given back, as an allocator returns memory.
      if (!hot && madvise(Spot(i), kPage, MADV_DONTNEED) != 0) madvise_failures.fetch_add(1);
      gets_done.fetch_add(1);
    }
    getters_left.fetch_sub(1);
  };
  auto remapper = [&] {
    std::mt19937_64 rng(99);
    // Paced by the getters, not by time, so that every build (sanitizers
    // included) sees the same mix: one remap per kGetsPerRemap gets.
    uint64_t next_at = 0;
    while (getters_left.load() > 0) {
      if (gets_done.load() < next_at) {
        usleep(50);
        continue;
      }
      next_at += kGetsPerRemap;
      const size_t chunk = rng() % kChunks;
      {
        std::unique_lock<std::shared_mutex> lock(chunk_mu[chunk]);
        const size_t first = chunk * kPerChunk;
        const size_t regions = std::min(kPerChunk, kRegions - first);  // the last is short
        char* start = Spot(first);
        const size_t bytes = 2 * regions * kPage;
        void* again = MAP_FAILED;
        if (munmap(start, bytes) == 0) {
          again = mmap(start, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        }
        if (again != start) remap_failures.fetch_add(1);
      }
      remaps.fetch_add(1);
    }
  };

  std::vector<std::thread> threads;
  for (int id = 0; id < kGetters; ++id) threads.emplace_back(getter, id);
  threads.emplace_back(remapper);
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(tally.stale.load(), 0u) << "a device write missed the CPU: a stale registration";
  EXPECT_EQ(tally.failures.load(), 0u) << "a get or device write failed";
  EXPECT_EQ(tally.writes.load(), static_cast<uint64_t>(kGetters) * iterations);
  EXPECT_EQ(madvise_failures.load(), 0);
  EXPECT_EQ(remap_failures.load(), 0);
  EXPECT_GT(remaps.load(), 0u);
  mrc_stats_t s;
  mrc_stats(cache_, &s);
  // The admission rule ran: many scanned pages were registered for
  // themselves (9,300-16,400 of 20,000 in nine runs, plain, ASan and TSan:
  // fewer while remaps leave the cache short of full), and eviction ran too.
  const uint64_t scanned = static_cast<uint64_t>(kGetters) * static_cast<uint64_t>(iterations / 2);
  EXPECT_GT(s.bypassed, scanned / 4) << "of " << scanned << " scanned pages";
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(s.invalidations, 0u);
}

}  // namespace
