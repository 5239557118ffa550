// code_patch.h: writing a jump into an entry point of libc, safely.
//
// A patch overwrites an entry's first bytes with a relative jump to a
// trampoline slot (`jmp [rip+0]; .quad handler`) on a page mapped within
// +-2 GiB of it, with one atomic aligned 8-byte store (patch_monitor.h,
// "Safety rules"). Slots are kept for the life of the process and reused by
// a later patch of the same entry with the same handler. Every function here
// takes the patch mutex, which fork() holds across the fork (LockForFork).
#ifndef MRCACHE_MONITORS_CODE_PATCH_H_
#define MRCACHE_MONITORS_CODE_PATCH_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace mrcache {
namespace patch_monitor {

// One patched entry point (exposed for tests).
struct PatchSite {
  const char* name = nullptr;
  void* entry = nullptr;
  uint8_t original[8] = {};
  // 0: the entry holds `jmp rel32` to the trampoline. Otherwise it holds
  // `jmp rel8` to entry + hop, where `jmp rel32` to the trampoline is (syscall).
  int hop = 0;
  bool applied = false;
  // The hook another tracker had put on the entry before us (its jump's
  // target), which the handler calls after reporting, in place of the system
  // call; nullptr when the entry held glibc's own code.
  void* next = nullptr;
};

// Patches `entry` (named `name` in messages) to jump to `handler`, provided
// its first 8 bytes equal `expected`, or hold another tracker's jump to its
// hook (`jmp rel32`, `jmp [rip+disp32]`, `movabs rax/r11, imm64` + `jmp
// rax/r11`, as UCX's bistro and libfabric's patcher write): then the patch
// chains, site->next is that hook and the handler calls it after reporting.
// ENOTSUP (naming the function) if the bytes are neither, if the entry
// already jumps to one of our own trampolines (patched twice), if it is not
// 8-byte aligned, or if no trampoline can be placed within reach (the errno of
// the failing mmap/mprotect, ENOSPC when the slots or pages are used up).
absl::Status ApplyPatch(const char* name, void* entry, const uint8_t (&expected)[8], void* handler,
                        PatchSite* site);
// Puts our jump to `handler` back on `entry` after another tracker's patch
// replaced it (or puts it there first, for an entry patched only over another
// tracker's jump): as ApplyPatch over that tracker's jump, so site->next
// becomes its hook and the handler keeps reporting before calling it. Does
// nothing (OK) unless the entry holds another tracker's jump and `wanted()`,
// asked under the patch mutex, is true (a Disable under way is not undone).
// Errors as ApplyPatch.
absl::Status Rechain(const char* name, void* entry, void* handler, PatchSite* site,
                     bool (*wanted)() noexcept);
// Patches `entry` whose first instruction is too short for a 5-byte jump:
// `jmp rel32` to the trampoline at entry + hop (padding that nothing
// executes) first, then a 2-byte `jmp rel8` at the entry to it. `expected`
// holds the hop + 5 bytes the entry must start with (at most 56); the 5
// padding bytes may instead hold the `jmp rel32` of an earlier installation,
// which is rewritten (it is only reached through the entry's jump, which was
// removed). ENOTSUP (naming the function) if the bytes differ, or as ApplyPatch.
absl::Status ApplyHopPatch(const char* name, void* entry, const uint8_t* expected, int hop,
                           void* handler, PatchSite* site);
// True if `entry` starts with a jump to another tracker's hook (one of the
// forms ApplyPatch chains to), not to one of our trampolines.
bool HoldsAnotherTrackersJump(void* entry);
// The first 8 bytes of code at `entry` (8-byte aligned), read with one plain
// move that sanitizers do not instrument (they keep no shadow for libc's text).
uint64_t ReadCodeWord(const void* entry);
// Restores the original bytes. EBUSY if the entry no longer holds our jump
// (someone patched over us): it is then left alone.
absl::Status RemovePatch(PatchSite* site);

// fork() (fork_guard.h, lock 2): takes the patch mutex before the fork;
// releases it after, in the parent and in the child. Code patches and
// trampolines are inherited by the child and stay valid there.
void LockForFork();
void UnlockAfterFork();

}  // namespace patch_monitor
}  // namespace mrcache

#endif  // MRCACHE_MONITORS_CODE_PATCH_H_
