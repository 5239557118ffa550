#include "mrcache/monitors/uffd_monitor.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <time.h>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "mrcache/errno_status.h"
#include "mrcache/monitors/fork_guard.h"
#include "mrcache/monitors/mapping_bounds.h"
#include "mrcache/monitors/memory_events.h"
#include "mrcache/monitors/monitor_sync.h"

namespace mrcache {
namespace uffd_monitor {
namespace {

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

constexpr uint64_t kFeatures = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE |
                               UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_PAGEFAULT_FLAG_WP;

std::atomic<bool> g_enabled{false};
std::atomic<uint64_t> g_watch_failures{0};
std::atomic<uint64_t> g_events_read{0};
int g_uffd = -1;
int g_stop_fd = -1;
pthread_t g_reader;
uint64_t g_enabled_fork_generation = 0;

// Step function: page address -> how many Watch calls cover [key, next key).
// Guarded by WatchMutex. Zero steps are erased.
std::map<uintptr_t, int>& Counts() {
  static auto* m = new std::map<uintptr_t, int>;
  return *m;
}
// The spans registered with the kernel: start -> end, disjoint. Guarded by
// WatchMutex.
std::map<uintptr_t, uintptr_t>& Spans() {
  static auto* m = new std::map<uintptr_t, uintptr_t>;
  return *m;
}
std::mutex& WatchMutex() {
  static std::mutex* m = new std::mutex;
  return *m;
}

// The map-count limit (WatchMutex): the count Watch keeps below, and until
// when (CLOCK_MONOTONIC ns) it adds no span without looking again.
size_t g_max_map_count = 65530;
size_t g_map_count_limit = 65530 * kMapCountPercent / 100;
uint64_t g_over_limit_until_ns = 0;
// A span registration splits at most this many mappings (the application
// changed its mappings between the scan and the ioctl: both ends).
constexpr size_t kMaxSplitsPerSpan = 2;

// ---- the reader's log of what changed registrations -------------------------
//
// Single producer (the reader: no allocation, no lock), single consumer
// (Watch/Unwatch under WatchMutex). The producer writes a slot, then
// publishes it by advancing g_log_head; it overwrites slots the consumer has
// not read once it is kLogSlots ahead, which the consumer detects (the slot
// it read is at least kLogSlots behind the head it loads after reading it:
// seqlock-style, fences on both sides) and answers by forgetting every span.
enum LogKind : uint64_t { kLogUnmap = 1, kLogRemap = 2 };
constexpr uint64_t kLogSlots = 4096;
struct LogSlot {
  std::atomic<uint64_t> kind{0}, a{0}, b{0}, c{0};
};
LogSlot g_log[kLogSlots];
std::atomic<uint64_t> g_log_head{0};
uint64_t g_log_tail = 0;  // WatchMutex

void Log(uint64_t kind, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = g_log_head.load(std::memory_order_relaxed);
  LogSlot& slot = g_log[h % kLogSlots];
  std::atomic_thread_fence(std::memory_order_release);
  slot.kind.store(kind, std::memory_order_relaxed);
  slot.a.store(a, std::memory_order_relaxed);
  slot.b.store(b, std::memory_order_relaxed);
  slot.c.store(c, std::memory_order_relaxed);
  g_log_head.store(h + 1, std::memory_order_release);
}

void Report(uint64_t start, uint64_t end) {
  if (end > start) ReportMemoryRelease(reinterpret_cast<void*>(start), end - start);
}

// A page fault can only come from a write-protected page, which we never
// create; if one arrives anyway, un-protect the page so the thread resumes.
void ResolveFault(int uffd, const uffd_msg& m) {
  long page = getpagesize();
  uffdio_writeprotect wp;
  wp.range.start = m.arg.pagefault.address & ~static_cast<uint64_t>(page - 1);
  wp.range.len = page;
  wp.mode = 0;
  if (ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) != 0) {
    uffdio_range r = wp.range;
    ioctl(uffd, UFFDIO_WAKE, &r);
  }
}

// Releases the userfaultfd's context before the reader exits: dup2 puts a
// duplicate of the stop eventfd in its slot, which drops the last reference
// (every registration goes, and every thread waiting for an event to be read
// is released) while the descriptor number stays taken until Disable closes
// it, so no other file can get that number under Watch's ioctls.
void RetireUffd(int uffd, int stop) {
  while (dup2(stop, uffd) < 0 && (errno == EBUSY || errno == EINTR)) {
  }
}

// The reader. Once it stops reading, a thread that unmaps, moves or
// madvises registered memory waits in the kernel until the userfaultfd is
// released; the thread's own exit does exactly that (glibc madvises the
// unused part of its stack, the sanitizer runtimes unmap their per-thread
// state, which the kernel may have merged into a mapping Watch registered
// whole). So the reader retires the userfaultfd itself, before it returns.
void* ReaderMain(void* arg) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  int uffd = g_uffd, stop = g_stop_fd;
  for (;;) {
    pollfd fds[2] = {{uffd, POLLIN, 0}, {stop, POLLIN, 0}};
    int n = poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) break;
    if ((fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) break;
    BeginLateReports();
    for (;;) {
      uffd_msg msgs[32];
      ssize_t got = read(uffd, msgs, sizeof(msgs));
      if (got <= 0) break;
      size_t count = static_cast<size_t>(got) / sizeof(uffd_msg);
      g_events_read.fetch_add(count, std::memory_order_relaxed);
      for (size_t i = 0; i < count; ++i) {
        const uffd_msg& m = msgs[i];
        switch (m.event) {
          case UFFD_EVENT_UNMAP:
            Log(kLogUnmap, m.arg.remove.start, m.arg.remove.end, 0);
            Report(m.arg.remove.start, m.arg.remove.end);
            break;
          case UFFD_EVENT_REMOVE:
            Report(m.arg.remove.start, m.arg.remove.end);
            break;
          case UFFD_EVENT_REMAP:
            Log(kLogRemap, m.arg.remap.from, m.arg.remap.to, m.arg.remap.len);
            Report(m.arg.remap.from, m.arg.remap.from + m.arg.remap.len);
            break;
          case UFFD_EVENT_PAGEFAULT:
            ResolveFault(uffd, m);
            break;
          default:
            break;
        }
      }
    }
    EndLateReports();
  }
  RetireUffd(uffd, stop);
  return arg;
}

int OpenUffd(int* err) {
  int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd >= 0) return fd;
  *err = errno;
  if (errno == EPERM) {
    fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    // EINVAL: a kernel without UFFD_USER_MODE_ONLY; the cause stays EPERM.
    if (fd < 0 && errno != EINVAL) *err = errno;
  }
  return fd;
}

// Adds `delta` to the count of every page of [start, end) (never below
// zero). Requires WatchMutex.
void AddCount(uintptr_t start, uintptr_t end, int delta) {
  auto& counts = Counts();
  auto split = [&counts](uintptr_t at) {
    auto it = counts.upper_bound(at);
    int value = 0;
    if (it != counts.begin()) {
      auto prev = std::prev(it);
      if (prev->first == at) return;
      value = prev->second;
    }
    counts.emplace(at, value);
  };
  split(start);
  split(end);
  for (auto it = counts.find(start); it != counts.end() && it->first < end; ++it) {
    it->second = it->second + delta < 0 ? 0 : it->second + delta;
  }
  // Erase steps that repeat their predecessor's value (keeps the map minimal).
  auto it = counts.lower_bound(start);
  if (it != counts.begin()) --it;
  while (it != counts.end() && it->first <= end) {
    auto next = std::next(it);
    int prev_value = it == counts.begin() ? 0 : std::prev(it)->second;
    if (it->second == prev_value) counts.erase(it);
    it = next;
  }
}

bool PageRange(void* addr, size_t length, uintptr_t* start, uintptr_t* end) {
  uintptr_t page = static_cast<uintptr_t>(getpagesize());
  uintptr_t s = reinterpret_cast<uintptr_t>(addr);
  if (length == 0 || s + length < s) return false;
  *start = s & ~(page - 1);
  *end = (s + length + page - 1) & ~(page - 1);
  return true;
}

bool Usable() {
  return g_enabled.load(std::memory_order_acquire) && ForkGeneration() == g_enabled_fork_generation;
}

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// vm.max_map_count, or the kernel's default if it cannot be read.
size_t ReadMaxMapCount() {
  size_t value = 65530;
  int fd = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return value;
  char buf[32];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return value;
  size_t parsed = 0;
  for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) {
    parsed = parsed * 10 + static_cast<size_t>(buf[i] - '0');
  }
  return parsed > 0 ? parsed : value;
}

// True if some page of [start, end) has a reference. Requires WatchMutex.
bool AnyReferencedLocked(uintptr_t start, uintptr_t end) {
  auto& counts = Counts();
  auto it = counts.upper_bound(start);
  if (it != counts.begin() && std::prev(it)->second > 0) return true;
  for (; it != counts.end() && it->first < end; ++it) {
    if (it->second > 0) return true;
  }
  return false;
}

// True if registered spans cover every page of [start, end). Requires WatchMutex.
bool CoveredLocked(uintptr_t start, uintptr_t end) {
  auto& spans = Spans();
  auto it = spans.upper_bound(start);
  if (it == spans.begin()) return false;
  --it;
  uintptr_t reached = start;
  for (; it != spans.end() && it->first <= reached; ++it) {
    if (it->second > reached) reached = it->second;
    if (reached >= end) return true;
  }
  return false;
}

// Takes [start, end) out of the registered spans (the kernel dropped it).
// Requires WatchMutex.
void CutSpansLocked(uintptr_t start, uintptr_t end) {
  auto& spans = Spans();
  auto it = spans.upper_bound(start);
  if (it != spans.begin()) --it;
  while (it != spans.end() && it->first < end) {
    uintptr_t s = it->first, e = it->second;
    if (e <= start) {
      ++it;
      continue;
    }
    it = spans.erase(it);
    if (s < start) spans.emplace(s, start);
    if (e > end) it = spans.emplace(end, e).first;
  }
}

// Adds [start, end) to the registered spans, merging the ones it overlaps.
// Requires WatchMutex.
void AddSpanLocked(uintptr_t start, uintptr_t end) {
  auto& spans = Spans();
  auto it = spans.upper_bound(start);
  if (it != spans.begin() && std::prev(it)->second > start) --it;
  while (it != spans.end() && it->first < end) {
    if (it->first < start) start = it->first;
    if (it->second > end) end = it->second;
    it = spans.erase(it);
  }
  spans.emplace(start, end);
}

// Unregisters, whole, every span overlapping [start, end) that no reference
// is left in. Requires WatchMutex.
void ReleaseIdleSpansLocked(uintptr_t start, uintptr_t end) {
  auto& spans = Spans();
  auto it = spans.upper_bound(start);
  if (it != spans.begin() && std::prev(it)->second > start) --it;
  while (it != spans.end() && it->first < end) {
    if (AnyReferencedLocked(it->first, it->second)) {
      ++it;
      continue;
    }
    uffdio_range r;
    r.start = it->first;
    r.len = it->second - it->first;
    // Fails harmlessly (EINVAL) where the span was unmapped meanwhile.
    ioctl(g_uffd, UFFDIO_UNREGISTER, &r);
    it = spans.erase(it);
  }
}

// Applies what the reader logged since the last call. Requires WatchMutex.
void DrainLogLocked() {
  uint64_t head = g_log_head.load(std::memory_order_acquire);
  if (head == g_log_tail) return;
  // Ranges whose spans changed: a cut leaves the rest of a span registered,
  // and a move registers the destination; those nobody watches are dropped.
  std::vector<std::pair<uintptr_t, uintptr_t>> changed;
  bool overflowed = head - g_log_tail > kLogSlots;
  for (uint64_t i = g_log_tail; i < head && !overflowed; ++i) {
    const LogSlot& slot = g_log[i % kLogSlots];
    uint64_t kind = slot.kind.load(std::memory_order_relaxed);
    uint64_t a = slot.a.load(std::memory_order_relaxed);
    uint64_t b = slot.b.load(std::memory_order_relaxed);
    uint64_t c = slot.c.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (g_log_head.load(std::memory_order_relaxed) - i >= kLogSlots) {
      overflowed = true;  // the slot may have been rewritten while read
      break;
    }
    if (kind == kLogUnmap) {
      CutSpansLocked(a, b);
      changed.emplace_back(a, b);
    } else if (kind == kLogRemap) {
      // The registration moved with the mapping: [from, from+len) -> [to, to+len).
      CutSpansLocked(a, a + c);
      CutSpansLocked(b, b + c);
      AddSpanLocked(b, b + c);
      changed.emplace_back(a, a + c);
      changed.emplace_back(b, b + c);
    }
  }
  if (overflowed) {
    // What the kernel still has registered is unknown: forget every span
    // (they stay registered until Disable; Watch registers afresh).
    Spans().clear();
    g_log_tail = g_log_head.load(std::memory_order_acquire);
    return;
  }
  g_log_tail = head;
  // One byte wider on each side: the spans left on either side of a cut.
  for (const auto& c : changed) {
    ReleaseIdleSpansLocked(c.first == 0 ? 0 : c.first - 1, c.second + 1);
  }
}

// Registers the mappings holding [start, end), each whole. 0, an errno
// value, or kMapCountLimit. Requires WatchMutex.
int AddSpansLocked(uintptr_t start, uintptr_t end) {
  const uint64_t now = MonotonicNs();
  if (now < g_over_limit_until_ns) return kMapCountLimit;
  MappingScan scan;
  if (!ScanMappings(start, end, &scan)) return errno != 0 ? errno : EIO;
  if (!scan.covered) return ENOMEM;  // as mmap/mprotect say of unmapped pages
  if (scan.map_count + kMaxSplitsPerSpan >= g_map_count_limit) {
    g_over_limit_until_ns = now + uint64_t{kMapCountRecheckMs} * 1000000u;
    return kMapCountLimit;
  }
  g_over_limit_until_ns = 0;
  uffdio_register reg;
  memset(&reg, 0, sizeof(reg));
  reg.range.start = scan.first;
  reg.range.len = scan.last - scan.first;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  if (ioctl(g_uffd, UFFDIO_REGISTER, &reg) != 0) {
    // Private anonymous memory can always be registered: EINVAL there says
    // the range was unmapped (no mapping left in it) between the scan and the
    // ioctl. Answered as ENOMEM, like the hole check below: the memory is
    // changing, and a miss must not cache a registration of it unwatched
    // (the pages mapped there next would send no event when they go).
    if (errno == EINVAL && scan.anonymous) return ENOMEM;
    return errno;
  }
  AddSpanLocked(scan.first, scan.last);
  // The kernel skips holes: if the range was unmapped between the scan and
  // the registration, part of it may not be registered (and a mapping made
  // there since is not). Un-write-protecting the range (a no-op: nothing is
  // ever write-protected) fails with ENOENT where a mapping in it is not
  // registered with this userfaultfd, or if none is there: the memory is
  // changing (ENOMEM). EAGAIN says only that another event is being
  // delivered (mremap, munmap elsewhere): the registration stands.
  uffdio_writeprotect check;
  check.range.start = start;
  check.range.len = end - start;
  check.mode = 0;
  if (ioctl(g_uffd, UFFDIO_WRITEPROTECT, &check) != 0 && errno != EAGAIN) {
    return errno == ENOENT ? ENOMEM : errno;
  }
  return 0;
}

}  // namespace

absl::Status Enable() {
  int err = 0;
  int fd = OpenUffd(&err);
  if (fd < 0) {
    if (err == EPERM) {
      return ErrnoStatus(EPERM,
                         "uffd monitor: userfaultfd refused to this process (EPERM); "
                         "unprivileged use needs vm.unprivileged_userfaultfd=1 "
                         "or a kernel with UFFD_USER_MODE_ONLY");
    }
    if (err == EMFILE || err == ENFILE) {
      return ErrnoStatus(err, "uffd monitor: no free file descriptor for the userfaultfd (" +
                                  std::string(strerror(err)) +
                                  "); it needs two (the userfaultfd and an eventfd)");
    }
    if (err == ENOSYS) {
      return ErrnoStatus(ENOTSUP, "uffd monitor: this kernel has no userfaultfd (ENOSYS)");
    }
    return ErrnoStatus(err,
                       "uffd monitor: userfaultfd failed (" + std::string(strerror(err)) + ")");
  }
  uffdio_api api;
  memset(&api, 0, sizeof(api));
  api.api = UFFD_API;
  api.features = kFeatures;
  if (ioctl(fd, UFFDIO_API, &api) != 0 || (api.features & kFeatures) != kFeatures ||
      (api.ioctls & (uint64_t{1} << _UFFDIO_REGISTER)) == 0) {
    int e = errno;
    close(fd);
    return ErrnoStatus(ENOTSUP,
                       "uffd monitor: kernel lacks UNMAP/REMOVE/REMAP events or "
                       "write-protect registration (" +
                           std::string(strerror(e)) + ")");
  }
  int stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop < 0) {
    int e = errno;
    close(fd);
    return ErrnoStatus(e, "uffd monitor: eventfd failed (" + std::string(strerror(e)) +
                              (e == EMFILE || e == ENFILE
                                   ? "); it needs two file descriptors (the userfaultfd and an "
                                     "eventfd)"
                                   : ")"));
  }
  g_uffd = fd;
  g_stop_fd = stop;
  {
    std::lock_guard<std::mutex> lock(WatchMutex());
    g_max_map_count = ReadMaxMapCount();
    g_map_count_limit = g_max_map_count * kMapCountPercent / 100;
    g_over_limit_until_ns = 0;
    g_log_head.store(0, std::memory_order_relaxed);  // no reader yet
    g_log_tail = 0;
  }
  int rc = pthread_create(&g_reader, nullptr, &ReaderMain, nullptr);
  if (rc != 0) {
    close(fd);
    close(stop);
    g_uffd = g_stop_fd = -1;
    return ErrnoStatus(rc, "uffd monitor: cannot start the reader thread");
  }
  pthread_setname_np(g_reader, "mrcache-uffd");
  g_enabled_fork_generation = ForkGeneration();
  g_enabled.store(true, std::memory_order_release);
  return absl::OkStatus();
}

void Disable() {
  g_enabled.store(false, std::memory_order_release);
  if (ForkGeneration() == g_enabled_fork_generation) {
    uint64_t one = 1;
    if (write(g_stop_fd, &one, sizeof(one)) == sizeof(one)) pthread_join(g_reader, nullptr);
  }  // in a fork child the reader does not exist: nothing to join
  std::lock_guard<std::mutex> lock(WatchMutex());  // no Watch/Unwatch ioctl in flight
  // The reader retired the userfaultfd (RetireUffd): g_uffd holds a
  // duplicate of the eventfd. In a fork child it is still the inherited
  // userfaultfd; closing it drops the child's reference.
  close(g_uffd);
  close(g_stop_fd);
  g_uffd = g_stop_fd = -1;
  Counts().clear();
  Spans().clear();
}

bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

int Watch(void* addr, size_t length) {
  uintptr_t start, end;
  if (length == 0) return 0;
  if (!PageRange(addr, length, &start, &end)) return EINVAL;
  std::lock_guard<std::mutex> lock(WatchMutex());
  int err = 0;
  if (!g_enabled.load(std::memory_order_acquire)) {
    err = ENOTSUP;
  } else if (ForkGeneration() != g_enabled_fork_generation) {
    err = ECHILD;
  } else {
    DrainLogLocked();
    AddCount(start, end, +1);
    if (!CoveredLocked(start, end)) err = AddSpansLocked(start, end);
  }
  if (err != 0) g_watch_failures.fetch_add(1, std::memory_order_relaxed);
  return err;
}

void Unwatch(void* addr, size_t length) {
  uintptr_t start, end;
  if (!PageRange(addr, length, &start, &end)) return;
  std::lock_guard<std::mutex> lock(WatchMutex());
  if (!Usable()) return;
  DrainLogLocked();
  AddCount(start, end, -1);
  ReleaseIdleSpansLocked(start, end);
}

MapCountInfo MapCount() {
  MapCountInfo info;
  MappingScan scan;
  ScanMappings(0, 0, &scan);
  info.map_count = scan.map_count;
  info.max_map_count = ReadMaxMapCount();
  info.limit = info.max_map_count * kMapCountPercent / 100;
  return info;
}

size_t WatchedSpans() {
  std::lock_guard<std::mutex> lock(WatchMutex());
  return Spans().size();
}

void LockForFork() { WatchMutex().lock(); }
void UnlockAfterFork() { WatchMutex().unlock(); }

uint64_t WatchFailures() { return g_watch_failures.load(std::memory_order_relaxed); }
uint64_t EventsRead() { return g_events_read.load(std::memory_order_relaxed); }

}  // namespace uffd_monitor
}  // namespace mrcache
