// release_race_test.cc: memory released in one thread while other threads
// map, get and device-write. The release rule (mrcache/monitors/memory_events.h): a
// range is reported released before any thread can obtain those addresses
// again, and no registration of its old pages is cached while the release is
// under way.
//
// Setting: the uring registrar (real kernel pinning) through the C API, with
// the monitors that claim the rule (`auto`, `patch`, `symbols`); the
// replacement rounds also with `uffd` alone, which must not keep a region of
// pages that were unmapped and mapped again (its madvise round is skipped:
// see there). The oracle is
// mrc_region_device_write: it writes through the pinned pages, so a stale
// registration makes the CPU miss the bytes (counted as stale), and lands them
// in whatever the old pages now are (another thread's data: counted as
// corrupted where the test can see it).
//
// Iterations: MRCACHE_RACE_ITERATIONS (default 200 per thread, and 500
// replacement rounds) keeps scripts/test bounded; the figures in
// docs/RELIABILITY.md come from longer runs (2,000 and 5,000).
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <infiniband/verbs.h>

#include "mrcache/mrcache.h"
#include "tests/reliability/process_probes.h"
#include "tests/reliability/write_oracle.h"

namespace {

using mrcache::testing::RaceIterations;
using mrcache::testing::ResidentKib;
using mrcache::testing::Tally;
using mrcache::testing::UnderSanitizer;

constexpr int kRW = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

class ReleaseRaceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    mrc_config_t* cfg = nullptr;
    ASSERT_EQ(mrc_config_create(&cfg), 0);
    ASSERT_EQ(mrc_config_set(cfg, "registrar", "uring"), 0);
    ASSERT_EQ(mrc_config_set(cfg, "monitor", GetParam().c_str()), 0);
    int rc = mrc_cache_create(cfg, nullptr, &cache_);
    mrc_config_destroy(cfg);
    if (rc == ENOTSUP) GTEST_SKIP() << GetParam() << " or io_uring is not available here";
    ASSERT_EQ(rc, 0) << mrc_strerror(rc);
  }

  void TearDown() override {
    if (cache_ == nullptr) return;
    mrc_stats_t before;
    mrc_stats(cache_, &before);
    mrc_cache_destroy(cache_);
    // Every test ends with nothing held, so destroy deregistered the rest.
    (void)before;
  }

  // The oracle (write_oracle.h) on this test's cache, with remote write rights.
  bool WriteThroughCache(char* addr, size_t len, uint32_t seed, Tally* tally) {
    return mrcache::testing::WriteThroughCache(cache_, addr, len, kRW, seed, tally);
  }

  void ExpectNoLeak() {
    mrc_stats_t s;
    mrc_stats(cache_, &s);
    EXPECT_EQ(mrc_flush(cache_), 0);
    mrc_stats(cache_, &s);
    EXPECT_EQ(s.registrations - s.deregistrations, s.regions);
  }

  mrc_cache_t* cache_ = nullptr;
};

// Eight threads each move one buffer onto another with mremap(MAYMOVE|FIXED)
// while the others map fresh memory, which the kernel may place where a moved
// buffer was.
TEST_P(ReleaseRaceTest, MremapOntoAnotherBufferNeverLeavesAStaleRegistration) {
  const int iterations = RaceIterations(200);
  constexpr int kThreads = 8;
  const size_t len = 2 * kPage;
  Tally tally;
  auto worker = [&](int id) {
    std::vector<char> moved(len);
    for (int i = 0; i < iterations; ++i) {
      uint32_t seed = static_cast<uint32_t>(id * 1000003 + i * 7);
      char* p = static_cast<char*>(
          mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      char* p2 = static_cast<char*>(
          mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      ASSERT_NE(p, MAP_FAILED);
      ASSERT_NE(p2, MAP_FAILED);
      WriteThroughCache(p, len, seed, &tally);
      WriteThroughCache(p2, len, seed + 1, &tally);
      for (size_t k = 0; k < len; ++k) p[k] = static_cast<char>(seed + k);
      std::memcpy(moved.data(), p, len);
      void* q = mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, p2);
      ASSERT_EQ(q, p2) << std::strerror(errno);
      // Another thread's stale device write would land here.
      if (std::memcmp(p2, moved.data(), len) != 0) ++tally.corrupted;
      WriteThroughCache(p2, len, seed + 2, &tally);
      ASSERT_EQ(munmap(p2, len), 0);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  EXPECT_EQ(tally.stale.load(), 0u);
  EXPECT_EQ(tally.corrupted.load(), 0u);
  EXPECT_EQ(tally.failures.load(), 0u);
  EXPECT_EQ(tally.writes.load(), uint64_t{3} * kThreads * iterations);
  std::printf(
      "RELIABILITY release_race way=mremap monitor=%s threads=%d iterations=%d stale=%llu "
      "corrupted=%llu\n",
      GetParam().c_str(), kThreads, iterations, static_cast<unsigned long long>(tally.stale.load()),
      static_cast<unsigned long long>(tally.corrupted.load()));
  ExpectNoLeak();
}

// glibc's realloc moves an mmap'ed chunk with mremap inside libc.
TEST_P(ReleaseRaceTest, ReallocOfMmappedChunksNeverLeavesAStaleRegistration) {
  if (UnderSanitizer()) GTEST_SKIP() << "the sanitizer's allocator does not mremap chunks";
  if (GetParam() == "symbols") {
    GTEST_SKIP() << "libc's own mremap calls bypass interposed symbols (the glibc_free row of "
                    "the invalidation matrix): only patch covers realloc";
  }
  const int iterations = RaceIterations(200) / 2;
  constexpr int kThreads = 8;
  constexpr size_t kSmall = 1 << 20, kLarge = 4 << 20;
  // A fixed threshold: every chunk this size is mmap'ed, and realloc moves it.
  ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
  Tally tally;
  auto worker = [&](int id) {
    for (int i = 0; i < iterations; ++i) {
      uint32_t seed = static_cast<uint32_t>(id * 7919 + i * 13);
      char* a = static_cast<char*>(std::malloc(kSmall));
      ASSERT_NE(a, nullptr);
      WriteThroughCache(a, kPage, seed, &tally);
      std::memset(a + kPage, static_cast<int>(seed & 0x7f), kPage);
      char* b = static_cast<char*>(std::realloc(a, kLarge));
      ASSERT_NE(b, nullptr);
      for (size_t k = 0; k < kPage; ++k) {
        if (b[kPage + k] != static_cast<char>(seed & 0x7f)) {
          ++tally.corrupted;
          break;
        }
      }
      WriteThroughCache(b, kPage, seed + 1, &tally);
      WriteThroughCache(b + kLarge - kPage, kPage, seed + 2, &tally);
      std::free(b);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  EXPECT_EQ(tally.stale.load(), 0u);
  EXPECT_EQ(tally.corrupted.load(), 0u);
  EXPECT_EQ(tally.failures.load(), 0u);
  std::printf(
      "RELIABILITY release_race way=realloc monitor=%s threads=%d iterations=%d stale=%llu "
      "corrupted=%llu\n",
      GetParam().c_str(), kThreads, iterations, static_cast<unsigned long long>(tally.stale.load()),
      static_cast<unsigned long long>(tally.corrupted.load()));
  ExpectNoLeak();
}

// One way of replacing the pages under [p, p + len) while the mapping stays.
enum class Replacement { kMmapFixed, kMunmapMmap, kMadviseDontneed };

const char* Name(Replacement way) {
  switch (way) {
    case Replacement::kMmapFixed:
      return "mmap_fixed";
    case Replacement::kMunmapMmap:
      return "munmap_mmap";
    case Replacement::kMadviseDontneed:
      return "madvise_dontneed";
  }
  return "?";
}

// Returns false if the range was lost: between munmap and mmap another
// mapping of the process took part of it (MAP_FIXED_NOREPLACE: EEXIST). The
// test's own threads map nothing there, but the cache's table growth and a
// sanitizer's allocator may; the rounds then end early, inconclusive.
bool Replace(Replacement way, char* p, size_t len) {
  switch (way) {
    case Replacement::kMmapFixed:
      EXPECT_EQ(
          mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), p);
      break;
    case Replacement::kMunmapMmap: {
      EXPECT_EQ(munmap(p, len), 0);
      void* again = mmap(p, len, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (again == MAP_FAILED && errno == EEXIST) return false;
      EXPECT_EQ(again, p);
      break;
    }
    case Replacement::kMadviseDontneed:
      EXPECT_EQ(madvise(p, len, MADV_DONTNEED), 0);
      break;
  }
  p[0] = 1;  // fault the new pages in, as an application would
  return true;
}

class ReplacementRaceTest : public ReleaseRaceTest {
 protected:
  // Thread A (this one) gets and puts a buffer in a loop while thread B
  // replaces its pages 1 to 20 times; once B has stopped and A knows it, A's
  // next get must reach the buffer's current pages.
  void RunRounds(Replacement way) {
    // uffd's rounds wait for its reader thread, slow under a sanitizer.
    const int rounds =
        RaceIterations(200) * 5 / 2 / (UnderSanitizer() && GetParam() == "uffd" ? 5 : 1);
    const size_t len = 16 * kPage;
    char* buf = static_cast<char*>(
        mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(buf, MAP_FAILED);
    std::memset(buf, 0, len);
    Tally tally;
    std::atomic<int> phase{0};  // round n: A sets 2n + 1, B answers 2n + 2 when done
    std::atomic<bool> quit{false};
    std::atomic<bool> lost{false};  // another mapping took the range (Replace)
    std::thread b([&] {
      std::mt19937 rng(7);
      for (int n = 0; n < rounds; ++n) {
        while (phase.load(std::memory_order_acquire) != 2 * n + 1) {
          if (quit.load()) return;
          std::this_thread::yield();
        }
        int times = 1 + static_cast<int>(rng() % 20);
        for (int k = 0; k < times && !lost.load(); ++k) {
          if (!Replace(way, buf, len)) lost = true;
        }
        phase.store(2 * n + 2, std::memory_order_release);
      }
    });
    int played = 0;
    for (int n = 0; n < rounds && tally.failures.load() == 0; ++n) {
      phase.store(2 * n + 1, std::memory_order_release);
      while (phase.load(std::memory_order_acquire) != 2 * n + 2) {
        mrc_region_t* r = nullptr;
        int rc = mrc_get(cache_, buf, len, kRW, &r);
        if (rc == EFAULT || rc == EAGAIN) continue;  // the caller's own memory was going away
        if (rc != 0) {
          ++tally.failures;
          ADD_FAILURE() << "mrc_get while the pages were replaced: " << mrc_strerror(rc);
          break;
        }
        EXPECT_EQ(mrc_put(cache_, r), 0);
      }
      while (phase.load(std::memory_order_acquire) != 2 * n + 2) std::this_thread::yield();
      if (lost.load()) break;  // buf is no longer ours
      WriteThroughCache(buf, len, static_cast<uint32_t>(n), &tally);
      ++played;
    }
    quit = true;
    b.join();
    if (!lost.load()) munmap(buf, len);
    EXPECT_EQ(tally.stale.load(), 0u);
    EXPECT_EQ(tally.failures.load(), 0u);
    std::printf("RELIABILITY release_race way=%s monitor=%s rounds=%d stale=%llu lost_range=%d\n",
                Name(way), GetParam().c_str(), played,
                static_cast<unsigned long long>(tally.stale.load()), lost.load() ? 1 : 0);
    ExpectNoLeak();
  }
};

TEST_P(ReplacementRaceTest, ReplacingPagesWithMmapFixedDuringGetsNeverPoisonsLaterGets) {
  RunRounds(Replacement::kMmapFixed);
}

// With uffd alone this is the case where a miss that meets the buffer
// unmapped (UFFDIO_REGISTER: EINVAL) must be retried, not cached unwatched
// (tests/monitors/README.md, "Concurrent release and reuse").
TEST_P(ReplacementRaceTest, UnmappingAndRemappingDuringGetsNeverPoisonsLaterGets) {
  RunRounds(Replacement::kMunmapMmap);
}

TEST_P(ReplacementRaceTest, MadviseDontneedDuringGetsNeverPoisonsLaterGets) {
  if (GetParam() == "uffd") {
    // The kernel sends UFFD_EVENT_REMOVE before it drops the pages
    // (madvise_dontneed_free): a miss between the report and the drop pins
    // the old pages, and nothing reports them again (tests/monitors/README.md).
    GTEST_SKIP() << "uffd alone reports madvise(DONTNEED) before the pages go";
  }
  RunRounds(Replacement::kMadviseDontneed);
}

// Two threads unmap unrelated memory, 20 calls each per round (80 reports
// per drain with the report after each call): far below the ring's
// capacity, so no round may invalidate the cached regions.
TEST_P(ReleaseRaceTest, UnrelatedMunmapsFromSeveralThreadsNeverFlushTheCache) {
  constexpr size_t kRegions = 64;
  // 3,000 rounds by default (the unfixed ring flushed about once per 100);
  // a tenth under a sanitizer, whose hand-offs between threads are slow.
  const int rounds = RaceIterations(200) * 15 / (UnderSanitizer() ? 10 : 1);
  char* area = static_cast<char*>(mmap(nullptr, 2 * kRegions * kPage, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(area, MAP_FAILED);
  std::memset(area, 0, 2 * kRegions * kPage);
  std::vector<mrc_region_t*> held(kRegions);
  for (size_t i = 0; i < kRegions; ++i) {
    ASSERT_EQ(mrc_get(cache_, area + 2 * i * kPage, kPage, kRW, &held[i]), 0);
  }
  mrc_stats_t before;
  mrc_stats(cache_, &before);
  std::atomic<int> started{0}, finished{0};
  auto unmapper = [&] {
    for (int n = 0; n < rounds; ++n) {
      while (started.load(std::memory_order_acquire) <= n) std::this_thread::yield();
      for (int k = 0; k < 20; ++k) {
        void* p = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_NE(p, MAP_FAILED);
        ASSERT_EQ(munmap(p, kPage), 0);
      }
      finished.fetch_add(1, std::memory_order_acq_rel);
    }
  };
  std::thread u0(unmapper), u1(unmapper);
  for (int n = 0; n < rounds; ++n) {
    started.store(n + 1, std::memory_order_release);
    while (finished.load(std::memory_order_acquire) < 2 * (n + 1)) std::this_thread::yield();
    mrc_region_t* r = nullptr;
    ASSERT_EQ(mrc_get(cache_, area + 2 * (n % kRegions) * kPage, kPage, kRW, &r), 0);  // drains
    ASSERT_EQ(mrc_put(cache_, r), 0);
  }
  u0.join();
  u1.join();
  mrc_stats_t after;
  mrc_stats(cache_, &after);
  EXPECT_EQ(after.invalidations, before.invalidations);
  EXPECT_EQ(after.registrations, before.registrations);
  for (mrc_region_t* r : held) {
    EXPECT_EQ(mrc_put(cache_, r), 0);
  }
  munmap(area, 2 * kRegions * kPage);
  ExpectNoLeak();
}

INSTANTIATE_TEST_SUITE_P(Monitors, ReleaseRaceTest, ::testing::Values("auto", "patch", "symbols"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Monitors, ReplacementRaceTest,
                         ::testing::Values("auto", "patch", "symbols", "uffd"),
                         [](const auto& info) { return info.param; });

}  // namespace
