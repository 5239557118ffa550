// uffd_monitor.h: the `uffd` monitor, by userfaultfd non-cooperative events.
//
// Enable() opens a userfaultfd (O_CLOEXEC | O_NONBLOCK; retried with
// UFFD_USER_MODE_ONLY when the plain call is refused, as for unprivileged
// processes with vm.unprivileged_userfaultfd=0), negotiates
// UFFD_FEATURE_EVENT_UNMAP | EVENT_REMOVE | EVENT_REMAP |
// PAGEFAULT_FLAG_WP, and starts one reader thread.
//
// Watch(addr, len) registers the cached range with UFFDIO_REGISTER_MODE_WP.
// Write-protect mode is chosen because registering alone changes nothing for
// page faults: no page is write-protected until UFFDIO_WRITEPROTECT, which we
// never issue, so the application's faults (including on pages dropped by
// MADV_DONTNEED) are handled by the kernel as usual. MODE_MISSING would
// instead stop every fault on a non-present page until the reader resolved
// it. The kernel delivers UNMAP (munmap, mremap shrink, mmap MAP_FIXED, brk
// shrink), REMOVE (madvise DONTNEED/FREE/REMOVE) and REMAP (mremap move) for
// registered ranges whatever the mode, raw system calls included.
//
// Timing: the kernel applies the change first; the releasing thread then
// waits in the kernel until the event has been read. The reader reports
// right after reading, bracketing each batch for SyncMemoryMonitors()
// (monitor_sync.h), which a cache must call at the start of every get.
//
// What is registered: whole mappings. Registering part of a mapping (VMA)
// splits it in the kernel, and one split per cached region used to exhaust
// vm.max_map_count (the application's own mmap/mprotect then fail with
// ENOMEM) and to break the application's mremap of the whole mapping (EFAULT
// once it reached the first split). So Watch(addr, len) registers the
// mappings holding [addr, addr + len), each from its first page to its last
// (mapping_bounds.h, ScanMappings), which splits nothing; the number of
// registered spans is bounded by the number of distinct mappings holding
// watched ranges, not by the number of ranges. Every watched range counts one
// reference per page (overlapping regions are watched and unwatched
// independently); a span is unregistered, again whole, when no page of it is
// referenced any more. After registering, Watch checks with
// UFFDIO_WRITEPROTECT (mode 0: nothing is ever write-protected) that every
// mapping in the range is registered with this userfaultfd: the kernel skips
// holes, so a range unmapped and mapped again between the scan and the
// registration would otherwise be taken for watched (Watch returns ENOMEM).
//
// Keeping the bookkeeping true: the kernel drops the registration of what is
// unmapped (UNMAP: munmap, mmap MAP_FIXED over it, mremap shrink, brk) and
// moves it with a mremap'ed mapping (REMAP). The reader, which may neither
// allocate nor take a lock, appends those events to a fixed ring; the next
// Watch or Unwatch applies them to the spans before anything else, so memory
// mapped again at unmapped addresses is registered afresh (and its own unmap
// is seen), and a moved mapping's registration is dropped at its new place
// unless a watched range is there. If the ring overflowed in between, every
// span is forgotten (registrations the kernel still holds stay until Disable;
// the next Watch registers again, which the kernel accepts for its own
// context).
//
// The map count: adding a span never splits a mapping unless the application
// changes its mappings between the scan and the registration (at most two
// more mappings). Before adding a span, Watch makes sure the process's map
// count (lines of /proc/self/maps) stays below kMapCountPercent of
// vm.max_map_count; above it Watch stops adding spans (returns
// kMapCountLimit) and looks again at most once per kMapCountRecheckMs.
//
// Coverage limits: ranges that cannot be registered are not watched, and
// Watch says why (its return value; MonitorLease counts it per cache, see
// CacheStats::watch_failures): ENOMEM (part of the range is not mapped, or
// the kernel is out of memory), EBUSY (the application registered that memory
// with its own userfaultfd), EPERM, EINVAL (memory userfaultfd cannot track:
// file mappings other than shmem/hugetlbfs, SysV shm attachments), and the
// map-count limit. shmdt sends no event. In a fork child the monitor is
// inert (the registrations and the reader belong to the parent, and the
// inherited descriptor still refers to the parent's address space).
//
// Stopping: a thread that unmaps, moves or madvises registered memory waits
// in the kernel until the reader has read the event, and the reader is the
// only thread that reads. So the reader must never release memory in a
// registered mapping itself, and its exit does (glibc madvises the unused
// part of a finished thread's stack; ASan and TSan unmap their per-thread
// state, which the kernel may have merged into a mapping registered whole).
// Disable therefore asks the reader to stop, and the reader releases the
// userfaultfd (every registration, every waiting thread) before it returns;
// Disable then joins it.
//
// Watch/Unwatch allocate and take a mutex: never call them from a hook. The
// reader never takes that mutex.
#ifndef MRCACHE_UFFD_MONITOR_H_
#define MRCACHE_UFFD_MONITOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace mrcache {
namespace uffd_monitor {

// Opens the userfaultfd and starts the reader. Errors carry their real cause:
// EPERM when the kernel refuses userfaultfd to this process (the message
// names vm.unprivileged_userfaultfd), EMFILE/ENFILE when no file descriptor
// is free (it needs two), ENOTSUP when the kernel lacks a needed feature,
// EAGAIN when the reader thread cannot start.
absl::Status Enable();
void Disable();
bool Enabled();

// Watch's answer when it stopped adding spans to keep the map count below
// the limit (not an errno value).
constexpr int kMapCountLimit = -1;
// The limit, in percent of vm.max_map_count, and how often Watch looks at
// the map count again once it is above it.
constexpr int kMapCountPercent = 75;
constexpr int kMapCountRecheckMs = 1000;

// Starts watching [addr, addr + length) (one reference per page; see above).
// Returns 0 if it is watched, else why not: an errno value (ENOMEM, EBUSY,
// EPERM, EINVAL, ...; ECHILD in a fork child, where the monitor is inert) or
// kMapCountLimit. The reference is taken either way, and Unwatch of the same
// range always drops it. Not hook context.
int Watch(void* addr, size_t length);
// Drops the references Watch took; unregisters every span no reference is
// left in. Not hook context.
void Unwatch(void* addr, size_t length);

struct MapCountInfo {
  size_t map_count = 0;      // lines in /proc/self/maps now
  size_t max_map_count = 0;  // vm.max_map_count (65530 if unreadable)
  size_t limit = 0;          // Watch adds no span at or above this count
};
// The process's map count and the limit Watch keeps it under. Not hook
// context (reads /proc).
MapCountInfo MapCount();

// Spans (whole mappings) registered now.
size_t WatchedSpans();

// Ranges Watch could not register (process lifetime, every reason).
uint64_t WatchFailures();
// Events read by the reader (process lifetime).
uint64_t EventsRead();

// fork() (fork_guard.h, lock 3): takes the watch mutex before the fork;
// releases it after, in the parent and in the child. In the child the
// monitor is inert (no reader thread; the child's memory is not registered
// with the parent's userfaultfd) until Disable, then Enable, make a new one.
void LockForFork();
void UnlockAfterFork();

}  // namespace uffd_monitor
}  // namespace mrcache

#endif  // MRCACHE_UFFD_MONITOR_H_
