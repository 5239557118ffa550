#include "mrcache/monitors/jemalloc_monitor.h"

#include <dlfcn.h>
#include <errno.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "mrcache/errno_status.h"
#include "mrcache/monitors/memory_events.h"

// The extent hook ABI of jemalloc 5 (<jemalloc/jemalloc.h>), declared here so
// that this file does not pull jemalloc's malloc declarations into programs
// that do not use jemalloc.
extern "C" {
struct extent_hooks_s;
typedef struct extent_hooks_s extent_hooks_t;
typedef void*(extent_alloc_t)(extent_hooks_t*, void*, size_t, size_t, bool*, bool*, unsigned);
typedef bool(extent_dalloc_t)(extent_hooks_t*, void*, size_t, bool, unsigned);
typedef void(extent_destroy_t)(extent_hooks_t*, void*, size_t, bool, unsigned);
typedef bool(extent_commit_t)(extent_hooks_t*, void*, size_t, size_t, size_t, unsigned);
typedef bool(extent_purge_t)(extent_hooks_t*, void*, size_t, size_t, size_t, unsigned);
typedef bool(extent_split_t)(extent_hooks_t*, void*, size_t, size_t, size_t, bool, unsigned);
typedef bool(extent_merge_t)(extent_hooks_t*, void*, size_t, void*, size_t, bool, unsigned);
struct extent_hooks_s {
  extent_alloc_t* alloc;
  extent_dalloc_t* dalloc;
  extent_destroy_t* destroy;
  extent_commit_t* commit;
  extent_commit_t* decommit;
  extent_purge_t* purge_lazy;
  extent_purge_t* purge_forced;
  extent_split_t* split;
  extent_merge_t* merge;
};
}

namespace mrcache {
namespace jemalloc_monitor {
namespace {

using MallctlFn = int (*)(const char*, void*, size_t*, void*, size_t);

std::atomic<bool> g_enabled{false};

// hooks must stay the first member: jemalloc hands the wrapper's hooks
// pointer back to each callback, which recovers the Wrapper from it.
struct Wrapper {
  extent_hooks_t hooks;
  extent_hooks_t* original;
};
constexpr unsigned kMaxArenas = 1024;
Wrapper g_wrappers[kMaxArenas];

inline const Wrapper* Of(extent_hooks_t* h) { return reinterpret_cast<const Wrapper*>(h); }

inline void Report(void* addr, size_t length) noexcept {
  if (g_enabled.load(std::memory_order_relaxed)) ReportMemoryRelease(addr, length);
}

void* WrapAlloc(extent_hooks_t* h, void* new_addr, size_t size, size_t alignment, bool* zero,
                bool* commit, unsigned arena) {
  extent_hooks_t* o = Of(h)->original;
  return o->alloc(o, new_addr, size, alignment, zero, commit, arena);
}

bool WrapDalloc(extent_hooks_t* h, void* addr, size_t size, bool committed, unsigned arena) {
  ReleaseFence fence;  // held across the original hook (memory_events.h)
  Report(addr, size);
  extent_hooks_t* o = Of(h)->original;
  return o->dalloc(o, addr, size, committed, arena);
}

void WrapDestroy(extent_hooks_t* h, void* addr, size_t size, bool committed, unsigned arena) {
  ReleaseFence fence;  // held across the original hook (memory_events.h)
  Report(addr, size);
  extent_hooks_t* o = Of(h)->original;
  o->destroy(o, addr, size, committed, arena);
}

bool WrapCommit(extent_hooks_t* h, void* addr, size_t size, size_t offset, size_t length,
                unsigned arena) {
  extent_hooks_t* o = Of(h)->original;
  return o->commit(o, addr, size, offset, length, arena);
}

bool WrapDecommit(extent_hooks_t* h, void* addr, size_t size, size_t offset, size_t length,
                  unsigned arena) {
  ReleaseFence fence;  // held across the original hook (memory_events.h)
  Report(static_cast<char*>(addr) + offset, length);
  extent_hooks_t* o = Of(h)->original;
  return o->decommit(o, addr, size, offset, length, arena);
}

bool WrapPurgeLazy(extent_hooks_t* h, void* addr, size_t size, size_t offset, size_t length,
                   unsigned arena) {
  ReleaseFence fence;  // held across the original hook (memory_events.h)
  Report(static_cast<char*>(addr) + offset, length);
  extent_hooks_t* o = Of(h)->original;
  return o->purge_lazy(o, addr, size, offset, length, arena);
}

bool WrapPurgeForced(extent_hooks_t* h, void* addr, size_t size, size_t offset, size_t length,
                     unsigned arena) {
  ReleaseFence fence;  // held across the original hook (memory_events.h)
  Report(static_cast<char*>(addr) + offset, length);
  extent_hooks_t* o = Of(h)->original;
  return o->purge_forced(o, addr, size, offset, length, arena);
}

bool WrapSplit(extent_hooks_t* h, void* addr, size_t size, size_t size_a, size_t size_b,
               bool committed, unsigned arena) {
  extent_hooks_t* o = Of(h)->original;
  return o->split(o, addr, size, size_a, size_b, committed, arena);
}

bool WrapMerge(extent_hooks_t* h, void* addr_a, size_t size_a, void* addr_b, size_t size_b,
               bool committed, unsigned arena) {
  extent_hooks_t* o = Of(h)->original;
  return o->merge(o, addr_a, size_a, addr_b, size_b, committed, arena);
}

// A wrapper keeps the original's missing (null) hooks missing, so jemalloc's
// "hook absent" behaviour is unchanged.
void Build(Wrapper* w, extent_hooks_t* original) {
  w->original = original;
  w->hooks.alloc = original->alloc ? &WrapAlloc : nullptr;
  w->hooks.dalloc = original->dalloc ? &WrapDalloc : nullptr;
  w->hooks.destroy = original->destroy ? &WrapDestroy : nullptr;
  w->hooks.commit = original->commit ? &WrapCommit : nullptr;
  w->hooks.decommit = original->decommit ? &WrapDecommit : nullptr;
  w->hooks.purge_lazy = original->purge_lazy ? &WrapPurgeLazy : nullptr;
  w->hooks.purge_forced = original->purge_forced ? &WrapPurgeForced : nullptr;
  w->hooks.split = original->split ? &WrapSplit : nullptr;
  w->hooks.merge = original->merge ? &WrapMerge : nullptr;
}

bool IsWrapper(const extent_hooks_t* h) {
  const Wrapper* w = reinterpret_cast<const Wrapper*>(h);
  return w >= g_wrappers && w < g_wrappers + kMaxArenas;
}

MallctlFn FindMallctl() { return reinterpret_cast<MallctlFn>(dlsym(RTLD_DEFAULT, "mallctl")); }

template <typename T>
bool Read(MallctlFn mallctl, const char* name, T* out) {
  size_t len = sizeof(T);
  return mallctl(name, out, &len, nullptr, 0) == 0 && len == sizeof(T);
}

}  // namespace

bool JemallocIsProcessAllocator() {
  MallctlFn mallctl = FindMallctl();
  if (mallctl == nullptr) return false;
  const char* version = nullptr;
  if (!Read(mallctl, "version", &version)) return false;
  Dl_info ctl_info, malloc_info;
  void* malloc_fn = dlsym(RTLD_DEFAULT, "malloc");
  if (dladdr(reinterpret_cast<void*>(mallctl), &ctl_info) == 0 ||
      dladdr(malloc_fn, &malloc_info) == 0) {
    return false;
  }
  return ctl_info.dli_fbase == malloc_info.dli_fbase;
}

absl::Status Enable() {
  if (!JemallocIsProcessAllocator()) {
    return ErrnoStatus(ENOTSUP, "jemalloc monitor: jemalloc is not this process's allocator");
  }
  MallctlFn mallctl = FindMallctl();
  unsigned narenas = 0;
  if (!Read(mallctl, "arenas.narenas", &narenas)) {
    return ErrnoStatus(ENOTSUP, "jemalloc monitor: cannot read arenas.narenas");
  }
  if (narenas > kMaxArenas) narenas = kMaxArenas;
  int wrapped = 0;
  for (unsigned i = 0; i < narenas; ++i) {
    char name[64];
    snprintf(name, sizeof(name), "arena.%u.extent_hooks", i);
    extent_hooks_t* current = nullptr;
    if (!Read(mallctl, name, &current) || current == nullptr)
      continue;  // e.g. EFAULT: absent manual arena
    if (IsWrapper(current)) {
      ++wrapped;
      continue;
    }
    Build(&g_wrappers[i], current);
    extent_hooks_t* replacement = &g_wrappers[i].hooks;
    if (mallctl(name, nullptr, nullptr, &replacement, sizeof(replacement)) == 0) ++wrapped;
  }
  if (wrapped == 0) {
    return ErrnoStatus(ENOTSUP, "jemalloc monitor: no arena's extent hooks could be replaced");
  }
  g_enabled.store(true, std::memory_order_seq_cst);
  return absl::OkStatus();
}

void Disable() { g_enabled.store(false, std::memory_order_seq_cst); }

bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

}  // namespace jemalloc_monitor
}  // namespace mrcache
