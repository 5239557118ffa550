// The invalidation matrix: for every way memory disappears (rows)
// and every monitor (columns), through a real cache with the uring registrar:
// register a buffer, make the memory disappear that way, map fresh memory at
// the same address, get again, write through the region as a device would,
// and check that the CPU sees the written bytes at that address. A cell is
// "covered" only if that holds for MRCACHE_MATRIX_PASSES (default 1000)
// passes in a row (100 in sanitizer builds).
//
// Every cell prints one line `matrix <row> <monitor> covered|stale <passes>`
// (also written to $TEST_UNDECLARED_OUTPUTS_DIR/invalidation_matrix.txt);
// tests/monitors/matrix_table.py turns those lines into the README table.
// The test fails if a cell that monitor_expectations.h says is covered is
// not (`auto` must cover every row that goes through libc, `auto+uffd`
// every row).
#include <sys/mman.h>

#include <cerrno>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mrcache/mrcache.h"
#include "tests/monitors/monitor_expectations.h"
#include "tests/monitors/release_ways.h"
#include "tests/reliability/process_probes.h"

namespace mrcache {
namespace testing {
namespace {

constexpr int kLocalWrite = 1;  // IBV_ACCESS_LOCAL_WRITE

// 1000 passes; sanitizer builds (10-50x slower) run 100 unless told otherwise.
// The README table comes from a plain build's 1000-pass run.
int Passes() {
  const char* env = getenv("MRCACHE_MATRIX_PASSES");
  int n = env != nullptr ? atoi(env) : 0;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kDefault = 100;
#else
  constexpr int kDefault = 1000;
#endif
  return n > 0 ? n : kDefault;
}

struct Cell {
  std::string monitor;
  std::string way;
};
void PrintTo(const Cell& cell, std::ostream* os) { *os << cell.monitor << "/" << cell.way; }

// A cache with the uring registrar, `monitor`, and one region per requested
// buffer (max_merge_bytes 0 turns merging and bridging off). 0 or the errno
// of mrc_cache_create.
int OpenCache(const std::string& monitor, mrc_cache_t** cache) {
  mrc_config_t* cfg = nullptr;
  int rc = mrc_config_create(&cfg);
  if (rc != 0) return rc;
  const char* settings[][2] = {
      {"registrar", "uring"}, {"monitor", monitor.c_str()}, {"max_merge_bytes", "0"}};
  for (const auto& kv : settings) {
    if (rc == 0) rc = mrc_config_set(cfg, kv[0], kv[1]);
  }
  if (rc == 0) rc = mrc_cache_create(cfg, nullptr, cache);
  mrc_config_destroy(cfg);
  return rc;
}

// Destroys the cache; every registration it made was deregistered.
void CloseCache(mrc_cache_t* cache) {
  if (cache == nullptr) return;
  mrc_stats_t stats;
  mrc_stats(cache, &stats);
  mrc_cache_destroy(cache);
  EXPECT_EQ(stats.regions + stats.deregistrations, stats.registrations);
}

class InvalidationMatrixTest : public ::testing::TestWithParam<Cell> {
 protected:
  void SetUp() override {
    int rc = OpenCache(GetParam().monitor, &cache_);
    if (rc == ENOTSUP) GTEST_SKIP() << GetParam().monitor << " is not available in this build";
    ASSERT_EQ(rc, 0) << mrc_strerror(rc);
  }
  void TearDown() override { CloseCache(cache_); }

  enum class Pass { kCovered, kStale, kAddressTaken };

  // One pass: kCovered if the device write reached the memory now at the
  // address, kStale if not, kAddressTaken if something else mapped the
  // released address before the test could map fresh memory there (no
  // device write is tried then).
  Pass OnePass(const ReleaseWay& way, uint8_t pattern) {
    Victim v = way.prepare();
    mrc_region_t* region = nullptr;
    EXPECT_EQ(mrc_get(cache_, v.gone, v.gone_len, kLocalWrite, &region), 0);
    if (region == nullptr) return Pass::kStale;
    mrc_put(cache_, region);

    way.release(v);
    if (!RefillSameAddress(v)) {
      mrc_invalidate(cache_, v.gone, v.gone_len);
      CleanupVictim(way, v);
      return Pass::kAddressTaken;
    }
    memset(v.gone, 0, v.gone_len);  // the CPU's view of the fresh memory

    bool ok = false;
    region = nullptr;
    int rc = mrc_get(cache_, v.gone, v.gone_len, kLocalWrite, &region);
    EXPECT_EQ(rc, 0) << mrc_strerror(rc);
    if (rc == 0) {
      mrc_region_info_t info;
      mrc_region_info(region, &info);
      size_t offset = static_cast<size_t>(v.gone - static_cast<char*>(info.addr));
      std::vector<uint8_t> data(4096, pattern);
      size_t tail = v.gone_len - data.size();
      EXPECT_EQ(mrc_region_device_write(cache_, region, offset, data.data(), data.size()), 0);
      EXPECT_EQ(mrc_region_device_write(cache_, region, offset + tail, data.data(), data.size()),
                0);
      ok = memcmp(v.gone, data.data(), data.size()) == 0 &&
           memcmp(v.gone + tail, data.data(), data.size()) == 0;
      mrc_put(cache_, region);
    }
    // Drop what this pass registered before its memory is unmapped for good.
    mrc_invalidate(cache_, v.gone, v.gone_len);
    CleanupVictim(way, v);
    return ok ? Pass::kCovered : Pass::kStale;
  }

  mrc_cache_t* cache_ = nullptr;
};

void Record(const Cell& cell, bool covered, int passes) {
  char line[256];
  snprintf(line, sizeof(line), "matrix %s %s %s %d\n", cell.way.c_str(), cell.monitor.c_str(),
           covered ? "covered" : "stale", passes);
  fputs(line, stdout);
  if (const char* dir = getenv("TEST_UNDECLARED_OUTPUTS_DIR")) {
    std::string path = std::string(dir) + "/invalidation_matrix.txt";
    if (FILE* f = fopen(path.c_str(), "a")) {
      fputs(line, f);
      fclose(f);
    }
  }
}

// MADV_FREE leaves pinned pages in the mapping (the device and the CPU keep
// sharing them); every other way replaces the pages under the address.
bool ReplacesPages(const std::string& way) { return way != "madvise_free"; }

TEST_P(InvalidationMatrixTest, DeviceWriteAfterReleaseReachesTheFreshMemory) {
  const Cell& cell = GetParam();
  const ReleaseWay* way = FindReleaseWay(cell.way);
  ASSERT_NE(way, nullptr);
  int passes = Passes();
  int done = 0;
  int taken = 0;
  bool covered = true;
  while (done < passes) {
    Pass pass = OnePass(*way, static_cast<uint8_t>(0x40 + done % 64));
    if (pass == Pass::kAddressTaken) {
      // A sanitizer's allocator maps memory from other threads (uffd's
      // reader, the cache's) into the hole a release leaves; the pass says
      // nothing about the monitor and is run again. Nothing else maps here
      // in a plain build.
      ASSERT_TRUE(UnderSanitizer()) << cell.way << ": the released address was taken meanwhile";
      if (++taken > passes) {
        GTEST_SKIP() << "the sanitizer's allocator took the released address " << taken
                     << " times before " << done + 1 << " passes were made";
      }
      continue;
    }
    if (pass == Pass::kStale) {
      covered = false;
      break;
    }
    ++done;
  }
  Record(cell, covered, covered ? done : done + 1);
  if (ExpectReported(cell.monitor, cell.way)) {
    EXPECT_TRUE(covered) << cell.monitor << " must cover " << cell.way << "; stale at pass "
                         << done + 1;
  }
  if (cell.monitor == "none") {
    // The negative control: with nothing reporting the release, the oracle
    // must catch the stale registration at the first pass wherever the
    // release replaced the pages.
    EXPECT_EQ(covered, !ReplacesPages(cell.way))
        << cell.way << " with monitor none: " << (covered ? "covered" : "stale");
    if (!covered) {
      EXPECT_EQ(done, 0) << cell.way << ": stale only at pass " << done + 1;
    }
  }
}

// Ways pages could change under a mapping that are not releases: the pages a
// registration pins stay the ones the CPU sees, so the region stays valid.
class PagesStayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int rc = OpenCache("auto", &cache_);
    ASSERT_EQ(rc, 0) << mrc_strerror(rc);
  }
  void TearDown() override { CloseCache(cache_); }

  // Gets [addr, addr + length) for writing, expecting a hit on `expected`
  // (nullptr: any region), writes `pattern` through it at `offset` as a
  // device would, and says whether the CPU sees it there.
  bool DeviceWriteIsSeen(char* addr, size_t length, size_t offset, uint8_t pattern,
                         mrc_region_t* expected) {
    mrc_region_t* region = nullptr;
    int rc = mrc_get(cache_, addr, length, kLocalWrite, &region);
    EXPECT_EQ(rc, 0) << mrc_strerror(rc);
    if (rc != 0) return false;
    if (expected != nullptr) {
      EXPECT_EQ(region, expected) << "expected a hit on the same region";
    }
    mrc_region_info_t info;
    mrc_region_info(region, &info);
    size_t at = static_cast<size_t>(addr - static_cast<char*>(info.addr)) + offset;
    std::vector<uint8_t> data(64, pattern);
    EXPECT_EQ(mrc_region_device_write(cache_, region, at, data.data(), data.size()), 0);
    mrc_put(cache_, region);
    return memcmp(addr + offset, data.data(), data.size()) == 0;
  }

  mrc_cache_t* cache_ = nullptr;
};

// mprotect(PROT_READ) under a write registration is not reported: the pinned
// pages are still the ones the CPU reads, so the region is kept (a fresh
// registration for writing would now fail with EFAULT; the cached one keeps
// letting the device write, as the registration allowed when it was made).
TEST_F(PagesStayTest, MprotectReadOnlyKeepsTheWriteRegistrationCoherent) {
  constexpr size_t kLen = 64 << 10;
  char* p = static_cast<char*>(
      mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  memset(p, 0x5a, kLen);
  mrc_region_t* region = nullptr;
  ASSERT_EQ(mrc_get(cache_, p, kLen, kLocalWrite, &region), 0);
  mrc_put(cache_, region);

  ASSERT_EQ(mprotect(p, kLen, PROT_READ), 0);
  EXPECT_TRUE(DeviceWriteIsSeen(p, kLen, kLen - 64, 0x33, region));

  mrc_invalidate(cache_, p, kLen);
  munmap(p, kLen);
}

// Truncating a shared file to a size inside a page keeps that page (its tail
// is zeroed in place): a registration of the pages before the cut stays valid.
TEST_F(PagesStayTest, TruncationToAnUnalignedSizeKeepsThePageHoldingTheNewEnd) {
  constexpr size_t kPage = 4096;
  int fd = memfd_create("mrcache-partial-page", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4 * kPage), 0);
  char* p = static_cast<char*>(mmap(nullptr, 4 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(p, MAP_FAILED);
  memset(p, 0x5a, 4 * kPage);
  mrc_region_t* region = nullptr;
  ASSERT_EQ(mrc_get(cache_, p, 2 * kPage, kLocalWrite, &region), 0);  // pages 0 and 1
  mrc_put(cache_, region);

  ASSERT_EQ(ftruncate(fd, kPage + 100), 0);  // page 1 now holds the end of the file
  EXPECT_TRUE(DeviceWriteIsSeen(p, 2 * kPage, kPage, 0x44, region));

  mrc_invalidate(cache_, p, 4 * kPage);
  munmap(p, 4 * kPage);
  close(fd);
}

#if defined(MRCACHE_TEST_LINKS_JEMALLOC)
// This variant links jemalloc so that it is the process's allocator; without
// that its jemalloc row and column would silently not exist.
TEST(JemallocVariant, JemallocIsTheProcessAllocator) {
  if (UnderSanitizer()) {
    GTEST_SKIP() << "the sanitizer's malloc replaces jemalloc's: no jemalloc_purge row, no "
                    "jemalloc column";
  }
  EXPECT_TRUE(JemallocIsAllocator());
}
#endif

std::vector<Cell> AllCells() {
  // No `uffd` alone: a cache refuses it (release_race_test).
  std::vector<std::string> monitors = {"none", "symbols", "patch", "auto", "auto+uffd"};
  if (JemallocIsAllocator()) monitors.push_back("jemalloc");
  std::vector<Cell> cells;
  for (const ReleaseWay& w : AllReleaseWays()) {
    for (const std::string& m : monitors) cells.push_back({m, w.name});
  }
  return cells;
}

INSTANTIATE_TEST_SUITE_P(Matrix, InvalidationMatrixTest, ::testing::ValuesIn(AllCells()),
                         [](const ::testing::TestParamInfo<Cell>& info) {
                           return info.param.way + "_" + MonitorTestName(info.param.monitor);
                         });

}  // namespace
}  // namespace testing
}  // namespace mrcache
