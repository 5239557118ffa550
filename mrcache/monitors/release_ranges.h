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

#include <sys/types.h>

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

// shmat(shmid, addr, shmflg): with SHM_REMAP and a non-null addr (rounded
// down to SHMLBA with SHM_RND), whatever was mapped at [addr, addr + segment
// size rounded up to pages) is replaced by the segment. The size comes from
// shmctl(shmid, IPC_STAT) made with syscall(2); if that fails nothing is
// reported (shmat then fails too: attaching needs the read permission that
// IPC_STAT needs). Without SHM_REMAP, or with a null addr, shmat never
// replaces a mapping and nothing is reported.
void ReportShmat(int shmid, const void* addr, int shmflg) noexcept;

// ---- shared files: truncation and hole punching ----
//
// Shrinking a file (ftruncate, truncate) or punching/zeroing/shifting a range
// of it (fallocate) drops its page-cache pages: every mapping of the file,
// MAP_SHARED ones in particular (memfd, shm_open, tmpfs, ordinary files),
// then shows fresh pages at those addresses, while a registration keeps the
// old pages pinned. The Report* functions below find this process's
// mappings of the file (same inode number in /proc/self/maps, read as
// ReportShmdt does) and report the addresses that show the dropped file
// offsets, computed from each mapping's file offset. Mappings in other
// processes are not this process's concern.

// File offsets [begin, end); end == UINT64_MAX means "to the end of the file".
// Empty when begin >= end.
struct FileSpan {
  uint64_t begin;
  uint64_t end;
};
// Addresses [start, end); empty when start >= end.
struct AddressSpan {
  uintptr_t start;
  uintptr_t end;
};

// The file pages a size change from old_size to new_size drops: empty unless
// the file shrinks; otherwise every page wholly beyond new_size (the page that
// holds new_size stays in place, its tail zeroed), i.e. from new_size rounded
// up to `page` to the end of the file.
FileSpan TruncatedSpan(uint64_t old_size, uint64_t new_size, uint64_t page) noexcept;

// The file pages fallocate(mode, offset, len) drops or changes: with
// FALLOC_FL_PUNCH_HOLE or FALLOC_FL_ZERO_RANGE, every page that overlaps
// [offset, offset + len) (filesystems such as XFS drop the partial pages at
// the edges too, so they are included); with FALLOC_FL_COLLAPSE_RANGE or
// FALLOC_FL_INSERT_RANGE, which shift the file's contents, every page from
// the one holding offset to the end of the file. Empty for allocation modes
// (0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_UNSHARE_RANGE), which keep every page.
FileSpan FallocatedSpan(int mode, uint64_t offset, uint64_t len, uint64_t page) noexcept;

// The addresses at which the mapping [map_start, map_end), which maps the
// file from offset map_offset (the maps line's offset field), shows the file
// offsets in `span`. Empty if the mapping shows none of them.
AddressSpan MappedFileSpan(uintptr_t map_start, uintptr_t map_end, uint64_t map_offset,
                           FileSpan span) noexcept;

// ftruncate(fd, length) / truncate(path, length): if the regular file's size
// (fstat / stat with syscall(2)) is larger than length, reports
// TruncatedSpan at every mapping of it. Growing, equal sizes, non-regular
// files and failing stats report nothing.
void ReportFtruncate(int fd, off_t length) noexcept;
void ReportTruncate(const char* path, off_t length) noexcept;

// fallocate(fd, mode, offset, len): reports FallocatedSpan at every mapping
// of the regular file fd names. Nothing for negative offsets or len <= 0
// (fallocate fails with EINVAL).
void ReportFallocate(int fd, int mode, off_t offset, off_t len) noexcept;

}  // namespace mrcache

#endif  // MRCACHE_RELEASE_RANGES_H_
