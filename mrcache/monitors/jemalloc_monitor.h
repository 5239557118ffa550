// jemalloc_monitor.h: the `jemalloc` monitor, by wrapping jemalloc's extent hooks.
//
// Available only when jemalloc is the process allocator: `mallctl` resolves
// (dlsym(RTLD_DEFAULT)), reading "version" works, and the `malloc` the program
// calls lives in the same object as that `mallctl`. Enable() replaces the
// extent hooks of every automatic arena (initialising the ones not yet
// created, so threads assigned to them later are covered) and of every
// manual arena that exists, via "arena.<i>.extent_hooks", with a wrapper that
// reports [addr + offset, + length) for purge_lazy, purge_forced and decommit,
// and [addr, + size) for dalloc and destroy, then calls the arena's original
// hook with the original hooks pointer.
//
// Invariants:
//  - The wrappers run with arena locks held: they only report (memory_events.h
//    rules: no allocation, no blocking); they never call back into jemalloc.
//  - Wrappers are static storage and stay installed once installed (jemalloc
//    may call a hook concurrently with any uninstallation); Disable() only
//    stops the reporting, and a later Enable() reuses them.
//  - Arenas created with "arenas.create" after Enable() are not wrapped.
//  - jemalloc's own munmap/madvise calls go through the PLT, so `symbols` and
//    `patch` see most of its releases too; this monitor sees them at the
//    extent level even when jemalloc is linked statically.
#ifndef MRCACHE_JEMALLOC_MONITOR_H_
#define MRCACHE_JEMALLOC_MONITOR_H_

#include "absl/status/status.h"

namespace mrcache {
namespace jemalloc_monitor {

// True if jemalloc is the allocator of this process.
bool JemallocIsProcessAllocator();

// ENOTSUP when jemalloc is not the process allocator or its hooks cannot be read.
absl::Status Enable();
void Disable();
bool Enabled();

}  // namespace jemalloc_monitor
}  // namespace mrcache

#endif  // MRCACHE_JEMALLOC_MONITOR_H_
