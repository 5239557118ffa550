#include "mrcache/monitors/patch_monitor.h"

#include <dlfcn.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "mrcache/errno_status.h"
#include "mrcache/log.h"
#include "mrcache/monitors/loader_releases.h"
#include "mrcache/monitors/memory_events.h"
#include "mrcache/monitors/raw_syscall.h"
#include "mrcache/monitors/release_ranges.h"
#include "mrcache/mutex.h"

extern "C" void* __curbrk;

// glibc's dlclose as it was before the patch (see HandleDlclose).
extern "C" __attribute__((visibility("hidden"))) int mrcache_patch_dlclose_original(void* handle);

namespace mrcache {
namespace patch_monitor {
namespace {

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

std::atomic<bool> g_enabled{false};

inline bool Reporting() noexcept { return g_enabled.load(std::memory_order_relaxed); }

// ---- handlers: report, then perform the system call as glibc would ----

// Each handler that releases memory holds a ReleaseFence across its system
// call (memory_events.h): reported before, marked in flight, reported after.
// The system calls are raw (raw_syscall.h): glibc's syscall() is patched too.

// The system call, with glibc's errno convention.
inline long Sys(long nr, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0,
                long a6 = 0) noexcept {
  return SyscallResult(RawSyscall(nr, a1, a2, a3, a4, a5, a6));
}

inline long L(const void* p) noexcept { return reinterpret_cast<long>(p); }

// The entries, in kTargets' order (each handler finds its own site's next).
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
  kNumTargets
};
PatchSite g_sites[kNumTargets];  // guarded by the installation in monitor.cc

// What a handler calls after reporting: the hook another tracker had put on
// the entry before us (PatchSite::next), as a function of the entry's own
// type; nullptr when the entry held glibc's code, whose whole job the
// handler's system call does.
template <typename Fn>
inline Fn Next(TargetIndex i) noexcept {
  return reinterpret_cast<Fn>(__atomic_load_n(&g_sites[i].next, __ATOMIC_ACQUIRE));
}

int HandleMunmap(void* addr, size_t length) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportMunmap(addr, length);
  if (auto next = Next<int (*)(void*, size_t)>(kMunmap)) return next(addr, length);
  return static_cast<int>(Sys(SYS_munmap, L(addr), static_cast<long>(length)));
}

int HandleMadvise(void* addr, size_t length, int advice) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportMadvise(addr, length, advice);
  if (auto next = Next<int (*)(void*, size_t, int)>(kMadvise)) return next(addr, length, advice);
  return static_cast<int>(Sys(SYS_madvise, L(addr), static_cast<long>(length), advice));
}

int HandleShmdt(const void* addr) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportShmdt(addr);
  if (auto next = Next<int (*)(const void*)>(kShmdt)) return next(addr);
  return static_cast<int>(Sys(SYS_shmdt, L(addr)));
}

// glibc 2.36 brk: __curbrk = syscall(brk, addr); ENOMEM if it stayed below addr.
int HandleBrk(void* addr) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportBrk(addr);
  if (auto next = Next<int (*)(void*)>(kBrk)) return next(addr);
  void* new_break = reinterpret_cast<void*>(RawSyscall(SYS_brk, L(addr)));
  __curbrk = new_break;
  if (new_break < addr) {
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

void* HandleMmap(void* addr, size_t length, int prot, int flags, int fd, off_t offset) noexcept {
  if ((offset & (getpagesize() - 1)) != 0) {  // glibc checks this before the syscall
    errno = EINVAL;
    return MAP_FAILED;
  }
  ReleaseFence fence;
  if (Reporting()) ReportMmap(addr, length, flags);
  if (auto next = Next<void* (*)(void*, size_t, int, int, int, off_t)>(kMmap)) {
    return next(addr, length, prot, flags, fd, offset);
  }
  return reinterpret_cast<void*>(
      Sys(SYS_mmap, L(addr), static_cast<long>(length), prot, flags, fd, offset));
}

// mremap is variadic; on x86-64 the fifth argument (new_address, read only with
// MREMAP_FIXED) arrives in r8 either way, so a 5-argument handler receives it.
void* HandleMremap(void* old_address, size_t old_size, size_t new_size, int flags,
                   void* new_address) noexcept {
  ReleaseFence fence;
  bool reporting = Reporting();
  if (reporting) ReportMremapBefore(old_address, old_size, new_size, flags, new_address);
  auto next = Next<void* (*)(void*, size_t, size_t, int, void*)>(kMremap);
  void* result =
      next != nullptr
          ? next(old_address, old_size, new_size, flags, new_address)
          : reinterpret_cast<void*>(Sys(SYS_mremap, L(old_address), static_cast<long>(old_size),
                                        static_cast<long>(new_size), flags, L(new_address)));
  if (reporting) {
    int saved = errno;
    ReportMremapMoved(old_address, old_size, result);
    errno = saved;
  }
  return result;
}

// shmat(SHM_REMAP) replaces what was mapped at the attach address.
void* HandleShmat(int shmid, const void* addr, int shmflg) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportShmat(shmid, addr, shmflg);
  if (auto next = Next<void* (*)(int, const void*, int)>(kShmat)) return next(shmid, addr, shmflg);
  return reinterpret_cast<void*>(Sys(SYS_shmat, shmid, L(addr), shmflg));
}

// Shrinking, punching or shifting a file drops the pages its mappings show.
// (ftruncate64, truncate64 and fallocate64 are the same entries on x86-64.)
int HandleFtruncate(int fd, off_t length) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportFtruncate(fd, length);
  if (auto next = Next<int (*)(int, off_t)>(kFtruncate)) return next(fd, length);
  return static_cast<int>(Sys(SYS_ftruncate, fd, length));
}

int HandleTruncate(const char* path, off_t length) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportTruncate(path, length);
  if (auto next = Next<int (*)(const char*, off_t)>(kTruncate)) return next(path, length);
  return static_cast<int>(Sys(SYS_truncate, L(path), length));
}

// glibc's fallocate is a cancellation point; the handler makes the plain
// system call, so a patched fallocate is not one (documented in the header).
int HandleFallocate(int fd, int mode, off_t offset, off_t len) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportFallocate(fd, mode, offset, len);
  if (auto next = Next<int (*)(int, int, off_t, off_t)>(kFallocate)) {
    return next(fd, mode, offset, len);
  }
  return static_cast<int>(Sys(SYS_fallocate, fd, mode, offset, len));
}

// sbrk is patched only over another tracker's jump (kTargets): glibc's own
// sbrk lowers the break through brk's entry, which is patched anyway, but a
// tracker's sbrk hook (UCX's) makes the system call inline.
void* HandleSbrk(intptr_t increment) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportSbrk(increment);
  return Next<void* (*)(intptr_t)>(kSbrk)(increment);
}

// The loader unmaps with its own system calls, which no patched entry sees:
// dlclose reports the objects' segments itself (loader_releases.h), around
// glibc's dlclose (through mrcache_patch_dlclose_original, which runs the
// instruction the patch displaced and resumes glibc's code after it) or
// another tracker's hook found on the entry.
int HandleDlclose(void* handle) noexcept {
  DlcloseFn next = Next<DlcloseFn>(kDlclose);
  DlcloseFn close = next != nullptr ? next : &mrcache_patch_dlclose_original;
  if (!Reporting()) return close(handle);
  return CloseReportingReleases(handle, close);
}

// What system call `nr` of glibc's syscall() releases, reported before it
// runs, exactly as the entry point of the same name reports it. brk is the
// raw system call here (glibc's __curbrk is not involved), so the break it
// lowers is the kernel's.
void ReportSyscallBefore(long nr, long a1, long a2, long a3, long a4, long a5) noexcept {
  void* p1 = reinterpret_cast<void*>(a1);
  switch (nr) {
    case SYS_munmap:
      ReportMunmap(p1, static_cast<size_t>(a2));
      break;
    case SYS_mremap:
      ReportMremapBefore(p1, static_cast<size_t>(a2), static_cast<size_t>(a3), static_cast<int>(a4),
                         reinterpret_cast<void*>(a5));
      break;
    case SYS_madvise:
      ReportMadvise(p1, static_cast<size_t>(a2), static_cast<int>(a3));
      break;
    case SYS_brk: {
      uintptr_t current = static_cast<uintptr_t>(RawSyscall(SYS_brk, 0));
      uintptr_t wanted = static_cast<uintptr_t>(a1);
      if (wanted != 0 && wanted < current) ReportMemoryRelease(p1, current - wanted);
      break;
    }
    case SYS_shmdt:
      ReportShmdt(p1);
      break;
    case SYS_mmap:
      ReportMmap(p1, static_cast<size_t>(a2), static_cast<int>(a4));
      break;
    case SYS_shmat:
      ReportShmat(static_cast<int>(a1), reinterpret_cast<void*>(a2), static_cast<int>(a3));
      break;
    case SYS_ftruncate:
      ReportFtruncate(static_cast<int>(a1), static_cast<off_t>(a2));
      break;
    case SYS_truncate:
      ReportTruncate(static_cast<const char*>(p1), static_cast<off_t>(a2));
      break;
    case SYS_fallocate:
      ReportFallocate(static_cast<int>(a1), static_cast<int>(a2), static_cast<off_t>(a3),
                      static_cast<off_t>(a4));
      break;
    default:
      break;
  }
}

}  // namespace
}  // namespace patch_monitor
}  // namespace mrcache

// ---- glibc's syscall() ----
//
// The patched syscall entry jumps (through its trampoline slot) to
// mrcache_patch_syscall_entry, which keeps every register and the stack as
// the caller left them. Numbers that release memory go on to
// mrcache_patch_syscall_release, a C++ handler entered by a jump, so it sees
// syscall()'s own arguments (the sixth on the stack) and returns to
// syscall()'s caller. Every other number executes the instruction the patch
// displaced (`mov %rdi, %rax`) and jumps back into glibc's syscall() right
// after it: no frame, no register or errno touched, so clone/vfork and
// everything else behave exactly as unpatched.
extern "C" {
// glibc's syscall + 3, set before the entry is patched.
__attribute__((visibility("hidden"))) void* mrcache_patch_syscall_resume = nullptr;
__attribute__((visibility("hidden"))) void mrcache_patch_syscall_entry();

__attribute__((visibility("hidden"), used)) long mrcache_patch_syscall_release(long nr, long a1,
                                                                               long a2, long a3,
                                                                               long a4, long a5,
                                                                               long a6) noexcept {
  using namespace mrcache;
  ReleaseFence fence;
  bool reporting = patch_monitor::Reporting();
  if (reporting) patch_monitor::ReportSyscallBefore(nr, a1, a2, a3, a4, a5);
  long result = SyscallResult(RawSyscall(nr, a1, a2, a3, a4, a5, a6));
  if (reporting && nr == SYS_mremap) {
    int saved = errno;
    ReportMremapMoved(reinterpret_cast<void*>(a1), static_cast<size_t>(a2),
                      reinterpret_cast<void*>(result));
    errno = saved;
  }
  return result;
}
}  // extern "C"

#if defined(__x86_64__)
// The numbers are checked against <sys/syscall.h> below.
asm(R"(
  .text
  .p2align 4
  .globl mrcache_patch_syscall_entry
  .hidden mrcache_patch_syscall_entry
  .type mrcache_patch_syscall_entry, @function
mrcache_patch_syscall_entry:
  cmpq $9, %rdi      # mmap (MAP_FIXED replaces)
  je 1f
  cmpq $11, %rdi     # munmap
  je 1f
  cmpq $12, %rdi     # brk
  je 1f
  cmpq $25, %rdi     # mremap
  je 1f
  cmpq $28, %rdi     # madvise
  je 1f
  cmpq $30, %rdi     # shmat (SHM_REMAP replaces)
  je 1f
  cmpq $67, %rdi     # shmdt
  je 1f
  cmpq $76, %rdi     # truncate
  je 1f
  cmpq $77, %rdi     # ftruncate
  je 1f
  cmpq $285, %rdi    # fallocate
  je 1f
  movq %rdi, %rax
  jmpq *mrcache_patch_syscall_resume(%rip)
1:
  jmp mrcache_patch_syscall_release
  .size mrcache_patch_syscall_entry, .-mrcache_patch_syscall_entry
)");
static_assert(SYS_mmap == 9 && SYS_munmap == 11 && SYS_brk == 12 && SYS_mremap == 25 &&
                  SYS_madvise == 28 && SYS_shmat == 30 && SYS_shmdt == 67 && SYS_truncate == 76 &&
                  SYS_ftruncate == 77 && SYS_fallocate == 285,
              "the numbers mrcache_patch_syscall_entry tests");

// glibc 2.36's dlclose starts with `mov disp32(%rip), %rdx` (7 bytes: the
// address of _rtld_global_ro, from its GOT slot), which the patch's jump
// overwrites. mrcache_patch_dlclose_original loads %rdx as that instruction
// did and jumps to the next one; glibc's code then returns to the caller.
// Both addresses are set before the entry is patched.
extern "C" {
__attribute__((visibility("hidden"))) const void* mrcache_patch_dlclose_got = nullptr;
__attribute__((visibility("hidden"))) void* mrcache_patch_dlclose_resume = nullptr;
}
asm(R"(
  .text
  .p2align 4
  .globl mrcache_patch_dlclose_original
  .hidden mrcache_patch_dlclose_original
  .type mrcache_patch_dlclose_original, @function
mrcache_patch_dlclose_original:
  movq mrcache_patch_dlclose_got(%rip), %rdx
  movq (%rdx), %rdx
  jmpq *mrcache_patch_dlclose_resume(%rip)
  .size mrcache_patch_dlclose_original, .-mrcache_patch_dlclose_original
)");
#else
extern "C" void mrcache_patch_syscall_entry() {}
extern "C" int mrcache_patch_dlclose_original(void*) { return -1; }
#endif

namespace mrcache {
namespace patch_monitor {
namespace {

// ---- trampolines ----

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
  if (mprotect(tp->base, page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0 &&
      mprotect(tp->base, page, PROT_READ | PROT_WRITE) != 0) {
    int err = errno;
    return ErrnoStatus(err, what + "mprotect(RW) of its trampoline page failed: " + strerror(err));
  }
  static const uint8_t kJmpRipIndirect[6] = {0xff, 0x25, 0, 0, 0, 0};
  memcpy(slot, kJmpRipIndirect, 6);
  uint64_t target = reinterpret_cast<uint64_t>(handler);
  memcpy(slot + 6, &target, 8);
  slot[14] = slot[15] = 0xcc;
  if (mprotect(tp->base, page, PROT_READ | PROT_EXEC) != 0) {
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
uint64_t ReadCodeWord(const void* entry) {
  uint64_t value;
  asm volatile("movq (%1), %0" : "=r"(value) : "r"(entry) : "memory");
  return value;
}

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

// True if `entry` starts with a jump to another tracker's hook (not ours).
bool HoldsAnotherTrackersJump(void* entry) {
  if (entry == nullptr || reinterpret_cast<uintptr_t>(entry) % 8 != 0) return false;
  uint8_t code[16];
  for (int i = 0; i < 16; i += 8) {
    uint64_t word = ReadCodeWord(static_cast<uint8_t*>(entry) + i);
    memcpy(code + i, &word, 8);
  }
  void* hook = ForeignHook(static_cast<uint8_t*>(entry), code);
  MutexLock lock(&g_patch_mu);
  return hook != nullptr && !IsOurSlot(hook);
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

struct Target {
  const char* name;
  uint8_t expected[8];  // glibc 2.36 x86-64
  void* handler;
  // Patched only where another tracker's jump is there to chain to; glibc's
  // own code is left alone (what it releases reaches another patched entry).
  bool only_over_another_tracker = false;
};

const Target kTargets[] = {
    {"munmap",
     {0xb8, 0x0b, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleMunmap)},
    {"madvise",
     {0xb8, 0x1c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleMadvise)},
    {"shmdt",
     {0xb8, 0x43, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleShmdt)},
    {"brk", {0xb8, 0x0c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48}, reinterpret_cast<void*>(&HandleBrk)},
    {"mmap",
     {0x41, 0x89, 0xca, 0x41, 0xf7, 0xc1, 0xff, 0x0f},
     reinterpret_cast<void*>(&HandleMmap)},
    {"mremap",
     {0x48, 0x83, 0xec, 0x58, 0x4c, 0x89, 0x44, 0x24},
     reinterpret_cast<void*>(&HandleMremap)},
    {"shmat",
     {0xb8, 0x1e, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleShmat)},
    {"ftruncate",
     {0xb8, 0x4d, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleFtruncate)},
    {"truncate",
     {0xb8, 0x4c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleTruncate)},
    // cmpb $0, __libc_single_threaded(%rip): the 4-byte displacement is this
    // build's; another glibc 2.36 build is refused, never mispatched.
    {"fallocate",
     {0x80, 0x3d, 0x21, 0xe8, 0x0d, 0x00, 0x00, 0x49},
     reinterpret_cast<void*>(&HandleFallocate)},
    {"sbrk", {}, reinterpret_cast<void*>(&HandleSbrk), true},
    // mov _rtld_global_ro@GOTPCREL(%rip), %rdx: the displacement is this
    // build's (mrcache_patch_dlclose_original replays the instruction).
    {"dlclose",
     {0x48, 0x8b, 0x15, 0xc1, 0xe1, 0x14, 0x00, 0x48},
     reinterpret_cast<void*>(&HandleDlclose)},
};
static_assert(sizeof(kTargets) / sizeof(kTargets[0]) == kNumTargets, "one site per target");

// glibc 2.36's syscall(): the whole function (0x00-0x32, ending in `ret`),
// then the first 5 bytes of the nop padding after it. Its first instruction
// (`mov %rdi, %rax`) is 3 bytes, too short for a 5-byte jump that would not
// tear the next one; so the entry gets a 2-byte `jmp rel8` to the padding at
// kSyscallHop, which nothing executes, and the padding gets the `jmp rel32`
// to the trampoline. A thread that has executed the first instruction sees
// unchanged code from offset 3 on. The displacement at 0x25 is this build's
// (errno's TLS offset); another build is refused, never mispatched.
constexpr int kSyscallHop = 0x33;
constexpr uint8_t kSyscallCode[kSyscallHop + 5] = {
    0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x48, 0x89, 0xca, 0x4d, 0x89,
    0xc2, 0x4d, 0x89, 0xc8, 0x4c, 0x8b, 0x4c, 0x24, 0x08, 0x0f, 0x05, 0x48, 0x3d, 0x01,
    0xf0, 0xff, 0xff, 0x73, 0x01, 0xc3, 0x48, 0x8b, 0x0d, 0xa7, 0x15, 0x0d, 0x00, 0xf7,
    0xd8, 0x64, 0x89, 0x01, 0x48, 0x83, 0xc8, 0xff, 0xc3, 0x66, 0x2e, 0x0f, 0x1f, 0x84};
static_assert(kSyscallHop % 8 + 5 <= 8, "the padding jump must fit in one aligned word");
PatchSite g_syscall_site;  // guarded by the installation in monitor.cc

// Points mrcache_patch_dlclose_original at glibc's dlclose `entry` when the
// entry holds the code it replays (`expected`); otherwise ApplyPatch either
// refuses the entry or chains to the hook found there, and the replay is
// never used.
void PrepareDlcloseOriginal(void* entry, const uint8_t (&expected)[8]) {
  if (entry == nullptr || reinterpret_cast<uintptr_t>(entry) % 8 != 0) return;
  const uint64_t word = ReadCodeWord(entry);
  if (memcmp(&word, expected, 8) != 0) return;
  int32_t disp;
  memcpy(&disp, expected + 3, 4);
  uint8_t* next = static_cast<uint8_t*>(entry) + 7;
  mrcache_patch_dlclose_got = next + disp;
  mrcache_patch_dlclose_resume = next;
}

// Keeps this library loaded for the life of the process once it has patched
// libc: trampolines and handlers stay where the patched code jumps (a thread
// may still be on its way through one), and a later dlopen of the library
// reuses its trampoline slots instead of mapping new pages near libc.
void PinLibrary() {
  static bool pinned = false;  // under the installation lock of monitor.cc
  if (pinned) return;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&PinLibrary), &info) != 0 && info.dli_fname != nullptr &&
      info.dli_fname[0] != '\0') {
    // NOLOAD: never loads anything; NODELETE: the object is never unloaded.
    // The main executable is not found by name (nothing to pin there).
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  }
  pinned = true;
}

// Patches glibc's syscall() as kSyscallCode describes: `jmp rel32` from the
// padding to the trampoline first, then `jmp rel8` at the entry. The padding
// jump of an earlier installation is accepted and rewritten (it is only
// reached through the entry's jump, which was removed).
absl::Status ApplySyscallPatch(void* entry, void* handler, PatchSite* site) {
  const char* name = "syscall";
  MutexLock lock(&g_patch_mu);
  if (entry == nullptr) {
    return ErrnoStatus(ENOTSUP, "patch monitor: syscall not found in libc");
  }
  if (reinterpret_cast<uintptr_t>(entry) % 8 != 0) {
    return ErrnoStatus(ENOTSUP,
                       "patch monitor: syscall entry is not 8-byte aligned; refusing a "
                       "non-atomic patch");
  }
  uint8_t* code = static_cast<uint8_t*>(entry);
  uint8_t current[sizeof(kSyscallCode) + 8];
  for (size_t i = 0; i < sizeof(current); i += 8) {
    uint64_t w = ReadCodeWord(code + i);
    memcpy(current + i, &w, 8);
  }
  bool padding_ok = memcmp(current + kSyscallHop, kSyscallCode + kSyscallHop, 5) == 0 ||
                    current[kSyscallHop] == 0xe9;
  if (memcmp(current, kSyscallCode, kSyscallHop) != 0 || !padding_ok) {
    std::string why = StartsWithJump(current)
                          ? " already starts with a jump (patched by another library, or "
                            "patched twice)"
                          : " is not the expected glibc 2.36 code";
    return ErrnoStatus(ENOTSUP, std::string("patch monitor: refusing to patch syscall: entry") +
                                    why + " (found " + Hex(current, sizeof(kSyscallCode)) +
                                    ", expected " + Hex(kSyscallCode, sizeof(kSyscallCode)) + ")");
  }
  uint8_t* hop = code + kSyscallHop;
  uint8_t* slot = nullptr;
  absl::Status got = SlotFor(name, entry, hop + 5, handler, &slot);
  if (!got.ok()) return got;
  uint8_t* word_at = code + (kSyscallHop & ~7);
  uint8_t word[8];
  memcpy(word, current + (kSyscallHop & ~7), 8);
  int32_t rel =
      static_cast<int32_t>(reinterpret_cast<intptr_t>(slot) - reinterpret_cast<intptr_t>(hop + 5));
  word[kSyscallHop % 8] = 0xe9;
  memcpy(word + kSyscallHop % 8 + 1, &rel, 4);
  uint64_t value;
  memcpy(&value, word, 8);
  absl::Status s = StoreCode(name, word_at, value);
  if (!s.ok()) return s;
  uint8_t patched[8];
  memcpy(patched, current, 8);
  patched[0] = 0xeb;
  patched[1] = static_cast<uint8_t>(kSyscallHop - 2);
  memcpy(&value, patched, 8);
  s = StoreCode(name, entry, value);
  if (!s.ok()) return s;
  site->name = name;
  site->entry = entry;
  memcpy(site->original, current, 8);
  site->hop = kSyscallHop;
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
  if (entry == nullptr) {
    return ErrnoStatus(ENOTSUP, std::string("patch monitor: ") + name + " not found in libc");
  }
  if (reinterpret_cast<uintptr_t>(entry) % 8 != 0) {
    return ErrnoStatus(ENOTSUP, std::string("patch monitor: ") + name +
                                    " entry is not 8-byte aligned; refusing a non-atomic patch");
  }
  uint8_t current[16];
  for (int i = 0; i < 16; i += 8) {
    uint64_t word = ReadCodeWord(static_cast<uint8_t*>(entry) + i);
    memcpy(current + i, &word, 8);
  }
  void* next = nullptr;
  if (memcmp(current, expected, 8) != 0) {
    next = ForeignHook(static_cast<uint8_t*>(entry), current);
    if (next != nullptr && IsOurSlot(next)) next = nullptr;
  }
  if (memcmp(current, expected, 8) != 0 && next == nullptr) {
    std::string why = StartsWithJump(current)
                          ? " already starts with a jump (patched by another library, or "
                            "patched twice)"
                          : " is not the expected glibc 2.36 code";
    return ErrnoStatus(ENOTSUP, std::string("patch monitor: refusing to patch ") + name +
                                    ": entry" + why + " (found " + Hex(current, 8) + ", expected " +
                                    Hex(expected, 8) + ")");
  }
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
  __atomic_store_n(&site->next, next, __ATOMIC_RELEASE);
  absl::Status s = StoreCode(name, entry, value);
  if (!s.ok()) {
    __atomic_store_n(&site->next, nullptr, __ATOMIC_RELEASE);
    return s;
  }
  site->name = name;
  site->entry = entry;
  memcpy(site->original, current, 8);
  site->hop = 0;
  site->applied = true;
  return absl::OkStatus();
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

absl::Status Enable() {
#if defined(__SANITIZE_THREAD__)
  // glibc calls madvise(MADV_DONTNEED) on a thread's stack after the thread
  // has finished (nptl advise_stack_range); through the patched entry that
  // runs instrumented code after ThreadSanitizer tore the thread's state down.
  return ErrnoStatus(ENOTSUP,
                     "patch monitor: not available under ThreadSanitizer (glibc "
                     "releases exiting threads' stacks after TSan's thread teardown)");
#endif
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (libc == nullptr) return ErrnoStatus(ENOTSUP, "patch monitor: libc.so.6 is not loaded");
  absl::Status status;
  int applied = 0;
  for (; applied < kNumTargets; ++applied) {
    const Target& t = kTargets[applied];
    void* entry = dlsym(libc, t.name);
    if (t.only_over_another_tracker && !HoldsAnotherTrackersJump(entry)) continue;
    if (applied == kDlclose) PrepareDlcloseOriginal(entry, t.expected);
    status = ApplyPatch(t.name, entry, t.expected, t.handler, &g_sites[applied]);
    if (!status.ok()) break;
  }
  if (status.ok()) {
    void* entry = dlsym(libc, "syscall");
    mrcache_patch_syscall_resume = entry == nullptr ? nullptr : static_cast<uint8_t*>(entry) + 3;
    status = ApplySyscallPatch(entry, reinterpret_cast<void*>(&mrcache_patch_syscall_entry),
                               &g_syscall_site);
  }
  dlclose(libc);
  if (!status.ok()) {
    while (applied-- > 0) RemovePatch(&g_sites[applied]).IgnoreError();
    return status;
  }
  PinLibrary();
  g_enabled.store(true, std::memory_order_seq_cst);
  return absl::OkStatus();
}

void Disable() {
  g_enabled.store(false, std::memory_order_seq_cst);
  auto remove = [](PatchSite* site) {
    absl::Status s = RemovePatch(site);
    if (!s.ok()) Log(LogLevel::kError, s.message());
  };
  remove(&g_syscall_site);
  for (PatchSite& site : g_sites) remove(&site);
}

bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

// The fork handlers lock in one call and unlock in another: beyond the
// analysis (fork_guard.h states the protocol).
void LockForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { g_patch_mu.lock(); }
void UnlockAfterFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { g_patch_mu.unlock(); }

}  // namespace patch_monitor
}  // namespace mrcache
