// 40,000 munmap/mmap cycles (12,000 under a sanitizer) while monitors report and nobody calls the
// cache: the listener's storage and the process's RSS stay bounded.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/monitors/monitor_sync.h"
#include "mrcache/mrcache.h"
#include "tests/monitors/monitor_expectations.h"
#include "tests/monitors/recording_listener.h"
#include "tests/reliability/process_probes.h"

namespace mrcache {
namespace testing {
namespace {

// Under a sanitizer (10-50x slower; uffd's ioctls and reader thread more so)
// 12,000 cycles, still three times the listener's capacity, keep the test
// within its timeout.
constexpr int kCycles = UnderSanitizer() ? 12000 : 40000;
constexpr long kRssSlackBytes = 16L << 20;

long RssBytes() {
  FILE* f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f != nullptr) {
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    fclose(f);
  }
  return resident * sysconf(_SC_PAGESIZE);
}

// Maps, touches and unmaps one page, watched for the monitors that need it.
void Cycle(MonitorLease* lease) {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  memset(p, 1, 4096);
  lease->Watch(p, 4096);
  munmap(p, 4096);
  lease->Unwatch(p, 4096);
}

class BoundedReportsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BoundedReportsTest, ListenerStorageAndRssStayBounded) {
  auto lease = AcquireMonitor(GetParam());
  if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
  ASSERT_TRUE(lease.ok()) << lease.status();
  auto listener = std::make_unique<RecordingListener>();
  for (int i = 0; i < 1000; ++i) Cycle(lease->get());  // warm up allocator and maps
  SyncMemoryMonitors();
  listener->Clear();
  long rss_before = RssBytes();
  for (int i = 0; i < kCycles; ++i) Cycle(lease->get());
  SyncMemoryMonitors();
  long rss_after = RssBytes();
  EXPECT_EQ(listener->count(), RecordingListener::kCapacity) << "every cycle was reported";
  EXPECT_GE(listener->count() + listener->overflowed(), static_cast<size_t>(kCycles));
  EXPECT_LT(rss_after - rss_before, kRssSlackBytes);
}

INSTANTIATE_TEST_SUITE_P(Monitors, BoundedReportsTest,
                         ::testing::Values("symbols", "patch", "uffd", "auto"));

TEST(BoundedReportsTest, CacheThatIsNeverCalledStaysBounded) {
  mrc_config_t* cfg = nullptr;
  ASSERT_EQ(mrc_config_create(&cfg), 0);
  ASSERT_EQ(mrc_config_set(cfg, "registrar", "sim"), 0);
  ASSERT_EQ(mrc_config_set(cfg, "monitor", "auto"), 0);
  mrc_cache_t* cache = nullptr;
  ASSERT_EQ(mrc_cache_create(cfg, nullptr, &cache), 0);
  mrc_config_destroy(cfg);
  auto lease = AcquireMonitor("none");
  ASSERT_TRUE(lease.ok());
  for (int i = 0; i < 1000; ++i) Cycle(lease->get());
  long rss_before = RssBytes();
  for (int i = 0; i < kCycles; ++i) Cycle(lease->get());
  long rss_after = RssBytes();
  EXPECT_LT(rss_after - rss_before, kRssSlackBytes);
  // The cache drains (or falls back to a full invalidation) on its next call.
  std::vector<char> buf(8192, 1);
  mrc_region_t* region = nullptr;
  ASSERT_EQ(mrc_get(cache, buf.data(), buf.size(), 1, &region), 0);
  mrc_put(cache, region);
  mrc_stats_t stats;
  mrc_stats(cache, &stats);
  mrc_cache_destroy(cache);
  EXPECT_EQ(stats.regions + stats.deregistrations, stats.registrations);
}

}  // namespace
}  // namespace testing
}  // namespace mrcache
