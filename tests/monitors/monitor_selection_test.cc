// Selecting monitors by name, sharing one installation, and fork.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/fork_guard.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/monitors/monitor_table.h"
#include "mrcache/monitors/symbols_monitor.h"
#include "mrcache/monitors/uffd_monitor.h"
#include "tests/monitors/monitor_expectations.h"

namespace mrcache {
namespace {

TEST(MonitorSelectionTest, UnknownNameIsEinvalNamingTheChoices) {
  auto lease = AcquireMonitor("sybmols");
  ASSERT_FALSE(lease.ok());
  EXPECT_EQ(StatusToErrno(lease.status()), EINVAL);
  EXPECT_NE(lease.status().message().find(MonitorNames("|")), absl::string_view::npos);
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

// The cache calls Watch/Unwatch on every miss only where they do something.
TEST(MonitorSelectionTest, OnlyAMonitorWatchingByRangeWantsWatchCalls) {
  for (const char* name : {"none", "symbols"}) {
    auto lease = AcquireMonitor(name);
    ASSERT_TRUE(lease.ok()) << name << ": " << lease.status();
    EXPECT_FALSE((*lease)->watches_ranges()) << name;
  }
  auto patch = AcquireMonitor("patch");
  if (!testing::MonitorUnavailable(patch.status())) {
    ASSERT_TRUE(patch.ok()) << patch.status();
    EXPECT_FALSE((*patch)->watches_ranges());
  }
  auto uffd = AcquireMonitor("symbols+uffd");
  ASSERT_TRUE(uffd.ok()) << uffd.status();
  EXPECT_TRUE((*uffd)->watches_ranges()) << (*uffd)->name();
}

TEST(MonitorSelectionTest, PlusListInstallsEachMonitorOnce) {
  auto lease = AcquireMonitor("symbols+uffd+symbols");
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ((*lease)->name(), "symbols+uffd");
}

TEST(MonitorSelectionTest, AutoIsPatchWithoutUffd) {
  bool patch_available = !testing::MonitorUnavailable(AcquireMonitor("patch").status());
  auto lease = AcquireMonitorFor("auto", "");  // a process without a sanitizer runtime
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

bool HasUffd(const MonitorLease& lease) {
  for (absl::string_view part : absl::StrSplit(lease.name(), '+')) {
    if (part == "uffd") return true;
  }
  return false;
}

TEST(MonitorSelectionTest, AutoAddsUffdOnlyForASanitizer) {
  EXPECT_EQ(AutoMonitorNames(""), (std::vector<std::string>{"patch", "jemalloc"}));
  EXPECT_EQ(AutoMonitorNames("AddressSanitizer"),
            (std::vector<std::string>{"patch", "jemalloc", "uffd"}));
}

TEST(MonitorSelectionTest, AutoInAProcessWithASanitizerRuntimeIncludesUffd) {
  bool patch_available = !testing::MonitorUnavailable(AcquireMonitor("patch").status());
  for (const char* sanitizer : {"AddressSanitizer", "ThreadSanitizer"}) {
    auto lease = AcquireMonitorFor("auto", sanitizer);
    ASSERT_TRUE(lease.ok()) << sanitizer << ": " << lease.status();
    EXPECT_EQ((*lease)->name(), patch_available ? "patch+uffd" : "symbols+uffd") << sanitizer;
    EXPECT_TRUE((*lease)->complete()) << sanitizer;
    EXPECT_EQ((*lease)->shortfall().empty(), patch_available) << (*lease)->shortfall();
  }
}

TEST(MonitorSelectionTest, ASanitizerChangesNoMonitorNamedExplicitly) {
  for (const char* name : {"none", "symbols", "symbols+uffd", "uffd+auto"}) {
    auto plain = AcquireMonitorFor(name, "");
    auto sanitized = AcquireMonitorFor(name, "AddressSanitizer");
    ASSERT_TRUE(plain.ok() && sanitized.ok()) << name;
    if (std::string(name) == "uffd+auto") {
      EXPECT_EQ((*sanitized)->name(), (*plain)->name()) << "uffd is installed once";
    } else {
      EXPECT_EQ((*sanitized)->name(), name);
    }
  }
}

// In a child without free file descriptors: 0 if auto's lease exists without
// uffd and its shortfall names the sanitizer and EMFILE, else why not.
int ChildAutoForASanitizerWithoutFreeDescriptors() {
  rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 10;
  lim.rlim_cur = 64;
  if (setrlimit(RLIMIT_NOFILE, &lim) != 0) return 10;
  while (open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0) {
  }
  auto lease = AcquireMonitorFor("auto", "AddressSanitizer");
  if (!lease.ok()) return 11;
  if (HasUffd(**lease)) return 12;
  const std::string shortfall = (*lease)->shortfall();
  if (shortfall.find("uffd: ") == std::string::npos ||
      shortfall.find("AddressSanitizer") == std::string::npos ||
      shortfall.find("(errno " + std::to_string(EMFILE) + ")") == std::string::npos) {
    std::fprintf(stderr, "shortfall: %s\n", shortfall.c_str());
    return 13;
  }
  return 0;
}

TEST(MonitorSelectionTest, AutoThatCannotAddUffdForASanitizerSaysWhy) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);
    _exit(ChildAutoForASanitizerWithoutFreeDescriptors());
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "11: auto failed, 12: uffd installed anyway, 13: the shortfall lacks the cause";
}

// The build this test runs in: its own sanitizer runtime is found, and the
// default `auto` includes uffd exactly when one is.
bool BuiltWithSanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  return false;
#endif
}

TEST(MonitorSelectionTest, SanitizerRuntimeIsTheOneThisTestIsBuiltWith) {
#if defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(SanitizerRuntime(), "AddressSanitizer");
#elif defined(__SANITIZE_THREAD__)
  EXPECT_EQ(SanitizerRuntime(), "ThreadSanitizer");
#else
  EXPECT_EQ(SanitizerRuntime(), "");
#endif
}

TEST(MonitorSelectionTest, AutoIncludesUffdExactlyInASanitizerBuild) {
  auto lease = AcquireMonitor("auto");
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(HasUffd(**lease), BuiltWithSanitizer()) << (*lease)->name();
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
