// Selecting monitors by name, sharing one installation, and fork.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "gtest/gtest.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/fork_guard.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/monitors/symbols_monitor.h"
#include "mrcache/monitors/uffd_monitor.h"
#include "tests/monitors/monitor_expectations.h"

namespace mrcache {
namespace {

TEST(MonitorSelectionTest, UnknownNameIsEinvalNamingTheChoices) {
  auto lease = AcquireMonitor("sybmols");
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(StatusToErrno(lease.status()), EINVAL);
  EXPECT_NE(lease.status().message().find("none|symbols|patch|uffd|jemalloc|auto"),
            absl::string_view::npos);
}

TEST(MonitorSelectionTest, EmptyPartOfAListIsEinval) {
  EXPECT_EQ(StatusToErrno(AcquireMonitor("patch+").status()), EINVAL);
  EXPECT_EQ(StatusToErrno(AcquireMonitor("").status()), EINVAL);
}

TEST(MonitorSelectionTest, NoneIsBlindAndOthersAreNot) {
  auto none = AcquireMonitor("none");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE((*none)->blind());
  EXPECT_EQ((*none)->name(), "none");
  auto symbols = AcquireMonitor("symbols");
  ASSERT_TRUE(symbols.ok());
  EXPECT_FALSE((*symbols)->blind());
}

TEST(MonitorSelectionTest, PlusListInstallsEachMonitorOnce) {
  auto lease = AcquireMonitor("symbols+uffd+symbols");
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ((*lease)->name(), "symbols+uffd");
}

TEST(MonitorSelectionTest, AutoIsPatchWithoutUffd) {
  bool patch_available = !testing::MonitorUnavailable(AcquireMonitor("patch").status());
  auto lease = AcquireMonitor("auto");
  ASSERT_TRUE(lease.ok()) << lease.status();
  // glibc 2.36: patch can be installed here (not under ThreadSanitizer, where
  // auto falls back to symbols and says so).
  EXPECT_EQ((*lease)->name(), patch_available ? "patch" : "symbols");
  EXPECT_EQ((*lease)->shortfall().empty(), patch_available) << (*lease)->shortfall();
  EXPECT_TRUE((*lease)->complete() || !patch_available);
}

TEST(MonitorSelectionTest, AutoPlusUffdAddsUffd) {
  bool patch_available = !testing::MonitorUnavailable(AcquireMonitor("patch").status());
  auto lease = AcquireMonitor("auto+uffd");
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ((*lease)->name(), patch_available ? "uffd+patch" : "uffd+symbols");
}

TEST(MonitorSelectionTest, ExplicitMonitorsPromiseNoMoreThanTheyInstall) {
  for (const char* name : {"none", "symbols", "uffd", "symbols+uffd"}) {
    auto lease = AcquireMonitor(name);
    ASSERT_TRUE(lease.ok()) << name << ": " << lease.status();
    EXPECT_EQ((*lease)->shortfall(), "") << name;
  }
}

TEST(MonitorSelectionTest, JemallocIsEnotsupWhenJemallocIsNotTheAllocator) {
  auto lease = AcquireMonitor("jemalloc");
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(StatusToErrno(lease.status()), ENOTSUP);
  EXPECT_NE(lease.status().message().find("not this process's allocator"), absl::string_view::npos);
}

TEST(MonitorSelectionTest, LeasesShareOneInstallationUntilTheLastRelease) {
  ASSERT_FALSE(symbols_monitor::Enabled());
  auto a = AcquireMonitor("symbols");
  auto b = AcquireMonitor("symbols");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(symbols_monitor::Enabled());
  a->reset();
  EXPECT_TRUE(symbols_monitor::Enabled());
  b->reset();
  EXPECT_FALSE(symbols_monitor::Enabled());
}

TEST(MonitorSelectionTest, FailedListReleasesWhatItAlreadyInstalled) {
  ASSERT_FALSE(symbols_monitor::Enabled());
  auto lease = AcquireMonitor("symbols+jemalloc");  // jemalloc is not the allocator here
  EXPECT_FALSE(lease.ok());
  EXPECT_FALSE(symbols_monitor::Enabled());
}

TEST(MonitorSelectionTest, ForkGenerationDiffersInTheChild) {
  uint64_t parent = ForkGeneration();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(ForkGeneration() == parent + 1 ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(ForkGeneration(), parent);
}

TEST(MonitorSelectionTest, ChildUnmapsWatchedMemoryWithoutTheParentsReader) {
  auto lease = AcquireMonitor("uffd");
  ASSERT_TRUE(lease.ok()) << lease.status();
  char* p = static_cast<char*>(
      mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  memset(p, 1, 8192);
  (*lease)->Watch(p, 8192);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(10);                 // a child blocked on an event nobody reads dies here
    (*lease)->Watch(p, 4096);  // inert in the child: must not touch the parent
    int rc = munmap(p, 8192);
    _exit(rc == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_EQ(p[0], 1) << "the parent's mapping is untouched";
  (*lease)->Unwatch(p, 8192);
  munmap(p, 8192);
}

}  // namespace
}  // namespace mrcache
