#include "mrcache/monitors/symbols_monitor.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdint>

#include "mrcache/errno_status.h"
#include "mrcache/monitors/loader_releases.h"
#include "mrcache/monitors/memory_events.h"
#include "mrcache/monitors/release_ranges.h"

extern "C" void* __curbrk;

namespace mrcache {
namespace symbols_monitor {
namespace {

std::atomic<bool> g_enabled{false};

using MunmapFn = int (*)(void*, size_t);
using MmapFn = void* (*)(void*, size_t, int, int, int, off_t);
using MremapFn = void* (*)(void*, size_t, size_t, int, ...);
using MadviseFn = int (*)(void*, size_t, int);
using BrkFn = int (*)(void*);
using SbrkFn = void* (*)(intptr_t);
using ShmdtFn = int (*)(const void*);
using ShmatFn = void* (*)(int, const void*, int);
using FtruncateFn = int (*)(int, off_t);
using TruncateFn = int (*)(const char*, off_t);
using FallocateFn = int (*)(int, int, off_t, off_t);

struct NextDefinitions {
  MunmapFn munmap;
  MmapFn mmap;
  MmapFn mmap64;
  MremapFn mremap;
  MadviseFn madvise;
  MadviseFn posix_madvise;
  BrkFn brk;
  SbrkFn sbrk;
  ShmdtFn shmdt;
  ShmatFn shmat;
  FtruncateFn ftruncate;
  FtruncateFn ftruncate64;
  TruncateFn truncate;
  TruncateFn truncate64;
  FallocateFn fallocate;
  FallocateFn fallocate64;
};

NextDefinitions g_next;
enum : int { kUnresolved = 0, kResolving = 1, kResolved = 2 };
std::atomic<int> g_state{kUnresolved};

// True once g_next is usable. While another call (maybe this thread's, from
// inside dlsym) is resolving, false: the caller makes the raw system call.
bool Resolve() noexcept {
  int s = g_state.load(std::memory_order_acquire);
  if (s == kResolved) return true;
  if (s == kResolving) return false;
  int expected = kUnresolved;
  if (!g_state.compare_exchange_strong(expected, kResolving, std::memory_order_acq_rel)) {
    return expected == kResolved;
  }
  NextDefinitions n;
  n.munmap = reinterpret_cast<MunmapFn>(dlsym(RTLD_NEXT, "munmap"));
  n.mmap = reinterpret_cast<MmapFn>(dlsym(RTLD_NEXT, "mmap"));
  n.mmap64 = reinterpret_cast<MmapFn>(dlsym(RTLD_NEXT, "mmap64"));
  n.mremap = reinterpret_cast<MremapFn>(dlsym(RTLD_NEXT, "mremap"));
  n.madvise = reinterpret_cast<MadviseFn>(dlsym(RTLD_NEXT, "madvise"));
  n.posix_madvise = reinterpret_cast<MadviseFn>(dlsym(RTLD_NEXT, "posix_madvise"));
  n.brk = reinterpret_cast<BrkFn>(dlsym(RTLD_NEXT, "brk"));
  n.sbrk = reinterpret_cast<SbrkFn>(dlsym(RTLD_NEXT, "sbrk"));
  n.shmdt = reinterpret_cast<ShmdtFn>(dlsym(RTLD_NEXT, "shmdt"));
  n.shmat = reinterpret_cast<ShmatFn>(dlsym(RTLD_NEXT, "shmat"));
  n.ftruncate = reinterpret_cast<FtruncateFn>(dlsym(RTLD_NEXT, "ftruncate"));
  n.ftruncate64 = reinterpret_cast<FtruncateFn>(dlsym(RTLD_NEXT, "ftruncate64"));
  n.truncate = reinterpret_cast<TruncateFn>(dlsym(RTLD_NEXT, "truncate"));
  n.truncate64 = reinterpret_cast<TruncateFn>(dlsym(RTLD_NEXT, "truncate64"));
  n.fallocate = reinterpret_cast<FallocateFn>(dlsym(RTLD_NEXT, "fallocate"));
  n.fallocate64 = reinterpret_cast<FallocateFn>(dlsym(RTLD_NEXT, "fallocate64"));
  bool complete = n.munmap && n.mmap && n.mmap64 && n.mremap && n.madvise && n.posix_madvise &&
                  n.brk && n.sbrk && n.shmdt && n.shmat && n.ftruncate && n.ftruncate64 &&
                  n.truncate && n.truncate64 && n.fallocate && n.fallocate64;
  if (!complete) {
    g_state.store(kUnresolved, std::memory_order_release);
    return false;
  }
  g_next = n;
  g_state.store(kResolved, std::memory_order_release);
  return true;
}

inline bool Reporting() noexcept { return g_enabled.load(std::memory_order_relaxed); }

// Raw fallbacks, used only while the next definitions are being resolved.
int RawBrk(void* addr) noexcept {
  void* nb = reinterpret_cast<void*>(syscall(SYS_brk, addr));
  __curbrk = nb;  // what glibc's brk does
  if (nb < addr) {
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

void* RawSbrk(intptr_t increment) noexcept {
  if (__curbrk == nullptr && RawBrk(nullptr) < 0) return reinterpret_cast<void*>(-1);
  char* old = static_cast<char*>(__curbrk);
  if (increment == 0) return old;
  if ((increment > 0 &&
       reinterpret_cast<uintptr_t>(old) + increment < reinterpret_cast<uintptr_t>(old)) ||
      (increment < 0 && reinterpret_cast<uintptr_t>(old) < static_cast<uintptr_t>(-increment))) {
    errno = ENOMEM;
    return reinterpret_cast<void*>(-1);
  }
  if (RawBrk(old + increment) < 0) return reinterpret_cast<void*>(-1);
  return old;
}

// mmap and mmap64 are one function on x86-64; each forwards to its own next.
void* DoMmap(bool is64, void* addr, size_t length, int prot, int flags, int fd,
             off_t offset) noexcept {
  ReleaseFence fence;  // memory_events.h: reported before, in flight, after
  if (Reporting()) ReportMmap(addr, length, flags);
  if (Resolve()) {
    MmapFn next = is64 ? g_next.mmap64 : g_next.mmap;
    return next(addr, length, prot, flags, fd, offset);
  }
  if ((offset & (getpagesize() - 1)) != 0) {
    errno = EINVAL;
    return MAP_FAILED;
  }
  return reinterpret_cast<void*>(syscall(SYS_mmap, addr, length, prot, flags, fd, offset));
}

}  // namespace

absl::Status Enable() {
  if (!Resolve()) {
    return ErrnoStatus(ENOTSUP,
                       "symbols monitor: cannot resolve libc's munmap/mmap/mremap/"
                       "madvise/posix_madvise/brk/sbrk/shmdt/shmat/ftruncate/"
                       "truncate/fallocate with dlsym(RTLD_NEXT)");
  }
  void* seen = dlsym(RTLD_DEFAULT, "munmap");
  if (seen != reinterpret_cast<void*>(&::munmap)) {
    return ErrnoStatus(ENOTSUP,
                       "symbols monitor: munmap does not resolve to mrcache's "
                       "interposer in this process: libmrcache.so and the shim never "
                       "export libc's names (another tracker would patch ours instead of "
                       "libc's); an executable opts in by linking "
                       "//mrcache/monitors:symbols_monitor");
  }
  g_enabled.store(true, std::memory_order_seq_cst);
  return absl::OkStatus();
}

void Disable() { g_enabled.store(false, std::memory_order_seq_cst); }

bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

}  // namespace symbols_monitor
}  // namespace mrcache

using mrcache::symbols_monitor::g_next;
using mrcache::symbols_monitor::Reporting;
using mrcache::symbols_monitor::Resolve;

extern "C" {

int munmap(void* addr, size_t length) noexcept {
  mrcache::ReleaseFence fence;
  if (Reporting()) mrcache::ReportMunmap(addr, length);
  if (Resolve()) return g_next.munmap(addr, length);
  return static_cast<int>(syscall(SYS_munmap, addr, length));
}

void* mmap(void* addr, size_t length, int prot, int flags, int fd, off_t offset) noexcept {
  return mrcache::symbols_monitor::DoMmap(false, addr, length, prot, flags, fd, offset);
}

void* mmap64(void* addr, size_t length, int prot, int flags, int fd, off_t offset) noexcept {
  return mrcache::symbols_monitor::DoMmap(true, addr, length, prot, flags, fd, offset);
}

void* mremap(void* old_address, size_t old_size, size_t new_size, int flags, ...) noexcept {
  void* new_address = nullptr;
  if ((flags & MREMAP_FIXED) != 0) {
    va_list ap;
    va_start(ap, flags);
    new_address = va_arg(ap, void*);
    va_end(ap);
  }
  mrcache::ReleaseFence fence;
  bool reporting = Reporting();
  if (reporting) mrcache::ReportMremapBefore(old_address, old_size, new_size, flags, new_address);
  void* result;
  if (Resolve()) {
    result = g_next.mremap(old_address, old_size, new_size, flags, new_address);
  } else {
    result = reinterpret_cast<void*>(
        syscall(SYS_mremap, old_address, old_size, new_size, flags, new_address));
  }
  if (reporting) mrcache::ReportMremapMoved(old_address, old_size, result);
  return result;
}

int madvise(void* addr, size_t length, int advice) noexcept {
  mrcache::ReleaseFence fence;
  if (Reporting()) mrcache::ReportMadvise(addr, length, advice);
  if (Resolve()) return g_next.madvise(addr, length, advice);
  return static_cast<int>(syscall(SYS_madvise, addr, length, advice));
}

int posix_madvise(void* addr, size_t length, int advice) noexcept {
  if (Resolve()) return g_next.posix_madvise(addr, length, advice);
  if (advice == POSIX_MADV_DONTNEED) return 0;  // glibc: a no-op
  long r = syscall(SYS_madvise, addr, length, advice);
  return r == 0 ? 0 : errno;
}

int brk(void* addr) noexcept {
  mrcache::ReleaseFence fence;
  if (Reporting()) mrcache::ReportBrk(addr);
  if (Resolve()) return g_next.brk(addr);
  return mrcache::symbols_monitor::RawBrk(addr);
}

void* sbrk(intptr_t increment) noexcept {
  mrcache::ReleaseFence fence;
  if (Reporting()) mrcache::ReportSbrk(increment);
  if (Resolve()) return g_next.sbrk(increment);
  return mrcache::symbols_monitor::RawSbrk(increment);
}

int shmdt(const void* addr) noexcept {
  mrcache::ReleaseFence fence;
  if (Reporting()) mrcache::ReportShmdt(addr);
  if (Resolve()) return g_next.shmdt(addr);
  return static_cast<int>(syscall(SYS_shmdt, addr));
}

// shmat(SHM_REMAP) replaces what was mapped at the attach address.
void* shmat(int shmid, const void* addr, int shmflg) noexcept {
  mrcache::ReleaseFence fence;
  if (Reporting()) mrcache::ReportShmat(shmid, addr, shmflg);
  if (Resolve()) return g_next.shmat(shmid, addr, shmflg);
  return reinterpret_cast<void*>(syscall(SYS_shmat, shmid, addr, shmflg));
}

// Shrinking a file drops the page-cache pages its mappings show.
int ftruncate(int fd, off_t length) noexcept {
  mrcache::ReleaseFence fence;
  if (Reporting()) mrcache::ReportFtruncate(fd, length);
  if (Resolve()) return g_next.ftruncate(fd, length);
  return static_cast<int>(syscall(SYS_ftruncate, fd, length));
}

int ftruncate64(int fd, off_t length) noexcept {
  mrcache::ReleaseFence fence;
  if (Reporting()) mrcache::ReportFtruncate(fd, length);
  if (Resolve()) return g_next.ftruncate64(fd, length);
  return static_cast<int>(syscall(SYS_ftruncate, fd, length));
}

int truncate(const char* path, off_t length) noexcept {
  mrcache::ReleaseFence fence;
  if (Reporting()) mrcache::ReportTruncate(path, length);
  if (Resolve()) return g_next.truncate(path, length);
  return static_cast<int>(syscall(SYS_truncate, path, length));
}

int truncate64(const char* path, off_t length) noexcept {
  mrcache::ReleaseFence fence;
  if (Reporting()) mrcache::ReportTruncate(path, length);
  if (Resolve()) return g_next.truncate64(path, length);
  return static_cast<int>(syscall(SYS_truncate, path, length));
}

// Punching, zeroing, collapsing or inserting a range drops or shifts file pages.
// glibc declares fallocate without __THROW (a cancellation point): no noexcept.
int fallocate(int fd, int mode, off_t offset, off_t len) {
  mrcache::ReleaseFence fence;
  if (Reporting()) mrcache::ReportFallocate(fd, mode, offset, len);
  if (Resolve()) return g_next.fallocate(fd, mode, offset, len);
  return static_cast<int>(syscall(SYS_fallocate, fd, mode, offset, len));
}

int fallocate64(int fd, int mode, off_t offset, off_t len) {
  mrcache::ReleaseFence fence;
  if (Reporting()) mrcache::ReportFallocate(fd, mode, offset, len);
  if (Resolve()) return g_next.fallocate64(fd, mode, offset, len);
  return static_cast<int>(syscall(SYS_fallocate, fd, mode, offset, len));
}

// The loader unmaps with its own system calls, which the interposers above
// never see: dlclose reports what it unloads (loader_releases.h). Resolved
// on its own (not in Resolve()): dlsym cannot reach dlclose while resolving.
int dlclose(void* handle) noexcept {
  static std::atomic<mrcache::DlcloseFn> next{nullptr};
  mrcache::DlcloseFn close = next.load(std::memory_order_acquire);
  if (close == nullptr) {
    close = reinterpret_cast<mrcache::DlcloseFn>(dlsym(RTLD_NEXT, "dlclose"));
    if (close == nullptr) return -1;  // no libc behind us: nothing to close with
    next.store(close, std::memory_order_release);
  }
  if (!Reporting()) return close(handle);
  return mrcache::CloseReportingReleases(handle, close);
}

}  // extern "C"
