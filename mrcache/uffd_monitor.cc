#include "mrcache/uffd_monitor.h"

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

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "mrcache/errno_status.h"
#include "mrcache/fork_guard.h"
#include "mrcache/memory_events.h"
#include "mrcache/monitor_sync.h"

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
std::mutex& WatchMutex() {
  static std::mutex* m = new std::mutex;
  return *m;
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
            Report(m.arg.remove.start, m.arg.remove.end);
            break;
          case UFFD_EVENT_REMOVE:
            Report(m.arg.remove.start, m.arg.remove.end);
            break;
          case UFFD_EVENT_REMAP:
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
  return arg;
}

int OpenUffd(int* err) {
  int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd >= 0) return fd;
  *err = errno;
  if (errno == EPERM) {
    fd = static_cast<int>(
        syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    if (fd < 0) *err = errno;
  }
  return fd;
}

// Adds `delta` to the count of [start, end) and returns via `zeroed` the
// subranges whose count dropped to zero. Requires WatchMutex.
template <typename Fn>
void AddCount(uintptr_t start, uintptr_t end, int delta, Fn on_zero) {
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
  uintptr_t zero_start = 0;
  bool in_zero = false;
  for (auto it = counts.find(start); it != counts.end() && it->first < end; ++it) {
    int before = it->second;
    it->second = before + delta < 0 ? 0 : before + delta;
    bool now_zero = before > 0 && it->second == 0;
    if (now_zero && !in_zero) {
      zero_start = it->first;
      in_zero = true;
    } else if (!now_zero && in_zero) {
      on_zero(zero_start, it->first);
      in_zero = false;
    }
  }
  if (in_zero) on_zero(zero_start, end);
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
  return g_enabled.load(std::memory_order_acquire) &&
         ForkGeneration() == g_enabled_fork_generation;
}

}  // namespace

absl::Status Enable() {
  int err = 0;
  int fd = OpenUffd(&err);
  if (fd < 0) {
    return ErrnoStatus(ENOTSUP, "uffd monitor: userfaultfd unavailable (" +
                                    std::string(strerror(err)) +
                                    "; unprivileged use needs vm.unprivileged_userfaultfd=1 "
                                    "or a kernel with UFFD_USER_MODE_ONLY)");
  }
  uffdio_api api;
  memset(&api, 0, sizeof(api));
  api.api = UFFD_API;
  api.features = kFeatures;
  if (ioctl(fd, UFFDIO_API, &api) != 0 || (api.features & kFeatures) != kFeatures ||
      (api.ioctls & (uint64_t{1} << _UFFDIO_REGISTER)) == 0) {
    int e = errno;
    close(fd);
    return ErrnoStatus(ENOTSUP, "uffd monitor: kernel lacks UNMAP/REMOVE/REMAP events or "
                                "write-protect registration (" +
                                    std::string(strerror(e)) + ")");
  }
  int stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop < 0) {
    int e = errno;
    close(fd);
    return ErrnoStatus(e, "uffd monitor: eventfd failed");
  }
  g_uffd = fd;
  g_stop_fd = stop;
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
  // Closing the descriptor drops every registration (and releases any thread
  // that unmapped a watched range after the reader stopped).
  close(g_uffd);
  close(g_stop_fd);
  g_uffd = g_stop_fd = -1;
  std::lock_guard<std::mutex> lock(WatchMutex());
  Counts().clear();
}

bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

void Watch(void* addr, size_t length) {
  uintptr_t start, end;
  if (!PageRange(addr, length, &start, &end)) return;
  std::lock_guard<std::mutex> lock(WatchMutex());
  if (!Usable()) return;
  uffdio_register reg;
  memset(&reg, 0, sizeof(reg));
  reg.range.start = start;
  reg.range.len = end - start;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  if (ioctl(g_uffd, UFFDIO_REGISTER, &reg) != 0) {
    g_watch_failures.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  AddCount(start, end, +1, [](uintptr_t, uintptr_t) {});
}

void Unwatch(void* addr, size_t length) {
  uintptr_t start, end;
  if (!PageRange(addr, length, &start, &end)) return;
  std::lock_guard<std::mutex> lock(WatchMutex());
  if (!Usable()) return;
  AddCount(start, end, -1, [](uintptr_t s, uintptr_t e) {
    uffdio_range r;
    r.start = s;
    r.len = e - s;
    // Fails harmlessly (ENOMEM/EINVAL) where the range is already unmapped.
    ioctl(g_uffd, UFFDIO_UNREGISTER, &r);
  });
}

void LockForFork() { WatchMutex().lock(); }
void UnlockAfterFork() { WatchMutex().unlock(); }

uint64_t WatchFailures() { return g_watch_failures.load(std::memory_order_relaxed); }
uint64_t EventsRead() { return g_events_read.load(std::memory_order_relaxed); }

}  // namespace uffd_monitor
}  // namespace mrcache
