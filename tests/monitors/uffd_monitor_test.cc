// The uffd monitor: faults stay ordinary, only watched ranges are reported,
// overlapping watches are reference-counted, whole mappings are registered
// (one span per mapping, whatever the number of ranges), and the bookkeeping
// follows unmaps and moves. Through a cache: uffd_mappings_test.cc.
#include "mrcache/monitors/uffd_monitor.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/monitors/monitor_sync.h"
#include "tests/monitors/map_count.h"
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

TEST_F(UffdMonitorTest, OverlappingWatchKeepsTheMappingWatchedUntilTheLastUnwatch) {
  char* p = MapTouched();
  lease_->Watch(p, kLen);             // region A: the whole range
  lease_->Watch(p + 4096, 2 * 4096);  // region B: two pages inside it
  lease_->Unwatch(p, kLen);           // A retired; B still cached
  listener_.Clear();
  munmap(p + 8 * 4096, 4 * 4096);  // only A covered these: reported, the mapping is watched
  SyncMemoryMonitors();
  EXPECT_TRUE(listener_.Saw(p + 8 * 4096, 4 * 4096));
  munmap(p, 8 * 4096);
  SyncMemoryMonitors();
  EXPECT_TRUE(listener_.Saw(p + 4096, 2 * 4096));
  lease_->Unwatch(p + 4096, 2 * 4096);  // the last range: the rest is unregistered
  EXPECT_EQ(uffd_monitor::WatchedSpans(), 0u);
  listener_.Clear();
  munmap(p + 12 * 4096, 4 * 4096);
  SyncMemoryMonitors();
  EXPECT_FALSE(listener_.Saw(p + 12 * 4096, 4 * 4096));
}

TEST_F(UffdMonitorTest, RangeThatCannotBeRegisteredIsCountedAsAWatchFailure) {
  uint64_t before = uffd_monitor::WatchFailures();
  lease_->Watch(reinterpret_cast<void*>(4096), 4096);  // nothing is mapped there
  EXPECT_EQ(uffd_monitor::WatchFailures(), before + 1);
  EXPECT_EQ(lease_->watch_failures().total, 1u);
  EXPECT_EQ(lease_->watch_failures().enomem, 1u) << "unmapped, as mmap/mprotect would say";
  lease_->Unwatch(reinterpret_cast<void*>(4096), 4096);
}

TEST_F(UffdMonitorTest, PageSeparatedRangesOfOneMappingAreOneSpanAndSplitNothing) {
  constexpr size_t kRanges = 64;
  char* p = static_cast<char*>(mmap(nullptr, 2 * kRanges * 4096, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  const size_t kBytes = 2 * kRanges * 4096;
  ASSERT_EQ(mrcache_test::MapCountIn(p, kBytes), 1u);
  for (size_t i = 0; i < kRanges; ++i) lease_->Watch(p + 2 * i * 4096, 4096);
  EXPECT_EQ(uffd_monitor::WatchedSpans(), 1u);
  EXPECT_EQ(mrcache_test::MapCountIn(p, kBytes), 1u) << "watching split the mapping";
  EXPECT_EQ(lease_->watch_failures().total, 0u);
  for (size_t i = 0; i < kRanges; ++i) lease_->Unwatch(p + 2 * i * 4096, 4096);
  EXPECT_EQ(uffd_monitor::WatchedSpans(), 0u) << "the last Unwatch unregisters the mapping";
  EXPECT_EQ(mrcache_test::MapCountIn(p, kBytes), 1u) << "unwatching split the mapping";
  listener_.Clear();
  munmap(p, 2 * kRanges * 4096);
  SyncMemoryMonitors();
  EXPECT_FALSE(listener_.Saw(p, 2 * kRanges * 4096));
}

TEST_F(UffdMonitorTest, UnmapOfAnUnwatchedPartOfAWatchedMappingIsReported) {
  char* p = MapTouched();
  lease_->Watch(p, 4096);
  listener_.Clear();
  munmap(p + 8 * 4096, 8 * 4096);  // the whole mapping is registered
  SyncMemoryMonitors();
  EXPECT_TRUE(listener_.Saw(p + 8 * 4096, 8 * 4096));
  lease_->Unwatch(p, 4096);
  munmap(p, 8 * 4096);
}

TEST_F(UffdMonitorTest, RangeSpanningTwoMappingsIsWatchedInBoth) {
  char* p = MapTouched();
  ASSERT_EQ(mprotect(p + 8 * 4096, 8 * 4096, PROT_READ), 0);  // two mappings now
  lease_->Watch(p + 6 * 4096, 4 * 4096);
  EXPECT_EQ(lease_->watch_failures().total, 0u);
  listener_.Clear();
  munmap(p, 4096);
  munmap(p + 15 * 4096, 4096);
  SyncMemoryMonitors();
  EXPECT_TRUE(listener_.Saw(p, 4096)) << "first mapping";
  EXPECT_TRUE(listener_.Saw(p + 15 * 4096, 4096)) << "second mapping";
  lease_->Unwatch(p + 6 * 4096, 4 * 4096);
  munmap(p, kLen);
}

TEST_F(UffdMonitorTest, MemoryMappedAgainAtUnmappedAddressesIsWatchedAfresh) {
  char* p = MapTouched();
  lease_->Watch(p, kLen);  // region 1
  // New memory in place of the old (the old is unmapped; no other thread
  // can take the addresses in between, as it could after a munmap).
  ASSERT_EQ(mmap(p, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            static_cast<void*>(p));
  SyncMemoryMonitors();
  lease_->Watch(p, kLen);    // region 2, at the same address
  lease_->Unwatch(p, kLen);  // region 1 retired late, as a cache does
  listener_.Clear();
  munmap(p, kLen);
  SyncMemoryMonitors();
  EXPECT_TRUE(listener_.Saw(p, kLen)) << "the second unmap was not seen";
  lease_->Unwatch(p, kLen);
  EXPECT_EQ(uffd_monitor::WatchedSpans(), 0u);
}

TEST_F(UffdMonitorTest, MovedMappingIsReportedAndItsNewPlaceIsNotLeftRegistered) {
  char* p = MapTouched();
  char* target =
      static_cast<char*>(mmap(nullptr, kLen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(target, MAP_FAILED);
  lease_->Watch(p + 4096, 4096);
  listener_.Clear();
  ASSERT_EQ(mremap(p, kLen, kLen, MREMAP_MAYMOVE | MREMAP_FIXED, target),
            static_cast<void*>(target));
  SyncMemoryMonitors();
  EXPECT_TRUE(listener_.Saw(p, kLen));
  lease_->Unwatch(p + 4096, 4096);
  EXPECT_EQ(uffd_monitor::WatchedSpans(), 0u);
  listener_.Clear();
  munmap(target, kLen);
  SyncMemoryMonitors();
  EXPECT_FALSE(listener_.Saw(target, kLen)) << "the moved registration was kept";
}

// In a child (the descriptors it uses up are its own): 0 if AcquireMonitor
// failed with `want` and without the vm.unprivileged_userfaultfd hint.
int ChildAcquireWithFreeDescriptors(int free_fds, int want) {
  rlimit lim = {64, 64};
  if (setrlimit(RLIMIT_NOFILE, &lim) != 0) return 10;
  std::vector<int> fds;
  for (;;) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  for (int i = 0; i < free_fds && !fds.empty(); ++i) {
    close(fds.back());
    fds.pop_back();
  }
  auto lease = AcquireMonitor("uffd");
  if (lease.ok()) return 11;
  if (StatusToErrno(lease.status()) != want) return 12;
  if (std::string(lease.status().message()).find("unprivileged_userfaultfd") != std::string::npos) {
    return 13;
  }
  return 0;
}

TEST(UffdMonitorEnableTest, WithoutFreeDescriptorsTheCauseIsEmfile) {
  for (int free_fds : {0, 1}) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(20);
      _exit(ChildAcquireWithFreeDescriptors(free_fds, EMFILE));
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << free_fds << " free descriptors (11: acquired, 12: not "
                                      << "EMFILE, 13: the sysctl hint)";
  }
}

// The uffd reader thread's stack pointer while it is in a system call (from
// /proc/self/task/<tid>/syscall: number, six arguments, sp, pc); 0 while it
// is not found there.
uintptr_t ReaderStackPointer() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  uintptr_t sp = 0;
  while (dirent* entry = readdir(dir)) {
    std::string task = std::string("/proc/self/task/") + entry->d_name;
    std::ifstream comm(task + "/comm");
    std::string name;
    if (!std::getline(comm, name) || name != "mrcache-uffd") continue;
    std::ifstream syscall(task + "/syscall");
    std::string line;
    std::getline(syscall, line);
    std::istringstream fields(line);
    std::string field[9];
    int n = 0;
    while (n < 9 && fields >> field[n]) ++n;
    if (n == 9 && field[0] != "running" && field[0] != "-1") {
      sp = static_cast<uintptr_t>(std::stoull(field[7], nullptr, 16));
    }
  }
  closedir(dir);
  return sp;
}

// In a child (a hang ends in SIGALRM): enables uffd, watches a page of the
// reader's own stack (the whole stack mapping is registered), and disables.
// 0 if Disable returned.
int ChildDisableWithTheReadersStackWatched() {
  alarm(10);
  if (!uffd_monitor::Enable().ok()) return 11;
  uintptr_t sp = 0;
  for (int i = 0; i < 1000 && (sp = ReaderStackPointer()) == 0; ++i) usleep(1000);
  if (sp == 0) return 12;
  void* page = reinterpret_cast<void*>(sp & ~uintptr_t{4095});
  if (uffd_monitor::Watch(page, 4096) != 0) return 13;
  uffd_monitor::Disable();  // the exiting reader madvises its stack's unused part
  return 0;
}

TEST(UffdMonitorDisableTest, ReaderExitReleasingWatchedMemoryDoesNotBlockDisable) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(ChildDisableWithTheReadersStackWatched());
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(WIFSIGNALED(status)) << "Disable hung (signal " << WTERMSIG(status) << ")";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "11: Enable failed, 12: reader not found, 13: Watch failed";
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
