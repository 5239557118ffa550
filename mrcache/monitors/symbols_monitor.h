// symbols_monitor.h: the `symbols` monitor, by symbol interposition.
//
// symbols_monitor.cc defines munmap, mremap, madvise, posix_madvise, brk,
// sbrk, shmdt, mmap, mmap64, shmat, ftruncate, ftruncate64, truncate,
// truncate64, fallocate, fallocate64 and dlclose (which reports what the
// loader unmaps, loader_releases.h) with C linkage. They take precedence
// over libc's for every call that goes through symbol lookup only where the
// linked object exports them: an executable that depends on
// //mrcache/monitors:symbols_monitor (its --export-dynamic-symbol flags).
// libmrcache.so and the shim keep them local (a definition every object binds
// to would be what another tracker patches instead of libc's entry point:
// docs/ARCHITECTURE.md, "Other trackers in the process"); there Enable() is
// ENOTSUP. Each one reports the range it is about to release
// (release_ranges.h) when the monitor is enabled, then calls the next
// definition (dlsym(RTLD_NEXT)): another interposer or libc, where a patch by
// another tracker (or by `patch`) runs as it would without mrcache.
//
// Invariants:
//  - Disabled (the default), the definitions only forward: one relaxed
//    atomic load of overhead.
//  - The next definitions are resolved once, lazily, under an atomic state
//    flag. dlsym may itself allocate and so call mmap/munmap: any call made
//    while the resolution is in progress (on any thread) performs the raw
//    system call instead, keeping glibc's break (__curbrk) consistent for
//    brk/sbrk exactly as glibc does.
//  - Calls inside libc (free() of a large chunk calls glibc's internal
//    munmap) and syscall(2) are NOT seen: use `patch` (both) or `uffd`.
//  - syscall() is deliberately not interposed. A definition here would be
//    in effect for every caller in every process that links libmrcache.so,
//    monitor enabled or not (futex waits, gettid, clone, ... of every
//    library), before our own lazy resolution could run, and a C-level
//    variadic forwarder cannot pass clone/vfork through as glibc's does.
//    `patch` covers syscall() only while it is installed, filters the
//    numbers in assembly and resumes glibc's own code for every other one;
//    `symbols` is the fallback where `patch` cannot be installed, and a cache
//    whose `auto` falls back to it says so (mrc_stats_t.monitor_incomplete).
//    The matrix row `syscall_munmap` pins this: stale with `symbols`.
//  - posix_madvise never releases memory in glibc (POSIX_MADV_DONTNEED is a
//    no-op there), so it forwards without reporting.
#ifndef MRCACHE_SYMBOLS_MONITOR_H_
#define MRCACHE_SYMBOLS_MONITOR_H_

#include "absl/status/status.h"

namespace mrcache {
namespace symbols_monitor {

// Starts reporting. Resolves the next definitions first; ENOTSUP if libc's
// cannot be found (the interposers are not in effect in this process).
absl::Status Enable();
// Stops reporting (the definitions keep forwarding).
void Disable();
bool Enabled();

}  // namespace symbols_monitor
}  // namespace mrcache

#endif  // MRCACHE_SYMBOLS_MONITOR_H_
