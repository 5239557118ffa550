// The patch monitor's safety rules: it patches only the code it expects,
// refuses entries someone already patched, and restores the bytes it replaced.
#include "mrcache/monitors/patch_monitor.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "gtest/gtest.h"
#include "mrcache/errno_status.h"
#include "mrcache/monitors/monitor.h"
#include "mrcache/monitors/raw_syscall.h"
#include "tests/monitors/monitor_expectations.h"
#include "tests/monitors/recording_listener.h"
#include "tests/monitors/release_ways.h"

extern "C" void* __curbrk;

namespace mrcache {
namespace testing {
namespace {

using patch_monitor::ApplyPatch;
using patch_monitor::PatchSite;
using patch_monitor::RemovePatch;

// `mov eax, 42; ret; nop; nop`: a function whose entry looks like a syscall
// wrapper's first instruction.
constexpr uint8_t kFakeCode[8] = {0xb8, 0x2a, 0x00, 0x00, 0x00, 0xc3, 0x90, 0x90};

int ReturnsSeven() { return 7; }

class FakeFunction {
 public:
  explicit FakeFunction(const uint8_t (&code)[8]) {
    page_ = static_cast<uint8_t*>(
        mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    memcpy(page_, code, 8);
    mprotect(page_, 4096, PROT_READ | PROT_EXEC);
  }
  ~FakeFunction() { munmap(page_, 4096); }
  void* entry() const { return page_; }
  int Call() const { return reinterpret_cast<int (*)()>(page_)(); }
  bool Holds(const uint8_t (&code)[8]) const { return memcmp(page_, code, 8) == 0; }

 private:
  uint8_t* page_;
};

TEST(PatchMonitorTest, PatchedEntryJumpsToTheHandler) {
  FakeFunction f(kFakeCode);
  ASSERT_EQ(f.Call(), 42);
  PatchSite site;
  ASSERT_TRUE(
      ApplyPatch("fake", f.entry(), kFakeCode, reinterpret_cast<void*>(&ReturnsSeven), &site).ok());
  EXPECT_EQ(f.Call(), 7);
  ASSERT_TRUE(RemovePatch(&site).ok());
}

TEST(PatchMonitorTest, RemoveRestoresTheOriginalBytes) {
  FakeFunction f(kFakeCode);
  PatchSite site;
  ASSERT_TRUE(
      ApplyPatch("fake", f.entry(), kFakeCode, reinterpret_cast<void*>(&ReturnsSeven), &site).ok());
  EXPECT_FALSE(f.Holds(kFakeCode));
  ASSERT_TRUE(RemovePatch(&site).ok());
  EXPECT_TRUE(f.Holds(kFakeCode));
  EXPECT_EQ(f.Call(), 42);
}

TEST(PatchMonitorTest, RefusesToPatchAnEntryTwice) {
  FakeFunction f(kFakeCode);
  PatchSite first, second;
  ASSERT_TRUE(
      ApplyPatch("fake", f.entry(), kFakeCode, reinterpret_cast<void*>(&ReturnsSeven), &first)
          .ok());
  absl::Status s =
      ApplyPatch("fake", f.entry(), kFakeCode, reinterpret_cast<void*>(&ReturnsSeven), &second);
  EXPECT_EQ(StatusToErrno(s), ENOTSUP);
  EXPECT_NE(s.message().find("fake"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("jump"), absl::string_view::npos) << s;
  EXPECT_FALSE(second.applied);
  ASSERT_TRUE(RemovePatch(&first).ok());
  EXPECT_TRUE(f.Holds(kFakeCode));
}

int ReturnsNine() { return 9; }

TEST(PatchMonitorTest, ChainsOverAnotherTrackersJumpToItsHook) {
  // What UCX's bistro leaves on an entry: `movabs r11, hook; jmp r11`.
  uint8_t foreign[16] = {0x49, 0xbb, 0, 0, 0, 0, 0, 0, 0, 0, 0x41, 0xff, 0xe3, 0xcc, 0xcc, 0xcc};
  void* hook = reinterpret_cast<void*>(&ReturnsNine);
  memcpy(foreign + 2, &hook, 8);
  uint8_t* page = static_cast<uint8_t*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(page, MAP_FAILED);
  memcpy(page, foreign, sizeof(foreign));
  mprotect(page, 4096, PROT_READ | PROT_EXEC);
  auto call = [page] { return reinterpret_cast<int (*)()>(page)(); };
  ASSERT_EQ(call(), 9);
  PatchSite site;
  absl::Status s =
      ApplyPatch("munmap", page, kFakeCode, reinterpret_cast<void*>(&ReturnsSeven), &site);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(site.next, hook) << "the handler calls the other tracker's hook after reporting";
  EXPECT_EQ(call(), 7);
  ASSERT_TRUE(RemovePatch(&site).ok());
  EXPECT_EQ(memcmp(page, foreign, sizeof(foreign)), 0) << "the other tracker's jump is restored";
  EXPECT_EQ(call(), 9);
  munmap(page, 4096);
}

TEST(PatchMonitorTest, RefusesAJumpItCannotFollow) {
  // `jmp rel8` into the function's own padding: not a hook we can call.
  constexpr uint8_t kShortJump[8] = {0xeb, 0x31, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48};
  FakeFunction f(kShortJump);
  PatchSite site;
  absl::Status s =
      ApplyPatch("munmap", f.entry(), kFakeCode, reinterpret_cast<void*>(&ReturnsSeven), &site);
  EXPECT_EQ(StatusToErrno(s), ENOTSUP);
  EXPECT_NE(s.message().find("refusing to patch munmap"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("already starts with a jump"), absl::string_view::npos) << s;
  EXPECT_TRUE(f.Holds(kShortJump));
}

TEST(PatchMonitorTest, RefusesUnexpectedCode) {
  constexpr uint8_t kOther[8] = {0x55, 0x48, 0x89, 0xe5, 0x90, 0x90, 0x5d, 0xc3};
  FakeFunction f(kOther);
  PatchSite site;
  absl::Status s =
      ApplyPatch("madvise", f.entry(), kFakeCode, reinterpret_cast<void*>(&ReturnsSeven), &site);
  EXPECT_EQ(StatusToErrno(s), ENOTSUP);
  EXPECT_NE(s.message().find("not the expected glibc 2.36 code"), absl::string_view::npos) << s;
  EXPECT_TRUE(f.Holds(kOther));
}

TEST(PatchMonitorTest, RemoveLeavesAnEntrySomeoneElsePatchedOver) {
  FakeFunction f(kFakeCode);
  PatchSite site;
  ASSERT_TRUE(
      ApplyPatch("fake", f.entry(), kFakeCode, reinterpret_cast<void*>(&ReturnsSeven), &site).ok());
  constexpr uint8_t kOverwritten[8] = {0xff, 0x25, 0, 0, 0, 0, 0, 0};
  mprotect(f.entry(), 4096, PROT_READ | PROT_WRITE | PROT_EXEC);
  memcpy(f.entry(), kOverwritten, 8);
  absl::Status s = RemovePatch(&site);
  EXPECT_EQ(StatusToErrno(s), EBUSY) << s;
  EXPECT_TRUE(f.Holds(kOverwritten));
}

const uint8_t* LibcEntry(const char* name) {
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  void* p = dlsym(libc, name);
  dlclose(libc);
  return static_cast<const uint8_t*>(p);
}

TEST(PatchMonitorTest, InstallPatchesLibcAndLastReleaseRestoresIt) {
  uint8_t before[8];
  memcpy(before, LibcEntry("munmap"), 8);
  {
    auto a = AcquireMonitor("patch");
    if (MonitorUnavailable(a.status())) GTEST_SKIP() << a.status();
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = AcquireMonitor("patch");  // shares the installation
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(LibcEntry("munmap")[0], 0xe9);
    a->reset();
    EXPECT_EQ(LibcEntry("munmap")[0], 0xe9) << "still leased by b";
  }
  EXPECT_EQ(memcmp(LibcEntry("munmap"), before, 8), 0);
}

TEST(PatchMonitorTest, RefusesLibcEntryThatIsAlreadyPatched) {
  auto lease = AcquireMonitor("patch");
  if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
  ASSERT_TRUE(lease.ok()) << lease.status();
  constexpr uint8_t kGlibcMunmap[8] = {0xb8, 0x0b, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48};
  PatchSite site;
  absl::Status s = ApplyPatch("munmap", const_cast<uint8_t*>(LibcEntry("munmap")), kGlibcMunmap,
                              reinterpret_cast<void*>(&ReturnsSeven), &site);
  EXPECT_EQ(StatusToErrno(s), ENOTSUP) << s;
  EXPECT_FALSE(site.applied);
}

TEST(PatchMonitorTest, SbrkSeesTheBreakTheBrkHandlerSet) {
  auto lease = AcquireMonitor("patch");
  if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
  ASSERT_TRUE(lease.ok()) << lease.status();
  char* start = static_cast<char*>(sbrk(0));
  ASSERT_EQ(sbrk(8192), start);
  EXPECT_EQ(sbrk(0), start + 8192);
  ASSERT_EQ(brk(start), 0);  // through the patched entry
  EXPECT_EQ(sbrk(0), start);
}

// A tracker that patches libc's brk after the monitor did, as UCX's bistro
// hooks do when UCX is loaded after mrcache: `movabs r11, hook; jmp r11`
// written between mprotect(RWX) and mprotect(R+X), a hook that counts its
// calls and sets the break with an inline system call, keeping glibc's
// __curbrk as glibc's brk does (as UCX's does; sbrk relies on it).
int g_late_tracker_calls = 0;
int LateTrackerBrk(void* addr) {
  ++g_late_tracker_calls;
  long result = RawSyscall(SYS_brk, reinterpret_cast<long>(addr));
  __curbrk = reinterpret_cast<void*>(result);
  return result >= reinterpret_cast<long>(addr) ? 0 : -1;
}

class LateTrackerOnBrk {
 public:
  // `glibc_code`: the entry's first 16 bytes before anyone patched it, put
  // back at destruction.
  explicit LateTrackerOnBrk(const uint8_t (&glibc_code)[16])
      : entry_(const_cast<uint8_t*>(LibcEntry("brk"))) {
    memcpy(saved_, glibc_code, sizeof(saved_));
    uint8_t jump[16] = {0x49, 0xbb, 0, 0, 0, 0, 0, 0, 0, 0, 0x41, 0xff, 0xe3, 0xcc, 0xcc, 0xcc};
    void* hook = reinterpret_cast<void*>(&LateTrackerBrk);
    memcpy(jump + 2, &hook, 8);
    memcpy(jump_, jump, sizeof(jump_));
    Write(jump_);
  }
  // Puts glibc's code back (the monitor has let go of the entry by then).
  ~LateTrackerOnBrk() { Write(saved_); }
  bool EntryHoldsItsJump() const { return memcmp(entry_, jump_, sizeof(jump_)) == 0; }
  bool EntryHoldsAJumpToUs() const { return entry_[0] == 0xe9; }

 private:
  void Write(const uint8_t (&code)[16]) {
    void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(entry_) & ~uintptr_t{4095});
    ASSERT_EQ(mprotect(page, 8192, PROT_READ | PROT_WRITE | PROT_EXEC), 0);
    memcpy(entry_, code, sizeof(code));
    ASSERT_EQ(mprotect(page, 8192, PROT_READ | PROT_EXEC), 0);
  }
  uint8_t* entry_;
  uint8_t saved_[16];
  uint8_t jump_[16];
};

TEST(PatchMonitorTest, PutsItsJumpBackOverATrackerThatPatchesAfterIt) {
  char* start = static_cast<char*>(sbrk(0));
  uint8_t glibc_brk[16];
  memcpy(glibc_brk, LibcEntry("brk"), sizeof(glibc_brk));
  {
    auto lease = AcquireMonitor("patch");
    if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
    ASSERT_TRUE(lease.ok()) << lease.status();
    LateTrackerOnBrk tracker(glibc_brk);
    EXPECT_TRUE(tracker.EntryHoldsAJumpToUs()) << "mprotect(R+X) put the monitor's jump back";
    RecordingListener listener;
    ASSERT_EQ(sbrk(8192), start);
    listener.Clear();
    g_late_tracker_calls = 0;
    ASSERT_EQ(brk(start), 0);
    EXPECT_EQ(g_late_tracker_calls, 1) << "the tracker still sees the call";
    EXPECT_TRUE(listener.Saw(start, 8192)) << "and so does the monitor";
    lease->reset();
    EXPECT_TRUE(tracker.EntryHoldsItsJump()) << "the last release restores the tracker's jump";
  }
  EXPECT_EQ(memcmp(LibcEntry("brk"), glibc_brk, sizeof(glibc_brk)), 0);
}

TEST(PatchMonitorTest, HandlersSetErrnoLikeGlibc) {
  auto lease = AcquireMonitor("patch");
  if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
  ASSERT_TRUE(lease.ok()) << lease.status();
  errno = 0;
  EXPECT_EQ(munmap(reinterpret_cast<void*>(4097), 4096), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 1), MAP_FAILED);
  EXPECT_EQ(errno, EINVAL);
}

TEST(PatchMonitorTest, GlibcFreeOfALargeChunkIsReported) {
  if (!GlibcMallocIsAllocator()) GTEST_SKIP() << "malloc is not glibc's (sanitizer build)";
  auto lease = AcquireMonitor("patch");
  if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
  ASSERT_TRUE(lease.ok()) << lease.status();
  RecordingListener listener;
  for (int i = 0; i < 10; ++i) {
    void* p = malloc(64 << 20);  // above glibc's largest mmap threshold
    memset(p, 1, 4096);
    listener.Clear();
    uintptr_t where = reinterpret_cast<uintptr_t>(p);  // p is dangling after free
    free(p);
    EXPECT_TRUE(listener.SawAddress(where, 64 << 20)) << "free number " << i;
  }
}

// glibc's syscall(): a 2-byte jump at the entry while patched (the 5-byte
// jump goes into the padding after the function), the original code after.
TEST(PatchMonitorTest, SyscallEntryIsPatchedWhileInstalledAndRestoredAfter) {
  uint8_t before[8];
  memcpy(before, LibcEntry("syscall"), 8);
  {
    auto lease = AcquireMonitor("patch");
    if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
    ASSERT_TRUE(lease.ok()) << lease.status();
    EXPECT_EQ(LibcEntry("syscall")[0], 0xeb);
    EXPECT_EQ(memcmp(LibcEntry("syscall") + 2, before + 2, 6), 0) << "only 2 bytes change";
  }
  EXPECT_EQ(memcmp(LibcEntry("syscall"), before, 8), 0);
}

TEST(PatchMonitorTest, SyscallMunmapIsReportedLikeMunmap) {
  auto lease = AcquireMonitor("patch");
  if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
  ASSERT_TRUE(lease.ok()) << lease.status();
  RecordingListener listener;
  constexpr size_t kLen = 64 << 10;
  void* p = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  uintptr_t where = reinterpret_cast<uintptr_t>(p);
  listener.Clear();
  ASSERT_EQ(syscall(SYS_munmap, p, kLen), 0);
  EXPECT_TRUE(listener.SawAddress(where, kLen));
}

TEST(PatchMonitorTest, SyscallMadviseAndMremapAreReportedLikeTheCalls) {
  auto lease = AcquireMonitor("patch");
  if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
  ASSERT_TRUE(lease.ok()) << lease.status();
  RecordingListener listener;
  constexpr size_t kLen = 64 << 10;
  char* p = static_cast<char*>(
      mmap(nullptr, 2 * kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(p, MAP_FAILED);
  listener.Clear();
  ASSERT_EQ(syscall(SYS_madvise, p, kLen, MADV_DONTNEED), 0);
  EXPECT_TRUE(listener.Saw(p, kLen));
  listener.Clear();
  ASSERT_EQ(syscall(SYS_madvise, p, kLen, MADV_WILLNEED), 0);
  EXPECT_FALSE(listener.Saw(p, kLen)) << "WILLNEED keeps the pages";
  listener.Clear();
  ASSERT_EQ(syscall(SYS_mremap, p, 2 * kLen, kLen, 0), reinterpret_cast<long>(p));
  EXPECT_TRUE(listener.Saw(p + kLen, kLen)) << "the shrunk tail";
  munmap(p, kLen);
}

TEST(PatchMonitorTest, SyscallBrkReportsTheBreakItLowers) {
  auto lease = AcquireMonitor("patch");
  if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
  ASSERT_TRUE(lease.ok()) << lease.status();
  RecordingListener listener;
  char* start = static_cast<char*>(sbrk(0));
  ASSERT_EQ(sbrk(8192), start);
  listener.Clear();
  // The raw system call's result (the new break), not glibc brk()'s 0.
  EXPECT_EQ(syscall(SYS_brk, start), reinterpret_cast<long>(start));
  EXPECT_TRUE(listener.Saw(start, 8192));
  ASSERT_EQ(brk(start), 0);  // glibc's __curbrk follows again
  EXPECT_EQ(sbrk(0), start);
}

TEST(PatchMonitorTest, SyscallSetsErrnoLikeGlibc) {
  auto lease = AcquireMonitor("patch");
  if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
  ASSERT_TRUE(lease.ok()) << lease.status();
  errno = 0;
  EXPECT_EQ(syscall(SYS_munmap, 4097, 4096), -1) << "a reported number";
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(syscall(SYS_close, -1), -1) << "a number that passes through";
  EXPECT_EQ(errno, EBADF);
  EXPECT_EQ(syscall(SYS_getpid), getpid());
}

// process_vm_readv takes six arguments: the copy proves the first five, and
// flags (the sixth, on syscall()'s stack) must be 0 or EINVAL.
TEST(PatchMonitorTest, SyscallPassesAllSixArgumentsThrough) {
  auto lease = AcquireMonitor("patch");
  if (MonitorUnavailable(lease.status())) GTEST_SKIP() << lease.status();
  ASSERT_TRUE(lease.ok()) << lease.status();
  char from[16] = "six arguments";
  char to[16] = {};
  struct iovec local = {to, sizeof(to)};
  struct iovec remote = {from, sizeof(from)};
  EXPECT_EQ(syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0),
            static_cast<long>(sizeof(from)));
  EXPECT_STREQ(to, "six arguments");
  errno = 0;
  EXPECT_EQ(syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 1), -1);
  EXPECT_EQ(errno, EINVAL);
  // A reported number with six arguments: mmap MAP_FIXED over p, offset 0.
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  RecordingListener listener;
  EXPECT_EQ(syscall(SYS_mmap, p, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
            reinterpret_cast<long>(p));
  EXPECT_TRUE(listener.Saw(p, 4096));
  munmap(p, 4096);
}

}  // namespace
}  // namespace testing
}  // namespace mrcache
