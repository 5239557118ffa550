// code_patch.cc: trampolines, reading and writing code words, and the
// patches themselves (code_patch.h).
#include "mrcache/monitors/code_patch.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "mrcache/errno_status.h"
#include "mrcache/internal/mutex.h"

namespace mrcache {
namespace patch_monitor {
namespace {

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

constexpr size_t kSlotSize = 16;  // ff 25 00 00 00 00 <8-byte target> + 2 pad

struct TrampolinePage {
  uint8_t* base = nullptr;
  size_t used = 0;
};
constexpr int kMaxTrampolinePages = 16;
struct SlotOwner {
  void* entry;
  uint8_t* slot;
};
constexpr int kMaxSlots = 256;
// Taken to patch or unpatch, and across fork (fork_guard.h). A global that
// is constant-initialised and never destroyed (mutex.h).
ABSL_CONST_INIT Mutex g_patch_mu;
TrampolinePage g_pages[kMaxTrampolinePages] ABSL_GUARDED_BY(g_patch_mu);
SlotOwner g_slot_owners[kMaxSlots] ABSL_GUARDED_BY(g_patch_mu);
int g_num_slot_owners ABSL_GUARDED_BY(g_patch_mu) = 0;

bool WithinRel32(const void* from_next, const void* to) {
  intptr_t d = reinterpret_cast<intptr_t>(to) - reinterpret_cast<intptr_t>(from_next);
  return d >= INT32_MIN && d <= INT32_MAX;
}

// Maps a page within reach of `entry`, searching outwards in 16 MiB steps.
// nullptr with errno from the last mmap if no place was free.
uint8_t* MapPageNear(void* entry) {
  long page = getpagesize();
  uintptr_t e = reinterpret_cast<uintptr_t>(entry) & ~static_cast<uintptr_t>(page - 1);
  int last_error = EEXIST;
  for (uintptr_t d = uintptr_t{16} << 20; d < (uintptr_t{1} << 31) - (uintptr_t{64} << 20);
       d += uintptr_t{16} << 20) {
    for (int sign = -1; sign <= 1; sign += 2) {
      if (sign < 0 && e < d) continue;
      uintptr_t want = sign < 0 ? e - d : e + d;
      void* p = mmap(reinterpret_cast<void*>(want), page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (p == MAP_FAILED) {
        last_error = errno;
        continue;
      }
      if (p != reinterpret_cast<void*>(want)) {  // kernels without NOREPLACE
        munmap(p, page);
        continue;
      }
      return static_cast<uint8_t*>(p);
    }
  }
  errno = last_error;
  return nullptr;
}

// A slot that jumps to `handler`, reachable by a rel32 jump that ends at
// `jump_end`; one per (entry, handler), reused by every later installation
// (the library stays loaded once it has patched libc: PinLibrary).
absl::Status SlotFor(const char* name, void* entry, uint8_t* jump_end, void* handler, uint8_t** out)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_patch_mu) {
  for (int i = 0; i < g_num_slot_owners; ++i) {
    if (g_slot_owners[i].entry == entry) {
      uint64_t target;
      memcpy(&target, g_slot_owners[i].slot + 6, 8);
      if (target == reinterpret_cast<uint64_t>(handler)) {
        *out = g_slot_owners[i].slot;
        return absl::OkStatus();
      }
    }
  }
  std::string what = std::string("patch monitor: no trampoline for ") + name + ": ";
  if (g_num_slot_owners == kMaxSlots) {
    return ErrnoStatus(ENOSPC, what + "all " + std::to_string(kMaxSlots) + " slots are in use");
  }
  size_t page = static_cast<size_t>(getpagesize());
  TrampolinePage* tp = nullptr;
  for (TrampolinePage& p : g_pages) {
    if (p.base != nullptr && p.used + kSlotSize <= page && WithinRel32(jump_end, p.base) &&
        WithinRel32(jump_end, p.base + page)) {
      tp = &p;
      break;
    }
  }
  if (tp == nullptr) {
    for (TrampolinePage& p : g_pages) {
      if (p.base == nullptr) {
        p.base = MapPageNear(entry);
        if (p.base == nullptr) {
          int err = errno;
          return ErrnoStatus(err, what + "no page can be mapped within 2 GiB of it (last mmap: " +
                                      strerror(err) + ")");
        }
        tp = &p;
        break;
      }
    }
  }
  if (tp == nullptr) {
    return ErrnoStatus(ENOSPC, what + "all " + std::to_string(kMaxTrampolinePages) +
                                   " trampoline pages are in use");
  }
  uint8_t* slot = tp->base + tp->used;
  // The page may already hold the slots of installed patches that other
  // threads are jumping through right now: keep it executable while the new
  // slot is written (a kernel that refuses writable+executable pages gets the
  // old, briefly non-executable, write).
  // (syscall(), not mprotect(): the patched mprotect takes the patch mutex
  // when it protects a page holding a patched entry.)
  if (syscall(SYS_mprotect, tp->base, page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0 &&
      syscall(SYS_mprotect, tp->base, page, PROT_READ | PROT_WRITE) != 0) {
    int err = errno;
    return ErrnoStatus(err, what + "mprotect(RW) of its trampoline page failed: " + strerror(err));
  }
  static const uint8_t kJmpRipIndirect[6] = {0xff, 0x25, 0, 0, 0, 0};
  memcpy(slot, kJmpRipIndirect, 6);
  uint64_t target = reinterpret_cast<uint64_t>(handler);
  memcpy(slot + 6, &target, 8);
  slot[14] = slot[15] = 0xcc;
  if (syscall(SYS_mprotect, tp->base, page, PROT_READ | PROT_EXEC) != 0) {
    int err = errno;
    return ErrnoStatus(err, what + "mprotect(RX) of its trampoline page failed: " + strerror(err));
  }
  tp->used += kSlotSize;
  g_slot_owners[g_num_slot_owners++] = {entry, slot};
  *out = slot;
  return absl::OkStatus();
}

std::string Hex(const uint8_t* p, int n) {
  std::string s;
  char b[4];
  for (int i = 0; i < n; ++i) {
    snprintf(b, sizeof(b), "%02x", p[i]);
    if (i) s += ' ';
    s += b;
  }
  return s;
}

bool StartsWithJump(const uint8_t* p) {
  return p[0] == 0xe9 || p[0] == 0xeb || (p[0] == 0xff && p[1] == 0x25) ||
         ((p[0] == 0x48 || p[0] == 0x49) && (p[1] == 0xb8 || p[1] == 0xbb)) || p[0] == 0xcc;
}

// Code words are read and written with plain aligned 8-byte moves (atomic on
// x86-64) in inline assembly: sanitizers must not instrument accesses to
// libc's text, for which they keep no shadow memory.

// The hook another tracker's patch at `entry` jumps to (the forms
// ApplyPatch's contract lists), or nullptr if `code` (the entry's first 16
// bytes) is none of them.
void* ForeignHook(const uint8_t* entry, const uint8_t (&code)[16]) {
  if (code[0] == 0xe9) {
    int32_t rel;
    memcpy(&rel, code + 1, 4);
    return const_cast<uint8_t*>(entry + 5 + rel);
  }
  if (code[0] == 0xff && code[1] == 0x25) {
    int32_t disp;
    memcpy(&disp, code + 2, 4);
    return reinterpret_cast<void*>(ReadCodeWord(entry + 6 + disp));
  }
  uint64_t imm;
  memcpy(&imm, code + 2, 8);
  if (code[0] == 0x48 && code[1] == 0xb8 && code[10] == 0xff && code[11] == 0xe0) {
    return reinterpret_cast<void*>(imm);  // movabs rax, imm64; jmp rax
  }
  if (code[0] == 0x49 && code[1] == 0xbb && code[10] == 0x41 && code[11] == 0xff &&
      code[12] == 0xe3) {
    return reinterpret_cast<void*>(imm);  // movabs r11, imm64; jmp r11
  }
  return nullptr;
}

// True if `target` is one of our trampoline slots (the entry holds our own
// patch already).
bool IsOurSlot(const void* target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_patch_mu) {
  for (int i = 0; i < g_num_slot_owners; ++i) {
    if (g_slot_owners[i].slot == target) return true;
  }
  return false;
}

void WriteCodeWord(void* entry, uint64_t value) {
  asm volatile("movq %1, (%0)" : : "r"(entry), "r"(value) : "memory");
}

// Writes 8 bytes at an 8-aligned code address with one atomic store.
absl::Status StoreCode(const char* name, void* entry, uint64_t value) {
  long page = getpagesize();
  void* page_start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(entry) &
                                             ~static_cast<uintptr_t>(page - 1));
  if (syscall(SYS_mprotect, page_start, page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) {
    return ErrnoStatus(errno, std::string("patch monitor: mprotect(RWX) of ") + name + " failed");
  }
  WriteCodeWord(entry, value);
  if (syscall(SYS_mprotect, page_start, page, PROT_READ | PROT_EXEC) != 0) {
    return ErrnoStatus(errno, std::string("patch monitor: mprotect(RX) of ") + name + " failed");
  }
  return absl::OkStatus();
}

// OK if `entry` exists and is 8-byte aligned (one atomic store can patch
// it); ENOTSUP naming it otherwise.
absl::Status CheckPatchable(const char* name, const void* entry) {
  if (entry == nullptr) {
    return ErrnoStatus(ENOTSUP, std::string("patch monitor: ") + name + " not found in libc");
  }
  if (reinterpret_cast<uintptr_t>(entry) % 8 != 0) {
    return ErrnoStatus(ENOTSUP, std::string("patch monitor: ") + name +
                                    " entry is not 8-byte aligned; refusing a non-atomic patch");
  }
  return absl::OkStatus();
}

// The ENOTSUP for an entry whose first `n` bytes, `current`, are not the
// `expected` code: which bytes, and whether someone's jump is there already.
absl::Status UnexpectedCode(const char* name, const uint8_t* current, const uint8_t* expected,
                            int n) {
  const std::string why = StartsWithJump(current)
                              ? " already starts with a jump (patched by another library, or "
                                "patched twice)"
                              : " is not the expected glibc 2.36 code";
  return ErrnoStatus(ENOTSUP, std::string("patch monitor: refusing to patch ") + name + ": entry" +
                                  why + " (found " + Hex(current, n) + ", expected " +
                                  Hex(expected, n) + ")");
}

// The first 16 bytes of code at `entry` (8-byte aligned).
void ReadCode16(const void* entry, uint8_t (&out)[16]) {
  for (int i = 0; i < 16; i += 8) {
    uint64_t word = ReadCodeWord(static_cast<const uint8_t*>(entry) + i);
    memcpy(out + i, &word, 8);
  }
}

// The hook of another tracker's jump at `entry`, whose first 16 bytes are
// `code`; nullptr if the entry holds no jump we decode, or our own.
void* AnotherTrackersHook(void* entry, const uint8_t (&code)[16])
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_patch_mu) {
  void* hook = ForeignHook(static_cast<uint8_t*>(entry), code);
  return hook != nullptr && !IsOurSlot(hook) ? hook : nullptr;
}

// Writes our jump to `handler` over `entry`, whose first bytes are `current`;
// the handler calls `next` (another tracker's hook, or nullptr for glibc's
// code) after reporting.
absl::Status PatchLocked(const char* name, void* entry, const uint8_t (&current)[16], void* next,
                         void* handler, PatchSite* site) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_patch_mu) {
  uint8_t* slot = nullptr;
  absl::Status got = SlotFor(name, entry, static_cast<uint8_t*>(entry) + 5, handler, &slot);
  if (!got.ok()) return got;
  uint8_t patched[8];
  memcpy(patched, current, 8);
  int32_t rel = static_cast<int32_t>(reinterpret_cast<intptr_t>(slot) -
                                     reinterpret_cast<intptr_t>(entry) - 5);
  patched[0] = 0xe9;
  memcpy(patched + 1, &rel, 4);
  uint64_t value;
  memcpy(&value, patched, 8);
  // The handler may run as soon as the jump is stored: its next first.
  void* previous_next = __atomic_load_n(&site->next, __ATOMIC_ACQUIRE);
  __atomic_store_n(&site->next, next, __ATOMIC_RELEASE);
  absl::Status s = StoreCode(name, entry, value);
  if (!s.ok()) {
    __atomic_store_n(&site->next, previous_next, __ATOMIC_RELEASE);
    return s;
  }
  site->name = name;
  site->entry = entry;
  memcpy(site->original, current, 8);
  site->hop = 0;
  site->applied = true;
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyPatch(const char* name, void* entry, const uint8_t (&expected)[8], void* handler,
                        PatchSite* site) {
#if !defined(__x86_64__)
  return ErrnoStatus(ENOTSUP, std::string("patch monitor: ") + name + ": x86-64 only");
#endif
  MutexLock lock(&g_patch_mu);
  absl::Status patchable = CheckPatchable(name, entry);
  if (!patchable.ok()) return patchable;
  uint8_t current[16];
  ReadCode16(entry, current);
  void* next = nullptr;
  if (memcmp(current, expected, 8) != 0) {
    next = AnotherTrackersHook(entry, current);
    if (next == nullptr) return UnexpectedCode(name, current, expected, 8);
  }
  return PatchLocked(name, entry, current, next, handler, site);
}

absl::Status Rechain(const char* name, void* entry, void* handler, PatchSite* site,
                     bool (*wanted)() noexcept) {
#if !defined(__x86_64__)
  return absl::OkStatus();
#endif
  MutexLock lock(&g_patch_mu);
  if (!wanted() || !CheckPatchable(name, entry).ok()) return absl::OkStatus();
  uint8_t current[16];
  ReadCode16(entry, current);
  void* next = AnotherTrackersHook(entry, current);
  if (next == nullptr) return absl::OkStatus();
  return PatchLocked(name, entry, current, next, handler, site);
}

absl::Status ApplyHopPatch(const char* name, void* entry, const uint8_t* expected, int hop_at,
                           void* handler, PatchSite* site) {
  const size_t code_bytes = static_cast<size_t>(hop_at) + 5;
  uint8_t current[64];
  if (code_bytes + 8 > sizeof(current) || hop_at % 8 + 5 > 8) {
    return ErrnoStatus(EINVAL, std::string("patch monitor: ") + name +
                                   ": the padding jump must fit in one aligned word within " +
                                   std::to_string(sizeof(current) - 8) + " bytes");
  }
  MutexLock lock(&g_patch_mu);
  absl::Status patchable = CheckPatchable(name, entry);
  if (!patchable.ok()) return patchable;
  uint8_t* code = static_cast<uint8_t*>(entry);
  for (size_t i = 0; i < code_bytes + 8; i += 8) {
    uint64_t w = ReadCodeWord(code + i);
    memcpy(current + i, &w, 8);
  }
  bool padding_ok = memcmp(current + hop_at, expected + hop_at, 5) == 0 || current[hop_at] == 0xe9;
  if (memcmp(current, expected, hop_at) != 0 || !padding_ok) {
    return UnexpectedCode(name, current, expected, static_cast<int>(code_bytes));
  }
  uint8_t* hop = code + hop_at;
  uint8_t* slot = nullptr;
  absl::Status got = SlotFor(name, entry, hop + 5, handler, &slot);
  if (!got.ok()) return got;
  uint8_t* word_at = code + (hop_at & ~7);
  uint8_t word[8];
  memcpy(word, current + (hop_at & ~7), 8);
  int32_t rel =
      static_cast<int32_t>(reinterpret_cast<intptr_t>(slot) - reinterpret_cast<intptr_t>(hop + 5));
  word[hop_at % 8] = 0xe9;
  memcpy(word + hop_at % 8 + 1, &rel, 4);
  uint64_t value;
  memcpy(&value, word, 8);
  absl::Status s = StoreCode(name, word_at, value);
  if (!s.ok()) return s;
  uint8_t patched[8];
  memcpy(patched, current, 8);
  patched[0] = 0xeb;
  patched[1] = static_cast<uint8_t>(hop_at - 2);
  memcpy(&value, patched, 8);
  s = StoreCode(name, entry, value);
  if (!s.ok()) return s;
  site->name = name;
  site->entry = entry;
  memcpy(site->original, current, 8);
  site->hop = hop_at;
  site->applied = true;
  return absl::OkStatus();
}

bool HoldsAnotherTrackersJump(void* entry) {
  if (entry == nullptr || reinterpret_cast<uintptr_t>(entry) % 8 != 0) return false;
  uint8_t code[16];
  ReadCode16(entry, code);
  MutexLock lock(&g_patch_mu);
  return AnotherTrackersHook(entry, code) != nullptr;
}

absl::Status RemovePatch(PatchSite* site) {
  if (!site->applied) return absl::OkStatus();
  MutexLock lock(&g_patch_mu);
  uint8_t code[8];
  uint64_t word = ReadCodeWord(site->entry);
  memcpy(code, &word, 8);
  bool ours = site->hop == 0 ? code[0] == 0xe9 && memcmp(code + 5, site->original + 5, 3) == 0
                             : code[0] == 0xeb && code[1] == site->hop - 2 &&
                                   memcmp(code + 2, site->original + 2, 6) == 0;
  if (!ours) {
    return ErrnoStatus(EBUSY, std::string("patch monitor: ") + site->name +
                                  " was patched over by someone else; leaving it (found " +
                                  Hex(code, 8) + ")");
  }
  uint64_t value;
  memcpy(&value, site->original, 8);
  absl::Status s = StoreCode(site->name, site->entry, value);
  if (s.ok()) site->applied = false;
  return s;
}

// The fork handlers lock in one call and unlock in another: beyond the
// analysis (fork_guard.h states the protocol).
void LockForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { g_patch_mu.lock(); }
void UnlockAfterFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { g_patch_mu.unlock(); }

uint64_t ReadCodeWord(const void* entry) {
  uint64_t value;
  asm volatile("movq (%1), %0" : "=r"(value) : "r"(entry) : "memory");
  return value;
}

}  // namespace patch_monitor
}  // namespace mrcache
