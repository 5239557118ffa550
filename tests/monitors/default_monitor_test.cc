// The default monitor (`auto`) leaves the application's memory calls alone:
// caching many regions does not grow the process's map count, and mremap of
// a mapping with a cached page in it moves and grows the whole mapping. A
// cache whose `auto` cannot install `patch` says so on stderr and in
// mrc_stats_t.monitor_incomplete.
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/monitors/patch_monitor.h"
#include "mrcache/monitors/raw_syscall.h"
#include "mrcache/mrcache.h"
#include "tests/monitors/map_count.h"

namespace mrcache {
namespace testing {
namespace {

constexpr int kLocalWrite = 1;  // IBV_ACCESS_LOCAL_WRITE
constexpr size_t kPage = 4096;

// The default configuration, plus `settings`. Asserts creation succeeds.
mrc_cache_t* CreateCache(const std::vector<std::pair<const char*, const char*>>& settings) {
  mrc_config_t* cfg = nullptr;
  EXPECT_EQ(mrc_config_create(&cfg), 0);
  for (const auto& kv : settings) {
    EXPECT_EQ(mrc_config_set(cfg, kv.first, kv.second), 0) << kv.first;
  }
  mrc_cache_t* cache = nullptr;
  int rc = mrc_cache_create(cfg, nullptr, &cache);
  EXPECT_EQ(rc, 0) << mrc_strerror(rc);
  mrc_config_destroy(cfg);
  return cache;
}

mrc_stats_t Stats(mrc_cache_t* cache) {
  mrc_stats_t s;
  mrc_stats(cache, &s);
  return s;
}

// Destroys the cache; every registration it made was deregistered.
void Destroy(mrc_cache_t* cache) {
  mrc_stats_t s = Stats(cache);
  mrc_cache_destroy(cache);
  EXPECT_EQ(s.regions + s.deregistrations, s.registrations);
}

TEST(DefaultMonitorTest, FortyThousandCachedRegionsAddAtMostAThousandMappings) {
  constexpr int kRegions = 40000;
  // Zero-cost sim registrar; no region limit and no merging, so that every
  // get stays a region of its own.
  mrc_cache_t* cache = CreateCache({{"registrar", "sim"},
                                    {"sim_base_ns", "0"},
                                    {"sim_page_ns", "0"},
                                    {"max_regions", "0"},
                                    {"max_merge_bytes", "0"}});
  ASSERT_NE(cache, nullptr);
  size_t len = 2 * kPage * kRegions;  // every other page
  char* big = static_cast<char*>(
      mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(big, MAP_FAILED);
  const size_t before = mrcache_test::ProcessMapCount();
  for (int i = 0; i < kRegions; ++i) {
    char* buf = big + 2 * kPage * i;
    buf[0] = 1;
    mrc_region_t* r = nullptr;
    ASSERT_EQ(mrc_get(cache, buf, kPage, kLocalWrite, &r), 0) << "get " << i;
    mrc_put(cache, r);
  }
  EXPECT_EQ(Stats(cache).regions, static_cast<uint64_t>(kRegions));
  const size_t after = mrcache_test::ProcessMapCount();
  EXPECT_LE(after, before + 1000) << "map count " << before << " -> " << after;

  // The application's own calls: 1,000 mprotects that split the big mapping
  // and 1,000 new mappings all succeed.
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(mprotect(big + 2 * kPage * i + kPage, kPage, PROT_READ), 0)
        << i << ": " << strerror(errno);
  }
  std::vector<void*> maps;
  for (int i = 0; i < 1000; ++i) {
    void* p = mmap(nullptr, kPage, i % 2 ? PROT_READ : PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED) << i << ": " << strerror(errno);
    maps.push_back(p);
  }
  for (void* p : maps) munmap(p, kPage);
  Destroy(cache);
  munmap(big, len);
}

TEST(DefaultMonitorTest, MremapMovesAndGrowsAMappingWithACachedPageInside) {
  constexpr size_t kLen = 256 << 10;
  mrc_cache_t* cache = CreateCache({});
  ASSERT_NE(cache, nullptr);
  char* p = static_cast<char*>(
      mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  for (size_t i = 0; i < kLen; ++i) p[i] = static_cast<char>(i * 7 + 3);
  mrc_region_t* r = nullptr;
  ASSERT_EQ(mrc_get(cache, p + kLen / 2, kPage, kLocalWrite, &r), 0);  // the middle 4 KiB
  mrc_put(cache, r);

  // A destination twice the size, so that the moved mapping can grow in place.
  char* dest =
      static_cast<char*>(mmap(nullptr, 2 * kLen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(dest, MAP_FAILED);
  void* moved = mremap(p, kLen, kLen, MREMAP_MAYMOVE | MREMAP_FIXED, dest);
  ASSERT_EQ(moved, dest) << strerror(errno);
  size_t wrong = 0;
  for (size_t i = 0; i < kLen; ++i) wrong += dest[i] != static_cast<char>(i * 7 + 3);
  EXPECT_EQ(wrong, 0u) << "bytes lost by the move";
  unsigned char vec;
  EXPECT_EQ(mincore(p, kPage, &vec), -1) << "the old range is unmapped";

  ASSERT_EQ(munmap(dest + kLen, kLen), 0);
  ASSERT_EQ(mremap(dest, kLen, 2 * kLen, 0), dest) << "growing in place: " << strerror(errno);
  wrong = 0;
  for (size_t i = 0; i < kLen; ++i) wrong += dest[i] != static_cast<char>(i * 7 + 3);
  EXPECT_EQ(wrong, 0u) << "bytes lost by growing";
  for (size_t i = kLen; i < 2 * kLen; ++i) wrong += dest[i] != 0;
  EXPECT_EQ(wrong, 0u) << "the grown part is fresh zeroed memory";
  dest[2 * kLen - 1] = 1;  // and writable

  // The old registration went with the move: a get at the new place misses.
  uint64_t misses = Stats(cache).misses;
  ASSERT_EQ(mrc_get(cache, dest + kLen / 2, kPage, kLocalWrite, &r), 0);
  mrc_put(cache, r);
  EXPECT_EQ(Stats(cache).misses, misses + 1);
  Destroy(cache);
  munmap(dest, 2 * kLen);
}

// Installs and releases patch once (not under ThreadSanitizer).
// Whether the patch monitor can exist in this build: ENOTSUP (ThreadSanitizer)
// means not, and its tests skip; any other failure to install it fails them.
bool PatchAvailable() {
  auto lease = AcquireMonitor("patch");
  if (lease.ok()) return true;
  EXPECT_EQ(StatusToErrno(lease.status()), ENOTSUP) << lease.status();
  return false;
}

TEST(DefaultMonitorTest, AutoWithPatchIsComplete) {
  if (!PatchAvailable()) GTEST_SKIP() << "patch is not available in this build";
  ::testing::internal::CaptureStderr();
  mrc_cache_t* cache = CreateCache({{"registrar", "sim"}});
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(Stats(cache).monitor_incomplete, 0u);
  EXPECT_EQ(err.find("incomplete"), std::string::npos) << err;
  Destroy(cache);
}

// What another library's hook leaves on a libc entry: `truncate` jumps
// elsewhere (here to a plain system call), so patch refuses to install.
int ForeignTruncate(const char* path, off_t length) {
  return static_cast<int>(
      SyscallResult(RawSyscall(SYS_truncate, reinterpret_cast<long>(path), length)));
}

TEST(DefaultMonitorTest, AutoWithoutPatchSaysSoOnStderrAndInStats) {
  if (!PatchAvailable()) GTEST_SKIP() << "patch is not available in this build";
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  void* entry = dlsym(libc, "truncate");
  dlclose(libc);
  uint8_t expected[8];
  memcpy(expected, entry, 8);
  patch_monitor::PatchSite foreign;
  ASSERT_TRUE(patch_monitor::ApplyPatch("truncate", entry, expected,
                                        reinterpret_cast<void*>(&ForeignTruncate), &foreign)
                  .ok());
  ::testing::internal::CaptureStderr();
  mrc_cache_t* cache = CreateCache({{"registrar", "sim"}});
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(Stats(cache).monitor_incomplete, 1u);
  // One line, with the real cause and what it costs.
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  // 'symbols', or 'symbols+uffd' in a sanitizer build (monitor.h).
  EXPECT_NE(err.find("mrcache: warning: monitor 'auto' is incomplete, using 'symbols"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("refusing to patch truncate"), std::string::npos) << err;
  EXPECT_NE(err.find("errno 95"), std::string::npos) << err;
  EXPECT_NE(err.find("syscall()"), std::string::npos) << err;
  Destroy(cache);
  EXPECT_TRUE(patch_monitor::RemovePatch(&foreign).ok());
  EXPECT_EQ(memcmp(entry, expected, 8), 0);
}

}  // namespace
}  // namespace testing
}  // namespace mrcache
