// patch_handlers.cc: the handlers of the patched entries and of glibc's
// syscall() (patch_handlers.h).
#include "mrcache/monitors/patch_handlers.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "mrcache/monitors/loader_releases.h"
#include "mrcache/monitors/memory_events.h"
#include "mrcache/monitors/patch_monitor.h"
#include "mrcache/monitors/raw_syscall.h"
#include "mrcache/monitors/release_ranges.h"

extern "C" void* __curbrk;

namespace mrcache {
namespace patch_monitor {

PatchSite g_sites[kNumTargets];

namespace {

std::atomic<bool> g_reporting{false};

// The system call, with glibc's errno convention.
inline long Sys(long nr, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0,
                long a6 = 0) noexcept {
  return SyscallResult(RawSyscall(nr, a1, a2, a3, a4, a5, a6));
}

inline long L(const void* p) noexcept { return reinterpret_cast<long>(p); }

// What a handler calls after reporting: the hook another tracker had put on
// the entry before us (PatchSite::next), as a function of the entry's own
// type; nullptr when the entry held glibc's code, whose whole job the
// handler's system call does.
template <typename Fn>
inline Fn Next(TargetIndex i) noexcept {
  return reinterpret_cast<Fn>(__atomic_load_n(&g_sites[i].next, __ATOMIC_ACQUIRE));
}

}  // namespace

bool Reporting() noexcept { return g_reporting.load(std::memory_order_relaxed); }
void SetReporting(bool on) noexcept { g_reporting.store(on, std::memory_order_seq_cst); }

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

int HandleDlclose(void* handle) noexcept {
  DlcloseFn next = Next<DlcloseFn>(kDlclose);
  DlcloseFn close = next != nullptr ? next : &mrcache_patch_dlclose_original;
  if (!Reporting()) return close(handle);
  return CloseReportingReleases(handle, close);
}

int HandleMprotect(void* addr, size_t length, int prot) noexcept {
  auto next = Next<int (*)(void*, size_t, int)>(kMprotect);
  int result = next != nullptr
                   ? next(addr, length, prot)
                   : static_cast<int>(Sys(SYS_mprotect, L(addr), static_cast<long>(length), prot));
  if (result == 0 && (prot & PROT_EXEC) != 0 && (prot & PROT_WRITE) == 0 && Reporting()) {
    int saved = errno;
    RechainPatchedOver(addr, length);
    errno = saved;
  }
  return result;
}

namespace {

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
extern "C" const void* mrcache_patch_dlclose_got = nullptr;
extern "C" void* mrcache_patch_dlclose_resume = nullptr;
#endif
