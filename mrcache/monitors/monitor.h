// monitor.h: selecting and installing memory monitors.
//
// A monitor watches the ways memory can disappear (the rows of tests/monitors/README.md) and
// reports them through ReportMemoryRelease (memory_events.h). Installation is
// process-wide and reference-counted: several caches that ask for the same
// monitor share one installation; it is uninstalled (where uninstallable) when
// the last lease is released.
//
// Names (config key `monitor`, env MRCACHE_MONITOR): the rows of the monitor
// table (monitor_table.h). A '+'-separated list selects several (e.g.
// "patch+uffd", "auto+uffd"). `auto` is patch (else symbols) plus jemalloc
// when it is the allocator: every release that goes through libc. `uffd` is
// opt-in (`auto+uffd`): it alone sees an inline `syscall` instruction. One
// exception: in a process with a sanitizer runtime (SanitizerRuntime()),
// whose allocator maps and unmaps with inline system calls, `auto` adds uffd
// (logged once per process; mrcache-info shows it). Monitors named
// explicitly must install (else the error); `auto`'s are best effort, and
// what it could not install is the lease's shortfall().
#ifndef MRCACHE_MONITOR_H_
#define MRCACHE_MONITOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace mrcache {

// Ranges a monitor that watches by range (uffd) could not watch, by cause
// (uffd_monitor.h). `total` is the sum of the others.
struct WatchFailureCounts {
  uint64_t total = 0;
  uint64_t enomem = 0;     // part of the range unmapped, or the kernel out of memory
  uint64_t ebusy = 0;      // the application watches that memory with its own userfaultfd
  uint64_t eperm = 0;      // refused by the kernel
  uint64_t einval = 0;     // memory userfaultfd cannot track (most file mappings, SysV shm)
  uint64_t map_limit = 0;  // not watched, to keep the map count below its limit
  uint64_t other = 0;      // any other errno (ECHILD: a cache used in a fork child)
};

// What MonitorLease::Watch found.
enum class WatchResult {
  // Every monitor that watches by range watches it (or none of them is in
  // effect).
  kWatched,
  // Part of the range was not mapped when a monitor looked (ENOMEM): the
  // memory is changing under the caller, and a registration made now may
  // hold pages that were replaced unseen.
  kUnmapped,
  // A monitor could not watch it for any other cause (EINVAL: memory
  // userfaultfd cannot track, EBUSY, EPERM, the map-count limit, ...): a
  // release there may reach no report of that monitor, so a registration
  // of it must serve one get alone and never be cached.
  kUnwatchable,
};

class MonitorLease {
 public:
  virtual ~MonitorLease() = default;
  // The monitors actually in effect, e.g. "none" or "patch+uffd".
  virtual std::string name() const = 0;
  // Monitors that watch specific ranges (uffd) are told of each registered
  // region. Called outside every cache lock, possibly from several threads.
  // Every Watch is matched by an Unwatch of the same range, whether it
  // succeeded or not; a range that could not be watched is counted in
  // watch_failures(). kUnmapped (some monitor found part of the range
  // unmapped) takes precedence over kUnwatchable: the caller must not keep
  // a registration made now (cache_impl.cc treats the miss as spoiled); on
  // kUnwatchable it may use it for the one get that asked, never cache it.
  virtual WatchResult Watch(void* addr, size_t length) { return WatchResult::kWatched; }
  virtual void Unwatch(void* addr, size_t length) {}
  // True if Watch/Unwatch do anything (some monitor in effect watches by
  // range); constant for the lease's life. A caller may skip both calls
  // when it is false: the miss path then pays nothing for them.
  virtual bool watches_ranges() const { return false; }
  // The Watch calls of this lease that failed, by cause (never silent: the
  // cache reports them in its stats).
  virtual WatchFailureCounts watch_failures() const { return {}; }
  // True if memory can disappear without this monitor seeing it (e.g. "none").
  virtual bool blind() const { return false; }
  // True if every release of registered memory is reported, including the
  // ones libc makes internally (heap trims): `patch` (every libc system call)
  // or `uffd` (every watched range). Registering memory nobody asked for
  // (bridging, cache_impl.cc) is safe only then.
  virtual bool complete() const { return false; }
  // Empty when the monitors in effect give every coverage the name promised;
  // otherwise which monitor of `auto` is missing, its real cause (message
  // and errno) and what that leaves unreported. Only `auto` promises more
  // than what was installed.
  virtual std::string shortfall() const { return std::string(); }
};

// EINVAL for an unknown name; ENOTSUP (with the reason) when the monitor
// cannot be installed in this process. `auto` stands for
// AutoMonitorNames(SanitizerRuntime()); the first lease of a process whose
// `auto` adds uffd for a sanitizer logs one line (mrcache/internal/log.h) saying so.
absl::StatusOr<std::unique_ptr<MonitorLease>> AcquireMonitor(absl::string_view name);

// The sanitizer runtime loaded in this process ("AddressSanitizer",
// "HWAddressSanitizer", "ThreadSanitizer", "MemorySanitizer" or
// "LeakSanitizer"), or "" if none is. Found by its initialisation symbol
// (__asan_init, ...) through dlsym(RTLD_DEFAULT), so a sanitized application
// that links an uninstrumented libmrcache is found too. These runtimes'
// allocators map and unmap with inline system calls, which only uffd sees.
// Not hook context (dlsym).
std::string SanitizerRuntime();

// The monitors `auto` stands for, in the order they are tried, when
// `sanitizer` (SanitizerRuntime()'s answer) is loaded: patch and jemalloc
// (symbols when patch cannot be installed), plus uffd when `sanitizer` is
// not empty.
std::vector<std::string> AutoMonitorNames(absl::string_view sanitizer);

// AcquireMonitor(name) with `sanitizer` in place of SanitizerRuntime() (how
// tests choose for a process with or without a sanitizer), and without the
// log line. When `auto` adds uffd for `sanitizer` and uffd cannot be
// installed, the shortfall() names the sanitizer and uffd's cause.
absl::StatusOr<std::unique_ptr<MonitorLease>> AcquireMonitorFor(absl::string_view name,
                                                                absl::string_view sanitizer);

}  // namespace mrcache

#endif  // MRCACHE_MONITOR_H_
