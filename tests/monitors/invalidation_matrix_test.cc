// The invalidation matrix (issue 3): for every way memory disappears (rows)
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
// not (`auto` must cover every row).
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

class InvalidationMatrixTest : public ::testing::TestWithParam<Cell> {
 protected:
  void SetUp() override {
    mrc_config_t* cfg = nullptr;
    ASSERT_EQ(mrc_config_create(&cfg), 0);
    ASSERT_EQ(mrc_config_set(cfg, "registrar", "uring"), 0);
    ASSERT_EQ(mrc_config_set(cfg, "monitor", GetParam().monitor.c_str()), 0);
    ASSERT_EQ(mrc_config_set(cfg, "max_merge_bytes", "0"), 0);  // one region per buffer
    int rc = mrc_cache_create(cfg, nullptr, &cache_);
    mrc_config_destroy(cfg);
    if (rc == ENOTSUP) GTEST_SKIP() << GetParam().monitor << " is not available in this build";
    ASSERT_EQ(rc, 0) << mrc_strerror(rc);
  }
  void TearDown() override {
    if (cache_ == nullptr) return;
    mrc_stats_t stats;
    mrc_stats(cache_, &stats);
    mrc_cache_destroy(cache_);
    EXPECT_EQ(stats.regions + stats.deregistrations, stats.registrations);
  }

  // One pass; true if the device write reached the memory now at the address.
  bool OnePass(const ReleaseWay& way, uint8_t pattern) {
    Victim v = way.prepare();
    mrc_region_t* region = nullptr;
    EXPECT_EQ(mrc_get(cache_, v.gone, v.gone_len, kLocalWrite, &region), 0);
    if (region == nullptr) return false;
    mrc_put(cache_, region);

    way.release(v);
    bool refilled = RefillSameAddress(v);
    EXPECT_TRUE(refilled) << way.name << ": the address was taken meanwhile";
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
    return ok;
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

TEST_P(InvalidationMatrixTest, DeviceWriteAfterReleaseReachesTheFreshMemory) {
  const Cell& cell = GetParam();
  const ReleaseWay* way = FindReleaseWay(cell.way);
  ASSERT_NE(way, nullptr);
  int passes = Passes();
  int done = 0;
  bool covered = true;
  for (; done < passes; ++done) {
    if (!OnePass(*way, static_cast<uint8_t>(0x40 + done % 64))) {
      covered = false;
      break;
    }
  }
  Record(cell, covered, covered ? done : done + 1);
  if (ExpectReported(cell.monitor, cell.way)) {
    EXPECT_TRUE(covered) << cell.monitor << " must cover " << cell.way << "; stale at pass "
                         << done + 1;
  }
}

std::vector<Cell> AllCells() {
  std::vector<std::string> monitors = {"none", "symbols", "patch", "uffd", "auto"};
  if (JemallocIsAllocator()) monitors.push_back("jemalloc");
  std::vector<Cell> cells;
  for (const ReleaseWay& w : AllReleaseWays()) {
    for (const std::string& m : monitors) cells.push_back({m, w.name});
  }
  return cells;
}

INSTANTIATE_TEST_SUITE_P(Matrix, InvalidationMatrixTest, ::testing::ValuesIn(AllCells()),
                         [](const ::testing::TestParamInfo<Cell>& info) {
                           return info.param.way + "_" + info.param.monitor;
                         });

}  // namespace
}  // namespace testing
}  // namespace mrcache
