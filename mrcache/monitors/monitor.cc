// monitor.cc: parsing monitor names, `auto`, and the reference-counted,
// process-wide installation of each monitor (see monitor.h).
#include "mrcache/monitors/monitor.h"

#include <dlfcn.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "mrcache/errno_status.h"
#include "mrcache/internal/log.h"
#include "mrcache/monitors/fork_guard.h"
#include "mrcache/monitors/jemalloc_monitor.h"
#include "mrcache/monitors/monitor_sync.h"
#include "mrcache/monitors/monitor_table.h"
#include "mrcache/monitors/patch_monitor.h"
#include "mrcache/monitors/symbols_monitor.h"
#include "mrcache/monitors/uffd_monitor.h"

namespace mrcache {
namespace {

// The code of one installable monitor (its row in monitor_table.h).
// Install/Uninstall run under InstallMutex only, never from a hook.
struct Component {
  MonitorId id;
  absl::Status (*install)();
  void (*uninstall)();
  int (*watch)(void*, size_t);  // 0, an errno value or uffd_monitor::kMapCountLimit
  void (*unwatch)(void*, size_t);
  // True if an installation does not survive fork() (uffd: its reader thread
  // and its userfaultfd registrations stay with the parent).
  bool per_process;
  int refs;             // leases naming it (a fork child inherits its parent's)
  bool installed;       // install() succeeded and uninstall() has not run since
  uint64_t generation;  // ForkGeneration() when installed
};

Component g_components[] = {
    {MonitorId::kSymbols, &symbols_monitor::Enable, &symbols_monitor::Disable, nullptr, nullptr,
     false, 0, false, 0},
    {MonitorId::kPatch, &patch_monitor::Enable, &patch_monitor::Disable, nullptr, nullptr, false, 0,
     false, 0},
    {MonitorId::kUffd, &uffd_monitor::Enable, &uffd_monitor::Disable, &uffd_monitor::Watch,
     &uffd_monitor::Unwatch, true, 0, false, 0},
    {MonitorId::kJemalloc, &jemalloc_monitor::Enable, &jemalloc_monitor::Disable, nullptr, nullptr,
     false, 0, false, 0},
};
constexpr int kNumComponents = sizeof(g_components) / sizeof(g_components[0]);

std::mutex& InstallMutex() {
  static std::mutex* m = new std::mutex;  // leaked: usable during exit
  return *m;
}

const char* NameOf(const Component& c) { return MonitorRowOf(c.id).name; }

// The component of `id`, or -1 (none and auto have no code of their own).
int FindComponent(MonitorId id) {
  for (int i = 0; i < kNumComponents; ++i) {
    if (g_components[i].id == id) return i;
  }
  return -1;
}

// Requires InstallMutex. In a fork child, a per-process component inherited
// from the parent is inert: it is uninstalled (dropping what the child
// inherited) and installed afresh for the child's own caches; the parent's
// leases, which the child may still release, keep counting.
absl::Status AcquireComponentLocked(int i) {
  Component& c = g_components[i];
  if (c.installed && c.per_process && c.generation != ForkGeneration()) {
    c.uninstall();
    c.installed = false;
  }
  if (!c.installed) {
    absl::Status s = c.install();
    if (!s.ok()) return s;
    c.installed = true;
    c.generation = ForkGeneration();
  }
  ++c.refs;
  return absl::OkStatus();
}

void ReleaseComponentLocked(int i) {
  Component& c = g_components[i];
  if (--c.refs == 0 && c.installed) {
    c.uninstall();
    c.installed = false;
  }
}

// fork() (fork_guard.h, locks 1-3): no child inherits a held lock of the
// monitors, nor a uffd batch that no thread of the child will end.
void PrepareForkLocks() {
  InstallMutex().lock();
  patch_monitor::LockForFork();
  uffd_monitor::LockForFork();
}

void ReleaseForkLocks() {
  uffd_monitor::UnlockAfterFork();
  patch_monitor::UnlockAfterFork();
  InstallMutex().unlock();
}

void ReleaseForkLocksInChild() {
  ForgetUnfinishedBatchesInForkChild();
  ReleaseForkLocks();
}

const ForkHandlers kForkHandlers = {&PrepareForkLocks, &ReleaseForkLocks, &ReleaseForkLocksInChild};

// At load time, before any thread can hold one of these locks.
const bool g_fork_handlers_set = [] {
  SetMonitorForkHandlers(&kForkHandlers);
  return true;
}();

class Lease : public MonitorLease {
 public:
  Lease(std::vector<int> components, std::string shortfall)
      : components_(std::move(components)), shortfall_(std::move(shortfall)) {}
  ~Lease() override {
    std::lock_guard<std::mutex> lock(InstallMutex());
    for (int i : components_) ReleaseComponentLocked(i);
  }
  std::string name() const override {
    if (components_.empty()) return MonitorRowOf(MonitorId::kNone).name;
    std::vector<std::string> names;
    for (int i : components_) names.push_back(NameOf(g_components[i]));
    return absl::StrJoin(names, "+");
  }
  WatchResult Watch(void* addr, size_t length) override {
    WatchResult result = WatchResult::kWatched;
    for (int i : components_) {
      if (g_components[i].watch == nullptr) continue;
      int err = g_components[i].watch(addr, length);
      if (err == 0) continue;
      if (err == ENOMEM) {
        result = WatchResult::kUnmapped;
      } else if (result == WatchResult::kWatched) {
        result = WatchResult::kUnwatchable;
      }
      failures_.total.fetch_add(1, std::memory_order_relaxed);
      std::atomic<uint64_t>* cause = &failures_.other;
      if (err == uffd_monitor::kMapCountLimit) {
        cause = &failures_.map_limit;
      } else if (err == ENOMEM) {
        cause = &failures_.enomem;
      } else if (err == EBUSY) {
        cause = &failures_.ebusy;
      } else if (err == EPERM) {
        cause = &failures_.eperm;
      } else if (err == EINVAL) {
        cause = &failures_.einval;
      }
      cause->fetch_add(1, std::memory_order_relaxed);
    }
    return result;
  }
  void Unwatch(void* addr, size_t length) override {
    for (int i : components_) {
      if (g_components[i].unwatch != nullptr) g_components[i].unwatch(addr, length);
    }
  }
  bool watches_ranges() const override {
    for (int i : components_) {
      if (g_components[i].watch != nullptr || g_components[i].unwatch != nullptr) return true;
    }
    return false;
  }
  WatchFailureCounts watch_failures() const override {
    WatchFailureCounts c;
    c.total = failures_.total.load(std::memory_order_relaxed);
    c.enomem = failures_.enomem.load(std::memory_order_relaxed);
    c.ebusy = failures_.ebusy.load(std::memory_order_relaxed);
    c.eperm = failures_.eperm.load(std::memory_order_relaxed);
    c.einval = failures_.einval.load(std::memory_order_relaxed);
    c.map_limit = failures_.map_limit.load(std::memory_order_relaxed);
    c.other = failures_.other.load(std::memory_order_relaxed);
    return c;
  }
  bool blind() const override { return components_.empty(); }
  std::string shortfall() const override { return shortfall_; }
  bool complete() const override {
    for (int i : components_) {
      if (MonitorRowOf(g_components[i].id).complete) return true;
    }
    return false;
  }

 private:
  const std::vector<int> components_;
  const std::string shortfall_;
  struct {
    std::atomic<uint64_t> total{0}, enomem{0}, ebusy{0}, eperm{0}, einval{0}, map_limit{0},
        other{0};
  } failures_;
};

// Sanitizer runtimes, by the symbol that initialises each.
struct SanitizerSymbol {
  const char* symbol;
  const char* name;
};
constexpr SanitizerSymbol kSanitizers[] = {
    {"__asan_init", "AddressSanitizer"}, {"__hwasan_init", "HWAddressSanitizer"},
    {"__tsan_init", "ThreadSanitizer"},  {"__msan_init", "MemorySanitizer"},
    {"__lsan_init", "LeakSanitizer"},
};

std::string ErrnoText(const absl::Status& s) {
  return std::string(s.message()) + " (errno " + std::to_string(StatusToErrno(s)) + ")";
}

bool Names(absl::string_view list, MonitorId id) {
  for (absl::string_view part : absl::StrSplit(list, '+')) {
    if (part == MonitorRowOf(id).name) return true;
  }
  return false;
}

// The first lease of the process whose `auto` added uffd for a sanitizer
// says so, once.
void LogSanitizerChoiceOnce(const std::string& sanitizer) {
  static std::atomic<bool> logged{false};
  if (logged.exchange(true, std::memory_order_relaxed)) return;
  Log(LogLevel::kInfo, "monitor 'auto' includes uffd in this process: the " + sanitizer +
                           " runtime is loaded, and its allocator unmaps memory with inline "
                           "system calls that patch and symbols do not see");
}

}  // namespace

std::string SanitizerRuntime() {
  for (const SanitizerSymbol& s : kSanitizers) {
    if (dlsym(RTLD_DEFAULT, s.symbol) != nullptr) return s.name;
  }
  return std::string();
}

// `auto`: `patch` (every release that goes through libc, its own internal
// calls and syscall() included), else `symbols`; plus `jemalloc` when it is
// the allocator. `uffd` is not in it: it costs every miss a userfaultfd
// registration (a miss at zero registrar cost took 8.3 us with it; without
// it, what `none` costs: bench/RESULTS.md) and watches memory by range; the
// one row only it covers, an inline `syscall` instruction, is `auto+uffd`'s.
// Except under a sanitizer, whose allocator makes such calls all the time.
std::vector<std::string> AutoMonitorNames(absl::string_view sanitizer) {
  std::vector<std::string> names = {MonitorRowOf(MonitorId::kPatch).name,
                                    MonitorRowOf(MonitorId::kJemalloc).name};
  if (!sanitizer.empty()) names.push_back(MonitorRowOf(MonitorId::kUffd).name);
  return names;
}

absl::StatusOr<std::unique_ptr<MonitorLease>> AcquireMonitor(absl::string_view name) {
  const std::string sanitizer = Names(name, MonitorId::kAuto) ? SanitizerRuntime() : std::string();
  auto lease = AcquireMonitorFor(name, sanitizer);
  if (lease.ok() && !sanitizer.empty() && Names((*lease)->name(), MonitorId::kUffd)) {
    LogSanitizerChoiceOnce(sanitizer);
  }
  return lease;
}

absl::StatusOr<std::unique_ptr<MonitorLease>> AcquireMonitorFor(absl::string_view name,
                                                                absl::string_view sanitizer) {
  EnsureForkGuardInstalled();
  std::vector<absl::string_view> parts = absl::StrSplit(name, '+');
  bool want_auto = false;
  std::vector<int> wanted;
  for (absl::string_view part : parts) {
    const MonitorRow* row = FindMonitor(part);
    if (row == nullptr) {
      return ErrnoStatus(EINVAL, "unknown monitor '" + std::string(part) + "' in '" +
                                     std::string(name) + "' (expected " + MonitorNames("|") +
                                     ", '+'-separated)");
    }
    if (row->id == MonitorId::kAuto) {
      want_auto = true;
      continue;
    }
    int i = FindComponent(row->id);
    if (i < 0) continue;  // none
    bool dup = false;
    for (int w : wanted) dup |= w == i;
    if (!dup) wanted.push_back(i);
  }

  std::lock_guard<std::mutex> lock(InstallMutex());
  std::vector<int> acquired;
  auto release_all = [&acquired] {
    for (int i : acquired) ReleaseComponentLocked(i);
  };
  for (int i : wanted) {
    absl::Status s = AcquireComponentLocked(i);
    if (!s.ok()) {
      release_all();
      return s;
    }
    acquired.push_back(i);
  }
  // What `auto` promises and could not install, one part per cause.
  std::vector<std::string> missing;
  if (want_auto) {
    auto have = [&acquired](MonitorId id) {
      for (int a : acquired) {
        if (g_components[a].id == id) return true;
      }
      return false;
    };
    for (const std::string& n : AutoMonitorNames(sanitizer)) {
      const MonitorRow* row = FindMonitor(n);
      int i = row == nullptr ? -1 : FindComponent(row->id);
      if (i < 0 || have(row->id)) continue;
      absl::Status s = AcquireComponentLocked(i);
      if (s.ok()) {
        acquired.push_back(i);
      } else if (row->id == MonitorId::kPatch) {
        missing.push_back(n + ": " + ErrnoText(s));
        if (!have(MonitorId::kSymbols)) {
          int j = FindComponent(MonitorId::kSymbols);
          absl::Status t = AcquireComponentLocked(j);
          if (t.ok()) {
            acquired.push_back(j);
          } else {
            missing.push_back(std::string(NameOf(g_components[j])) + ": " +
                              std::string(t.message()));
          }
        }
        missing.push_back(have(MonitorId::kSymbols)
                              ? "using symbols, which misses libc's internal calls "
                                "(free, realloc, trim) and syscall()"
                              : "nothing reports releases made through libc");
      } else if (row->id == MonitorId::kUffd) {
        missing.push_back(n + ": " + ErrnoText(s) + "; the " + std::string(sanitizer) +
                          " runtime's allocator unmaps with inline system calls, which nothing "
                          "else sees");
      }
      // jemalloc's purges reach madvise, which patch or symbols see: its
      // absence costs no coverage.
    }
    if (acquired.empty()) {
      return ErrnoStatus(ENOTSUP, "monitor 'auto': no monitor can be installed here; " +
                                      absl::StrJoin(missing, "; "));
    }
  }
  return std::unique_ptr<MonitorLease>(
      new Lease(std::move(acquired), absl::StrJoin(missing, "; ")));
}

}  // namespace mrcache
