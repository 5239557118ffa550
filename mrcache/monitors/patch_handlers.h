// patch_handlers.h: the code libc's patched entry points jump to.
//
// One handler per patched entry (munmap, madvise, shmdt, brk, mmap, mremap,
// shmat, ftruncate, truncate, fallocate, sbrk, dlclose, mprotect), with the
// entry's own signature: it reports the release (release_ranges.h) while Reporting() is
// on, then calls the hook another tracker had put on the entry
// (PatchSite::next of its site in g_sites) or makes the system call itself
// with an inline `syscall` instruction (raw_syscall.h), as glibc 2.36 would.
// Each handler that releases memory holds a ReleaseFence across its system
// call (memory_events.h).
//
// mrcache_patch_syscall_entry is what glibc's patched syscall() jumps to: it
// filters the numbers that release memory (reported exactly as the entry of
// the same name) and resumes glibc's own code, every register and the stack
// untouched, for every other number (patch_handlers.cc).
#ifndef MRCACHE_MONITORS_PATCH_HANDLERS_H_
#define MRCACHE_MONITORS_PATCH_HANDLERS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "mrcache/monitors/code_patch.h"

namespace mrcache {
namespace patch_monitor {

// The patched entries, in the order of patch_monitor.cc's kTargets (each
// handler finds its own site's next).
enum TargetIndex : int {
  kMunmap,
  kMadvise,
  kShmdt,
  kBrk,
  kMmap,
  kMremap,
  kShmat,
  kFtruncate,
  kTruncate,
  kFallocate,
  kSbrk,
  kDlclose,
  kMprotect,
  kNumTargets
};
// The sites of the patched entries, by TargetIndex. Written under the
// installation lock of monitor.cc, and by RechainPatchedOver (under the patch
// mutex, only while reporting is on, so never during an installation); a
// handler reads its site's `next` with an acquire load (ApplyPatch and
// Rechain store it before the jump).
extern PatchSite g_sites[kNumTargets];

// Whether the handlers report what they see (on between Enable and
// Disable; a patch left in place by Disable only makes the system call).
bool Reporting() noexcept;
// Sequentially consistent, so that no report follows a Disable.
void SetReporting(bool on) noexcept;

int HandleMunmap(void* addr, size_t length) noexcept;
int HandleMadvise(void* addr, size_t length, int advice) noexcept;
int HandleShmdt(const void* addr) noexcept;
// glibc 2.36 brk: updates glibc's __curbrk as glibc's brk does.
int HandleBrk(void* addr) noexcept;
void* HandleMmap(void* addr, size_t length, int prot, int flags, int fd, off_t offset) noexcept;
// mremap is variadic; on x86-64 the fifth argument (new_address, read only
// with MREMAP_FIXED) arrives in r8 either way, so a 5-argument handler
// receives it.
void* HandleMremap(void* old_address, size_t old_size, size_t new_size, int flags,
                   void* new_address) noexcept;
void* HandleShmat(int shmid, const void* addr, int shmflg) noexcept;
int HandleFtruncate(int fd, off_t length) noexcept;
int HandleTruncate(const char* path, off_t length) noexcept;
// Not a cancellation point, unlike glibc's fallocate (patch_monitor.h).
int HandleFallocate(int fd, int mode, off_t offset, off_t len) noexcept;
// Patched only over another tracker's jump: calls that tracker's hook.
void* HandleSbrk(intptr_t increment) noexcept;
// The loader unmaps with its own system calls, which no patched entry sees:
// dlclose reports the objects' segments itself (loader_releases.h), around
// glibc's dlclose (through mrcache_patch_dlclose_original, which runs the
// instruction the patch displaced and resumes glibc's code after it) or
// another tracker's hook found on the entry.
int HandleDlclose(void* handle) noexcept;
// Nothing to report: a page made executable and read-only again may hold an
// entry another tracker has just patched over ours (every patcher writes its
// jump between two mprotect calls), so after the call the monitor puts its
// jump back on top of that tracker's (RechainPatchedOver, patch_monitor.h).
int HandleMprotect(void* addr, size_t length, int prot) noexcept;

}  // namespace patch_monitor
}  // namespace mrcache

extern "C" {
// glibc's syscall + 3 (the instruction after the one the patch displaced),
// set before syscall() is patched.
__attribute__((visibility("hidden"))) extern void* mrcache_patch_syscall_resume;
// The target of glibc's patched syscall() (assembly: no frame, registers kept).
__attribute__((visibility("hidden"))) void mrcache_patch_syscall_entry();
// glibc's dlclose as it was before the patch: replays the instruction the
// jump displaced (`mov disp32(%rip), %rdx`, through mrcache_patch_dlclose_got)
// and jumps to mrcache_patch_dlclose_resume; both are set before the entry is
// patched (patch_monitor.cc).
__attribute__((visibility("hidden"))) int mrcache_patch_dlclose_original(void* handle);
__attribute__((visibility("hidden"))) extern const void* mrcache_patch_dlclose_got;
__attribute__((visibility("hidden"))) extern void* mrcache_patch_dlclose_resume;
}

#endif  // MRCACHE_MONITORS_PATCH_HANDLERS_H_
