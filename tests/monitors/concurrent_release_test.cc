// concurrent_release_test.cc: every way memory disappears, in several threads
// at once, through a real cache (uring registrar).
//
// Each thread repeatedly takes a row of the invalidation matrix
// (release_ways.h), gets and device-writes its memory, releases it that way,
// and, where it can map fresh memory at the same address itself, gets and
// device-writes it again, checking with the CPU that the bytes arrived.
// Meanwhile the other threads map memory too, which the kernel may place in
// the range just released. A stale registration shows as bytes the CPU does
// not see. This checks the release rule of docs/ARCHITECTURE.md for every
// row each monitor reports before the release, except rows whose memory is
// process-global (the program break and glibc's heap, which the other
// threads' allocations share). Rows only uffd reports (`raw_munmap`; under
// ThreadSanitizer, where `auto` is symbols+uffd, also `syscall_munmap`) are
// reported after the fact, when another thread may already have mapped the
// addresses: docs/ARCHITECTURE.md, "Monitors that report after the fact".
//
// Iterations per thread: MRCACHE_RACE_ITERATIONS (default 150).
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include "mrcache/mrcache.h"
#include "tests/monitors/monitor_expectations.h"
#include "tests/monitors/release_ways.h"

namespace mrcache {
namespace testing {
namespace {

constexpr int kThreads = 4;

int Iterations() {
  const char* env = std::getenv("MRCACHE_RACE_ITERATIONS");
  int n = env != nullptr ? std::atoi(env) : 0;
  return n > 0 ? n : 150;
}

// Rows whose memory stays mapped after the release (the same thread still
// owns the address), as opposed to rows that unmap it.
bool StaysMapped(const std::string& way) {
  for (const char* name :
       {"madvise_dontneed", "madvise_free", "madvise_remove", "mmap_fixed", "shmat_remap",
        "memfd_ftruncate", "shm_open_ftruncate", "shm_open_truncate", "memfd_punch_hole",
        "mremap_onto_target", "madvise_dontneed_thp"}) {
    if (way == name) return true;
  }
  return false;
}

// dlclose: one library, so one buffer, for every thread of the process.
bool Concurrent(const std::string& way) {
  return way != "brk_shrink" && way != "glibc_free" && way != "jemalloc_purge" && way != "dlclose";
}

class ConcurrentReleaseTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    mrc_config_t* cfg = nullptr;
    ASSERT_EQ(mrc_config_create(&cfg), 0);
    ASSERT_EQ(mrc_config_set(cfg, "registrar", "uring"), 0);
    ASSERT_EQ(mrc_config_set(cfg, "monitor", GetParam().c_str()), 0);
    // One region per victim, as in the invalidation matrix: a region widened
    // over a neighbouring thread's mapping would be watched by uffd there,
    // which splits that mapping and makes its own mremap_move fail (EFAULT).
    ASSERT_EQ(mrc_config_set(cfg, "max_merge_bytes", "0"), 0);
    ASSERT_EQ(mrc_config_set(cfg, "bridge_bytes", "0"), 0);
    int rc = mrc_cache_create(cfg, nullptr, &cache_);
    mrc_config_destroy(cfg);
    if (rc == ENOTSUP) GTEST_SKIP() << GetParam() << " or io_uring is not available here";
    ASSERT_EQ(rc, 0) << mrc_strerror(rc);
  }
  void TearDown() override {
    if (cache_ == nullptr) return;
    mrc_stats_t stats;
    mrc_stats(cache_, &stats);
    mrc_cache_destroy(cache_);
    EXPECT_EQ(stats.regions + stats.deregistrations, stats.registrations);
  }

  // Gets [p, p + len), device-writes a page of `pattern` at each end, and
  // checks them with the CPU. False if the CPU missed them.
  bool WriteAndCheck(char* p, size_t len, uint8_t pattern) {
    mrc_region_t* r = nullptr;
    int rc = mrc_get(cache_, p, len, IBV_ACCESS_LOCAL_WRITE, &r);
    if (rc != 0) {
      ADD_FAILURE() << "mrc_get: " << mrc_strerror(rc);
      return true;
    }
    mrc_region_info_t info;
    mrc_region_info(r, &info);
    const size_t offset = static_cast<size_t>(p - static_cast<char*>(info.addr));
    std::vector<uint8_t> data(4096, pattern);
    const size_t tail = len - data.size();
    EXPECT_EQ(mrc_region_device_write(cache_, r, offset, data.data(), data.size()), 0);
    EXPECT_EQ(mrc_region_device_write(cache_, r, offset + tail, data.data(), data.size()), 0);
    bool seen = std::memcmp(p, data.data(), data.size()) == 0 &&
                std::memcmp(p + tail, data.data(), data.size()) == 0;
    EXPECT_EQ(mrc_put(cache_, r), 0);
    return seen;
  }

  mrc_cache_t* cache_ = nullptr;
};

TEST_P(ConcurrentReleaseTest, EveryClaimedWayInSeveralThreadsLeavesNoStaleRegistration) {
  std::vector<ReleaseWay> ways;
  for (const ReleaseWay& w : AllReleaseWays()) {
    if (Concurrent(w.name) && ExpectReportedBeforeRelease(GetParam(), w.name)) {
      ways.push_back(w);
    }
  }
  ASSERT_FALSE(ways.empty());
  const int iterations = Iterations();
  std::atomic<uint64_t> checked{0}, stale{0};
  auto worker = [&](int id) {
    for (int i = 0; i < iterations; ++i) {
      const ReleaseWay& way = ways[static_cast<size_t>(id + i) % ways.size()];
      Victim v = way.prepare();
      const uint8_t pattern = static_cast<uint8_t>(1 + (id * 31 + i) % 250);
      if (!WriteAndCheck(v.gone, v.gone_len, pattern)) {
        ++stale;
        ADD_FAILURE() << "fresh memory (mapped for " << way.name
                      << ") answered by a registration of what another thread released";
      }
      way.release(v);
      // Ours again only if the row keeps the mapping or we mapped it back
      // ourselves; otherwise another thread took the address.
      bool ours = RefillSameAddress(v) && (StaysMapped(way.name) || v.refill != nullptr);
      if (ours) {
        std::memset(v.gone, 0, v.gone_len);
        if (!WriteAndCheck(v.gone, v.gone_len, static_cast<uint8_t>(pattern + 1))) {
          ++stale;
          ADD_FAILURE() << way.name << ": stale registration after the release";
        }
        ++checked;
      }
      CleanupVictim(way, v);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  EXPECT_EQ(stale.load(), 0u);
  EXPECT_GT(checked.load(), 0u);
  std::printf(
      "RELIABILITY concurrent_release monitor=%s ways=%zu threads=%d iterations=%d "
      "checked_after_release=%llu stale=%llu\n",
      GetParam().c_str(), ways.size(), kThreads, iterations,
      static_cast<unsigned long long>(checked.load()),
      static_cast<unsigned long long>(stale.load()));
}

INSTANTIATE_TEST_SUITE_P(Monitors, ConcurrentReleaseTest,
                         ::testing::Values("auto", "patch", "symbols"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace testing
}  // namespace mrcache
