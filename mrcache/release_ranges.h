// release_ranges.h: which address range each libc memory call releases.
//
// Shared by the `symbols` and `patch` monitors (symbols_monitor.h,
// patch_monitor.h): each interposed or patched entry point calls the matching
// Report* function with its arguments BEFORE performing the call (except
// ReportMremapMoved, which runs once the kernel has said where the mapping
// went, still before mremap returns to its caller), and the function reports
// the released range through ReportMemoryRelease (memory_events.h).
//
// Hook-safety: every function here runs inside arbitrary code (inside malloc,
// inside a registrar call). None allocates, takes a lock or calls a libc
// function that could be hooked; system calls are made with syscall(2).
#ifndef MRCACHE_RELEASE_RANGES_H_
#define MRCACHE_RELEASE_RANGES_H_

#include <cstddef>
#include <cstdint>

namespace mrcache {

// munmap(addr, length): the whole range.
void ReportMunmap(void* addr, size_t length) noexcept;

// mmap(addr, length, ..., flags, ...): with MAP_FIXED, whatever was mapped at
// [addr, addr+length) is replaced. Without MAP_FIXED nothing is released
// (MAP_FIXED_NOREPLACE never replaces).
void ReportMmap(void* addr, size_t length, int flags) noexcept;

// madvise(addr, length, advice): advice that discards the contents (DONTNEED,
// DONTNEED_LOCKED, FREE, REMOVE, GUARD_INSTALL) releases the range; advice that
// keeps the contents (WILLNEED, DONTFORK, HUGEPAGE, COLD, PAGEOUT, ...) does not.
bool MadviseReleases(int advice) noexcept;
void ReportMadvise(void* addr, size_t length, int advice) noexcept;

// mremap(old, old_size, new_size, flags, new_address) before the call: the
// tail of a shrink, the destination of MREMAP_FIXED (replaced), and the old
// range for MREMAP_DONTUNMAP (its pages move away).
void ReportMremapBefore(void* old_address, size_t old_size, size_t new_size, int flags,
                        void* new_address) noexcept;
// After a successful mremap that returned `result`: if the mapping moved, the
// whole old range is gone.
void ReportMremapMoved(void* old_address, size_t old_size, void* result) noexcept;

// The program break as glibc knows it (__curbrk), asking the kernel if glibc
// has not looked yet.
void* CurrentBreak() noexcept;
// brk(new_break) / sbrk(increment): lowering the break releases
// [new_break, current break).
void ReportBrk(void* new_break) noexcept;
void ReportSbrk(intptr_t increment) noexcept;

// shmdt(addr): the attached segment at addr. Its size is found without
// allocating: /proc/self/maps is read with raw open/read system calls into a
// stack buffer, and the run of mappings that start at addr and belong to the
// same SysV segment (same inode, which is the shmid) is reported, widened to
// the segment size from shmctl(shmid, IPC_STAT). If nothing is found (not an
// attach address) nothing is reported; shmdt itself then fails with EINVAL.
void ReportShmdt(const void* addr) noexcept;

}  // namespace mrcache

#endif  // MRCACHE_RELEASE_RANGES_H_
