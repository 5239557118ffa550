// patch_monitor.h: the `patch` monitor, by patching libc's entry points.
//
// Enable() overwrites the first 5 bytes of libc's munmap, mremap, madvise,
// shmdt, brk, mmap, shmat, ftruncate, truncate and fallocate (found with dlsym
// on libc.so.6's own handle, so an interposer in the executable does not hide
// them) with a relative jump to a
// trampoline slot allocated within +-2 GiB of libc; the slot holds an absolute
// jump (`jmp [rip+0]; .quad handler`) to a handler that reports the released
// range (release_ranges.h) and performs the system call itself. Calls inside
// glibc (free() of a large chunk -> internal munmap, malloc trim -> madvise,
// realloc -> mremap, sbrk -> brk) enter the same code and are seen too. The
// brk handler updates glibc's __curbrk exactly as glibc's brk does, so sbrk
// keeps a consistent notion of the break. The handlers make their system
// calls with an inline `syscall` instruction (raw_syscall.h).
//
// mprotect is patched too, to stay on top of a tracker that patches after
// us: every code patcher (UCX's bistro, libfabric's memhooks, Open MPI's
// patcher) writes its jump between mprotect(RWX) and mprotect(R+X) of the
// entry's page, so once the page is R+X again the mprotect handler finds the
// entries that now hold another tracker's jump and puts ours back on top,
// chaining to it (RechainPatchedOver).
//
// dlclose is patched too: the loader unmaps with ld.so's own system calls,
// which none of the entries above sees, so its handler reports the segments
// of what the call unloads (loader_releases.h) around glibc's dlclose. That
// handler cannot do glibc's work itself: it replays the one instruction the
// jump displaced (`mov disp32(%rip), %rdx`, wholly covered by the jump's 5
// bytes, so no thread can be inside a torn instruction) and resumes glibc's
// code after it.
//
// glibc's syscall() function is patched too (through a 2-byte jump to its
// padding, see ApplyHopPatch in code_patch.h): syscall(SYS_munmap,
// SYS_mremap, SYS_madvise, SYS_brk, SYS_shmdt, and SYS_mmap with MAP_FIXED,
// SYS_shmat with SHM_REMAP, SYS_ftruncate, SYS_truncate, SYS_fallocate) is
// reported exactly as the entry point of the same name (brk: the kernel's
// break is lowered; glibc's __curbrk is not touched, as with glibc's
// syscall()). Every other number is filtered in assembly and resumes glibc's
// own code with every register and the stack untouched (clone and vfork
// through syscall() included). An inline `syscall` instruction that bypasses
// libc is not seen: only `uffd` (opt-in, `auto+uffd`) or ODP covers it.
//
// Safety rules:
//  - An entry is patched only if its first 8 bytes are exactly the glibc 2.36
//    (x86-64) code this handler replaces, or another tracker's jump to its
//    hook (which the handler then calls in place of the system call, so that
//    tracker still sees every call: docs/ARCHITECTURE.md, "Other trackers in
//    the process"); otherwise ENOTSUP naming the function and saying whether
//    it already starts with a jump (a second patch of ours, or a jump we do
//    not decode). A tracker that patches an entry after us replaces our jump
//    for the moment between its two mprotect calls; the second one puts ours
//    back on top of its jump (a call in that moment reaches only its hook,
//    and UCX's hooks then still make their system calls through syscall(),
//    except brk and sbrk). A patcher that writes code without mprotect (its
//    pages already writable, or through /proc/self/mem) keeps ours replaced.
//  - The entry must be 8-byte aligned; the patch is written as ONE atomic
//    8-byte store (the 5-byte jump plus the 3 original bytes that follow),
//    with the page made RWX (never non-executable) meanwhile and R+X after.
//    Other threads therefore see either the old or the new entry. For munmap,
//    madvise, shmdt, brk, shmat, ftruncate and truncate the 5 bytes are
//    exactly the first instruction (`mov eax, nr`), so a thread sleeping
//    inside the syscall that follows resumes on unchanged code. Residual
//    risk, documented rather than removed: for mmap and mremap the jump ends
//    inside the second instruction, for fallocate inside the first;
//    a thread that has executed the first instruction and not yet the second
//    at the very moment of the store would decode a torn instruction. (The
//    kernel's own text_poke avoids this with an int3 protocol, which needs a
//    SIGTRAP handler; we do not install one.)
//  - Disable() restores the original 8 bytes with the same single store
//    (syscall's padding keeps its jump: only the entry's jump leads there).
//    Trampoline pages are kept for the life of the process (a thread may
//    still be jumping through one) and reused by later installations.
//  - Once Enable() has succeeded, the library that holds the handlers is
//    never unloaded (dlopen RTLD_NODELETE of itself): a dlclose() cannot pull
//    a handler from under a thread, and a later dlopen() finds the same
//    trampolines instead of mapping new pages near libc.
//  - The handlers make the plain system call: a patched fallocate is no
//    longer a pthread cancellation point (glibc's is).
//  - Trampoline budget: one 16-byte slot per entry (14) on pages
//    mapped near libc; kMaxSlots (256) and 16 pages leave ample room, and a
//    re-installation reuses the slots of the first.
//  - x86-64 only: ENOTSUP elsewhere, and under ThreadSanitizer (glibc's
//    exiting threads madvise their stacks after TSan's per-thread teardown,
//    and the handler is instrumented code).
#ifndef MRCACHE_PATCH_MONITOR_H_
#define MRCACHE_PATCH_MONITOR_H_

#include <cstddef>

#include "absl/status/status.h"
#include "mrcache/monitors/code_patch.h"

namespace mrcache {
namespace patch_monitor {

// Patches every entry of kTargets (patch_monitor.cc) and glibc's syscall(),
// or none (ENOTSUP naming the first that cannot be), and turns reporting on.
absl::Status Enable();
// Turns reporting off and restores every entry it can (code_patch.h).
void Disable();
// True between a successful Enable and Disable.
bool Enabled();
// Called by the patched mprotect after [start, start + length) was made
// executable and not writable: every patched entry in that range that now
// holds another tracker's jump (it patched over ours, as UCX's bistro hooks
// do when UCX is loaded after mrcache) gets our jump back on top, chaining to
// that tracker's hook; sbrk gets one when it holds a tracker's jump. Both
// trackers then see every call, as when the other tracker patched first.
// Nothing while the monitor is off; failures are logged.
void RechainPatchedOver(const void* start, size_t length) noexcept;

}  // namespace patch_monitor
}  // namespace mrcache

#endif  // MRCACHE_PATCH_MONITOR_H_
