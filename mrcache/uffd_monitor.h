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
// Coverage limits: ranges that cannot be registered (file-backed mappings
// other than shmem/hugetlbfs, SysV shm attachments) are not watched (counted
// in WatchFailures()); shmdt sends no event. In a fork child the monitor is
// inert (the registrations and the reader belong to the parent, and the
// inherited descriptor still refers to the parent's address space).
//
// Watch/Unwatch count references per page range, so overlapping regions may
// be watched and unwatched independently; a range is unregistered when its
// count drops to zero. They allocate and take a mutex: never call them from a
// hook. The reader never takes that mutex.
#ifndef MRCACHE_UFFD_MONITOR_H_
#define MRCACHE_UFFD_MONITOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace mrcache {
namespace uffd_monitor {

// ENOTSUP with the reason when userfaultfd or a needed feature is unavailable.
absl::Status Enable();
void Disable();
bool Enabled();

void Watch(void* addr, size_t length);
void Unwatch(void* addr, size_t length);

// Ranges Watch could not register (process lifetime).
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
