// The uffd monitor: faults stay ordinary, only watched ranges are reported,
// and overlapping watches are reference-counted.
#include "mrcache/uffd_monitor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"
#include "mrcache/monitor.h"
#include "mrcache/monitor_sync.h"
#include "tests/monitors/recording_listener.h"

namespace mrcache {
namespace testing {
namespace {

constexpr size_t kLen = 16 * 4096;

char* MapTouched() {
  char* p = static_cast<char*>(
      mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  memset(p, 1, kLen);
  return p;
}

class UffdMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto lease = AcquireMonitor("uffd");
    ASSERT_TRUE(lease.ok()) << lease.status();
    lease_ = std::move(*lease);
    alarm(30);  // a blocked fault or a lost event wakeup fails the test, not the run
  }
  void TearDown() override { alarm(0); }
  std::unique_ptr<MonitorLease> lease_;
  RecordingListener listener_;
};

TEST_F(UffdMonitorTest, FaultsOnDroppedPagesOfAWatchedRangeDoNotBlock) {
  char* p = MapTouched();
  lease_->Watch(p, kLen);
  ASSERT_EQ(madvise(p, kLen, MADV_DONTNEED), 0);
  for (size_t i = 0; i < kLen; i += 4096) p[i] = 2;  // would wait forever in MISSING mode
  EXPECT_EQ(p[0], 2);
  lease_->Unwatch(p, kLen);
  munmap(p, kLen);
}

TEST_F(UffdMonitorTest, UnwatchedRangeIsNotReported) {
  char* p = MapTouched();
  lease_->Watch(p, kLen);
  lease_->Unwatch(p, kLen);
  listener_.Clear();
  munmap(p, kLen);
  SyncMemoryMonitors();
  EXPECT_FALSE(listener_.Saw(p, kLen));
}

TEST_F(UffdMonitorTest, OverlappingWatchKeepsTheRangeWatchedUntilItsOwnUnwatch) {
  char* p = MapTouched();
  lease_->Watch(p, kLen);              // region A: the whole range
  lease_->Watch(p + 4096, 2 * 4096);   // region B: two pages inside it
  lease_->Unwatch(p, kLen);            // A retired; B still cached
  listener_.Clear();
  munmap(p + 8 * 4096, 8 * 4096);  // only A covered these
  SyncMemoryMonitors();
  EXPECT_FALSE(listener_.Saw(p + 8 * 4096, 8 * 4096)) << "A's own pages were unregistered";
  munmap(p, 8 * 4096);
  SyncMemoryMonitors();
  EXPECT_TRUE(listener_.Saw(p + 4096, 2 * 4096));
  lease_->Unwatch(p + 4096, 2 * 4096);
}

TEST_F(UffdMonitorTest, RangeThatCannotBeRegisteredIsCountedAsAWatchFailure) {
  uint64_t before = uffd_monitor::WatchFailures();
  lease_->Watch(reinterpret_cast<void*>(4096), 4096);  // nothing is mapped there
  EXPECT_EQ(uffd_monitor::WatchFailures(), before + 1);
}

TEST_F(UffdMonitorTest, ReportArrivesBeforeSyncReturns) {
  for (int i = 0; i < 200; ++i) {
    char* p = MapTouched();
    lease_->Watch(p, kLen);
    listener_.Clear();
    munmap(p, kLen);
    SyncMemoryMonitors();
    ASSERT_TRUE(listener_.Saw(p, kLen)) << "iteration " << i;
    lease_->Unwatch(p, kLen);
  }
}

}  // namespace
}  // namespace testing
}  // namespace mrcache
