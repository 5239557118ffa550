// release_race_test.cc: memory released in one thread while other threads
// map, get and device-write. The release rule (mrcache/monitors/memory_events.h): a
// range is reported released before any thread can obtain those addresses
// again, and no registration of its old pages is cached while the release is
// under way.
//
// Setting: the uring registrar (real kernel pinning) through the C API, with
// the monitors that claim the rule (`auto`, `patch`, `symbols`, and
// `auto+uffd`, what a user who wants uffd's events is told to choose). `uffd`
// alone cannot keep it -- the kernel reports munmap and mremap after other
// threads can map the addresses again, madvise(DONTNEED) before its pages go
// (tests/monitors/README.md, "Concurrent release and reuse": 263 stale and
// 116 corrupted on the mremap race, 23 stale on realloc) -- so a cache
// refuses it with EINVAL, which these races assert too. The oracle is
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

  // Every test ends with nothing held: after a flush no region is left, and
  // every registration was deregistered.
  void TearDown() override {
    if (cache_ == nullptr) return;
    EXPECT_EQ(mrc_flush(cache_), 0);
    mrc_stats_t after;
    EXPECT_EQ(mrc_stats(cache_, &after), 0);
    EXPECT_EQ(after.regions, 0u) << "a region was still held at the end of the test";
    EXPECT_EQ(after.registrations, after.deregistrations);
    mrc_cache_destroy(cache_);
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
// sanitizer's allocator may; the rounds then go on with a fresh buffer.
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
    const bool uffd = GetParam().find("uffd") != std::string::npos;
    const int rounds = RaceIterations(200) * 5 / 2 / (UnderSanitizer() && uffd ? 5 : 1);
    const size_t len = 16 * kPage;
    auto map_buffer = [len] {
      char* p = static_cast<char*>(
          mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      if (p != MAP_FAILED) std::memset(p, 0, len);
      return p;
    };
    // The buffer B replaces; B moves it elsewhere when the range is lost
    // (the lost range is not ours to unmap any more).
    std::atomic<char*> buf{map_buffer()};
    ASSERT_NE(buf.load(), MAP_FAILED);
    Tally tally;
    std::atomic<int> phase{0};  // round n: A sets 2n + 1, B answers 2n + 2 when done
    std::atomic<bool> quit{false};
    std::atomic<int> losses{0};  // rounds in which another mapping took the range
    std::thread b([&] {
      std::mt19937 rng(7);
      for (int n = 0; n < rounds; ++n) {
        while (phase.load(std::memory_order_acquire) != 2 * n + 1) {
          if (quit.load()) return;
          std::this_thread::yield();
        }
        int times = 1 + static_cast<int>(rng() % 20);
        for (int k = 0; k < times; ++k) {
          if (!Replace(way, buf.load(), len)) {
            ++losses;
            char* fresh = map_buffer();
            if (fresh == MAP_FAILED) {
              ++tally.failures;
              ADD_FAILURE() << "mmap of a fresh buffer: " << std::strerror(errno);
            } else {
              buf.store(fresh);
            }
            break;
          }
        }
        phase.store(2 * n + 2, std::memory_order_release);
      }
    });
    int played = 0;
    for (int n = 0; n < rounds && tally.failures.load() == 0; ++n) {
      phase.store(2 * n + 1, std::memory_order_release);
      while (phase.load(std::memory_order_acquire) != 2 * n + 2) {
        mrc_region_t* r = nullptr;
        int rc = mrc_get(cache_, buf.load(), len, kRW, &r);
        if (rc == EFAULT || rc == EAGAIN) continue;  // the caller's own memory was going away
        if (rc != 0) {
          ++tally.failures;
          ADD_FAILURE() << "mrc_get while the pages were replaced: " << mrc_strerror(rc);
          break;
        }
        EXPECT_EQ(mrc_put(cache_, r), 0);
      }
      while (phase.load(std::memory_order_acquire) != 2 * n + 2) std::this_thread::yield();
      WriteThroughCache(buf.load(), len, static_cast<uint32_t>(n), &tally);
      ++played;
    }
    quit = true;
    b.join();
    EXPECT_EQ(munmap(buf.load(), len), 0);
    EXPECT_EQ(played, rounds) << "every round was played to its device write";
    EXPECT_EQ(tally.writes.load(), static_cast<uint64_t>(rounds));
    EXPECT_EQ(tally.stale.load(), 0u);
    EXPECT_EQ(tally.failures.load(), 0u);
    std::printf("RELIABILITY release_race way=%s monitor=%s rounds=%d stale=%llu lost_range=%d\n",
                Name(way), GetParam().c_str(), played,
                static_cast<unsigned long long>(tally.stale.load()), losses.load());
    ExpectNoLeak();
  }
};

TEST_P(ReplacementRaceTest, ReplacingPagesWithMmapFixedDuringGetsNeverPoisonsLaterGets) {
  RunRounds(Replacement::kMmapFixed);
}

// With auto+uffd the miss that meets the buffer unmapped (UFFDIO_REGISTER:
// EINVAL) must be retried, not cached unwatched (tests/monitors/README.md,
// "Concurrent release and reuse").
TEST_P(ReplacementRaceTest, UnmappingAndRemappingDuringGetsNeverPoisonsLaterGets) {
  RunRounds(Replacement::kMunmapMmap);
}

TEST_P(ReplacementRaceTest, MadviseDontneedDuringGetsNeverPoisonsLaterGets) {
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

// The test name of a monitor list: '+' becomes "_and_".
std::string MonitorName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (size_t plus; (plus = name.find('+')) != std::string::npos;) name.replace(plus, 1, "_and_");
  return name;
}

// Under a sanitizer `auto` already adds uffd (monitor.h): auto+uffd would be
// the same monitor run twice.
std::vector<std::string> Monitors() {
  std::vector<std::string> monitors = {"auto", "patch", "symbols"};
  if (!UnderSanitizer()) monitors.push_back("auto+uffd");
  return monitors;
}

INSTANTIATE_TEST_SUITE_P(Monitors, ReleaseRaceTest, ::testing::ValuesIn(Monitors()), MonitorName);
INSTANTIATE_TEST_SUITE_P(Monitors, ReplacementRaceTest, ::testing::ValuesIn(Monitors()),
                         MonitorName);

// What a cache says to `uffd` without a monitor that reports releases before
// they happen: EINVAL, logged with the reason and what to use instead. These
// are the configurations the races above would make stale.
void CaptureLog(void* arg, int, const char* message) {
  static_cast<std::string*>(arg)->append(message).append("\n");
}

TEST(UffdAloneTest, IsRefusedWithEinvalNamingTheRaceAndTheAlternative) {
  std::string log;
  mrc_set_log_callback(CaptureLog, &log);
  for (const char* monitor : {"uffd", "none+uffd", "uffd+jemalloc"}) {
    mrc_config_t* cfg = nullptr;
    ASSERT_EQ(mrc_config_create(&cfg), 0);
    ASSERT_EQ(mrc_config_set(cfg, "registrar", "sim"), 0);
    ASSERT_EQ(mrc_config_set(cfg, "monitor", monitor), 0);
    mrc_cache_t* cache = nullptr;
    log.clear();
    EXPECT_EQ(mrc_cache_create(cfg, nullptr, &cache), EINVAL) << monitor;
    EXPECT_EQ(cache, nullptr);
    mrc_config_destroy(cfg);
    EXPECT_NE(log.find("uffd alone cannot keep registrations fresh"), std::string::npos) << log;
    EXPECT_NE(log.find("use 'auto+uffd'"), std::string::npos) << log;
  }
  mrc_set_log_callback(nullptr, nullptr);
}

TEST(UffdAloneTest, WithAMonitorThatReportsFirstIsAccepted) {
  for (const char* monitor : {"auto+uffd", "symbols+uffd"}) {
    mrc_config_t* cfg = nullptr;
    ASSERT_EQ(mrc_config_create(&cfg), 0);
    ASSERT_EQ(mrc_config_set(cfg, "registrar", "sim"), 0);
    ASSERT_EQ(mrc_config_set(cfg, "monitor", monitor), 0);
    mrc_cache_t* cache = nullptr;
    const int rc = mrc_cache_create(cfg, nullptr, &cache);
    mrc_config_destroy(cfg);
    if (rc == ENOTSUP) continue;  // userfaultfd is not available here
    ASSERT_EQ(rc, 0) << monitor << ": " << mrc_strerror(rc);
    mrc_cache_destroy(cache);
  }
}

}  // namespace
