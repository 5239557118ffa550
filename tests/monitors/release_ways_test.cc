// Which ways of making memory disappear each monitor reports (the rows and
// columns of the invalidation matrix, at the monitor level: no cache).
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <tuple>

#include "gtest/gtest.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/monitors/monitor_sync.h"
#include "tests/monitors/monitor_expectations.h"
#include "tests/monitors/recording_listener.h"
#include "tests/monitors/release_ways.h"
#include "tests/reliability/process_probes.h"

namespace mrcache {
namespace testing {
namespace {

struct Cell {
  std::string monitor;
  std::string way;
};
void PrintTo(const Cell& cell, std::ostream* os) { *os << cell.monitor << "/" << cell.way; }

class ReleaseWaysTest : public ::testing::TestWithParam<Cell> {};

TEST_P(ReleaseWaysTest, ReportsExactlyTheExpectedWays) {
  const Cell& cell = GetParam();
  const ReleaseWay* way = FindReleaseWay(cell.way);
  ASSERT_NE(way, nullptr);
  auto lease = AcquireMonitor(cell.monitor);
  if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
  ASSERT_TRUE(lease.ok()) << lease.status();
  RecordingListener listener;

  Victim v = way->prepare();
  uintptr_t page_start = reinterpret_cast<uintptr_t>(v.gone) & ~uintptr_t{4095};
  uintptr_t page_end = (reinterpret_cast<uintptr_t>(v.gone) + v.gone_len + 4095) & ~uintptr_t{4095};
  (*lease)->Watch(reinterpret_cast<void*>(page_start), page_end - page_start);
  listener.Clear();
  way->release(v);
  SyncMemoryMonitors();
  bool seen = listener.Saw(v.gone, v.gone_len);
  (*lease)->Unwatch(reinterpret_cast<void*>(page_start), page_end - page_start);
  way->cleanup(v);

  EXPECT_EQ(seen, ExpectReported(cell.monitor, cell.way)) << cell.monitor << " / " << cell.way;
}

// kB of transparent huge pages (AnonHugePages in /proc/self/smaps) in the
// mapping that contains addr; -1 if the mapping is not found.
long AnonHugeKb(const void* addr) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (f == nullptr) return -1;
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  char line[512];
  bool inside = false;
  long kb = -1;
  while (fgets(line, sizeof(line), f) != nullptr) {
    unsigned long start, end;
    if (sscanf(line, "%lx-%lx ", &start, &end) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      inside = start <= a && a < end;
    } else if (inside && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) {
      break;
    }
  }
  fclose(f);
  return kb;
}

// The madvise_dontneed_thp row must really release part of a huge page.
TEST(ReleaseWayVictims, DontneedThpRangeIsInsideATransparentHugePage) {
  FILE* f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  char mode[128] = "";
  if (f != nullptr) {
    if (fgets(mode, sizeof(mode), f) == nullptr) mode[0] = 0;
    fclose(f);
  }
  if (strstr(mode, "[never]") != nullptr || mode[0] == 0) {
    GTEST_SKIP() << "transparent huge pages are off here";
  }
  const ReleaseWay* way = FindReleaseWay("madvise_dontneed_thp");
  ASSERT_NE(way, nullptr);
  Victim v = way->prepare();
  long kb = AnonHugeKb(v.gone);
  way->cleanup(v);
  EXPECT_GE(kb, 2048) << "the victim is not backed by a 2 MiB huge page";
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
  std::vector<Cell> cells;
  std::vector<std::string> monitors = {"none", "symbols", "patch", "uffd", "auto", "auto+uffd"};
  if (JemallocIsAllocator()) monitors.push_back("jemalloc");
  for (const std::string& m : monitors) {
    for (const ReleaseWay& w : AllReleaseWays()) cells.push_back({m, w.name});
  }
  return cells;
}

INSTANTIATE_TEST_SUITE_P(AllMonitors, ReleaseWaysTest, ::testing::ValuesIn(AllCells()),
                         [](const ::testing::TestParamInfo<Cell>& info) {
                           return MonitorTestName(info.param.monitor) + "_" + info.param.way +
                                  (ExpectReported(info.param.monitor, info.param.way)
                                       ? "_reported"
                                       : "_not_reported");
                         });

}  // namespace
}  // namespace testing
}  // namespace mrcache
