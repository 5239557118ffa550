#include "tests/softverbs/fork_protection.h"

#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tests/softverbs/page_refs.h"
#include "tests/softverbs/registry.h"

namespace softverbs {
namespace {

enum class ForkMode { kCopy, kDontFork, kInvalid };

ForkMode ForkModeFromEnvironment() {
  const char* v = getenv("SOFTVERBS_FORK");
  if (v == nullptr || *v == '\0' || strcmp(v, "copy") == 0) return ForkMode::kCopy;
  if (strcmp(v, "dontfork") == 0) return ForkMode::kDontFork;
  return ForkMode::kInvalid;
}

int ReportInvalidMode() {
  fprintf(stderr, "softverbs: SOFTVERBS_FORK=%s is not copy|dontfork\n", getenv("SOFTVERBS_FORK"));
  return EINVAL;
}

// As libibverbs' check_env: set and not "0".
bool EnvironmentFlag(const char* name) {
  const char* v = getenv(name);
  return v != nullptr && strcmp(v, "0") != 0;
}

int Madvise(uintptr_t start, size_t len, int advice) {
  return madvise(reinterpret_cast<void*>(start), len, advice) == 0 ? 0 : errno;
}

PageRefs& Ranges() {
  static PageRefs* refs =
      new PageRefs([](uintptr_t start, size_t len) { return Madvise(start, len, MADV_DONTFORK); },
                   [](uintptr_t start, size_t len) { return Madvise(start, len, MADV_DOFORK); });
  return *refs;
}

std::atomic<bool> enabled{false};   // protection on: ranges are madvised
std::atomic<bool> too_late{false};  // a range was asked for while it was off
std::mutex init_mu;                 // serialises ibv_fork_init

// 0, or -1 with errno, as libibverbs' range functions.
int Result(int err) {
  if (err == 0) return 0;
  errno = err;
  return -1;
}

}  // namespace

int InitForkProtectionOnce() {
  static const bool done = [] {
    if (EnvironmentFlag("RDMAV_FORK_SAFE") || EnvironmentFlag("IBV_FORK_SAFE")) {
      if (ibv_fork_init() != 0) {
        fprintf(stderr, "softverbs: Warning: fork()-safety requested but init failed\n");
      }
    }
    return true;
  }();
  (void)done;
  return ForkModeFromEnvironment() == ForkMode::kInvalid ? ReportInvalidMode() : 0;
}

namespace {

// Adds (protect) or drops a reference to the range's pages, as libibverbs'
// ibv_madvise_range: nothing but noting it was asked while protection is off.
int AdviseRange(void* base, size_t size, bool protect) {
  if (!enabled.load()) {
    too_late.store(true);
    return 0;
  }
  if (base == nullptr || size == 0) return 0;
  const uintptr_t start = reinterpret_cast<uintptr_t>(base);
  return Result(protect ? Ranges().Acquire(start, size) : Ranges().Release(start, size));
}

}  // namespace

int DontForkRange(void* base, size_t size) { return AdviseRange(base, size, true); }

int DoForkRange(void* base, size_t size) { return AdviseRange(base, size, false); }

void LockForkProtectionForFork() { Ranges().LockForFork(); }
void UnlockForkProtectionAfterFork() { Ranges().UnlockAfterFork(); }

}  // namespace softverbs

extern "C" {

int ibv_fork_init(void) {
  using softverbs::ForkMode;
  const ForkMode mode = softverbs::ForkModeFromEnvironment();
  if (mode == ForkMode::kInvalid) return softverbs::ReportInvalidMode();
  std::lock_guard<std::mutex> lock(softverbs::init_mu);
  if (softverbs::enabled.load()) return 0;
  if (mode == ForkMode::kCopy && !softverbs::EnvironmentFlag("RDMAV_USE_MADVISE")) return 0;
  if (softverbs::too_late.load()) return EINVAL;
  // The kernel must know MADV_DONTFORK and MADV_DOFORK.
  const size_t page = softverbs::PageSize();
  void* probe = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (probe == MAP_FAILED) return ENOMEM;
  const bool works =
      madvise(probe, page, MADV_DONTFORK) == 0 && madvise(probe, page, MADV_DOFORK) == 0;
  munmap(probe, page);
  if (!works) return ENOSYS;
  softverbs::enabled.store(true);
  return 0;
}

ibv_fork_status ibv_is_fork_initialized(void) {
  if (softverbs::ForkModeFromEnvironment() != softverbs::ForkMode::kDontFork) {
    return IBV_FORK_UNNEEDED;
  }
  return softverbs::enabled.load() ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

int ibv_dontfork_range(void* base, size_t size) { return softverbs::DontForkRange(base, size); }

int ibv_dofork_range(void* base, size_t size) { return softverbs::DoForkRange(base, size); }

}  // extern "C"
