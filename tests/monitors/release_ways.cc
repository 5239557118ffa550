#include "tests/monitors/release_ways.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "mrcache/monitors/jemalloc_monitor.h"

namespace mrcache {
namespace testing {
namespace {

constexpr size_t kLen = 64 << 10;
constexpr size_t kHeapLen = 1 << 20;

#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateNewMemory(char* file, int line, uintptr_t mem, uintptr_t size);
#endif

// Addresses the kernel has just mapped: under ThreadSanitizer, forget the
// accesses made to them before. TSan resets its record of a range at the
// mmap and munmap calls it intercepts, not at shmat, shmdt, mremap or a
// system call it does not see; so a thread's access to memory mapped where
// another thread's released victim was would be reported as a race with the
// accesses to the old memory.
void FreshFromKernel(void* p, size_t len) {
#if defined(__SANITIZE_THREAD__)
  AnnotateNewMemory(const_cast<char*>(__FILE__), __LINE__, reinterpret_cast<uintptr_t>(p), len);
#else
  (void)p;
  (void)len;
#endif
}

// A step of a row that failed: the test cannot go on, so say which and why.
[[noreturn]] void Die(const char* step) {
  fprintf(stderr, "release_ways: %s failed: %s\n", step, strerror(errno));
  abort();
}

char* MapFresh(size_t len, int flags = MAP_PRIVATE | MAP_ANONYMOUS) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) Die("mmap");
  FreshFromKernel(p, len);
  memset(p, 0x5a, len);
  return static_cast<char*>(p);
}

Victim Anonymous() {
  Victim v;
  v.base = v.gone = MapFresh(kLen);
  v.base_len = v.gone_len = kLen;
  return v;
}

void UnmapAll(Victim& v) {
  if (v.base != nullptr && !(v.released && v.gone == v.base && v.gone_len == v.base_len)) {
    munmap(v.base, v.base_len);
  }
  if (v.extra != nullptr) munmap(v.extra, v.extra_len);
}

// munmap
void Munmap(Victim& v) { munmap(v.gone, v.gone_len); }

// mremap that has to move: a PROT_NONE page right after blocks growth in place.
Victim MremapMovePrepare() {
  Victim v;
  v.base = MapFresh(kLen + 4096);
  v.base_len = kLen;
  mprotect(v.base + kLen, 4096, PROT_NONE);
  v.extra = v.base + kLen;  // the guard, unmapped in cleanup
  v.extra_len = 4096;
  v.gone = v.base;
  v.gone_len = kLen;
  return v;
}
void MremapMove(Victim& v) {
  void* moved = mremap(v.base, kLen, 4 * kLen, MREMAP_MAYMOVE);
  if (moved == MAP_FAILED || moved == v.base) {
    fprintf(stderr, "mremap did not move (%p)\n", moved);
    abort();
  }
  FreshFromKernel(moved, 4 * kLen);
  v.base = static_cast<char*>(moved);
  v.base_len = 4 * kLen;
}

// mremap shrink: the upper half goes.
Victim MremapShrinkPrepare() {
  Victim v = Anonymous();
  v.gone = v.base + kLen / 2;
  v.gone_len = kLen / 2;
  return v;
}
void MremapShrink(Victim& v) {
  if (mremap(v.base, kLen, kLen / 2, 0) != v.base) Die("mremap_shrink: mremap");
  v.base_len = kLen / 2;
}

void MadviseDontneed(Victim& v) { madvise(v.gone, v.gone_len, MADV_DONTNEED); }
void MadviseFree(Victim& v) { madvise(v.gone, v.gone_len, MADV_FREE); }
Victim SharedPrepare() {
  Victim v;
  v.base = v.gone = MapFresh(kLen, MAP_SHARED | MAP_ANONYMOUS);
  v.base_len = v.gone_len = kLen;
  return v;
}
void MadviseRemove(Victim& v) {
  if (madvise(v.gone, v.gone_len, MADV_REMOVE) != 0) Die("madvise_remove: madvise");
}

// brk shrink: grow the break by whole pages, touch them, lower it again.
Victim BrkPrepare() {
  Victim v;
  uintptr_t cur = reinterpret_cast<uintptr_t>(sbrk(0));
  uintptr_t pad = (4096 - cur % 4096) % 4096;
  char* start = static_cast<char*>(sbrk(static_cast<intptr_t>(pad + kLen)));
  if (start == reinterpret_cast<char*>(-1)) Die("brk_shrink: sbrk to grow");
  v.gone = start + pad;
  FreshFromKernel(v.gone, kLen);
  v.gone_len = kLen;
  memset(v.gone, 0x5a, kLen);
  return v;
}
void BrkShrink(Victim& v) {
  if (sbrk(-static_cast<intptr_t>(v.gone_len)) == reinterpret_cast<void*>(-1))
    Die("brk_shrink: sbrk to shrink");
}
void NoCleanup(Victim&) {}

// shmdt
Victim ShmPrepare() {
  Victim v;
  v.shmid = shmget(IPC_PRIVATE, kLen, IPC_CREAT | 0600);
  if (v.shmid < 0) Die("shmdt: shmget");
  void* p = shmat(v.shmid, nullptr, 0);
  if (p == reinterpret_cast<void*>(-1)) Die("shmdt: shmat");
  FreshFromKernel(p, kLen);
  shmctl(v.shmid, IPC_RMID, nullptr);  // destroyed at the last detach
  v.gone = static_cast<char*>(p);
  v.gone_len = kLen;
  memset(v.gone, 0x5a, kLen);
  return v;
}
void Shmdt(Victim& v) {
  if (shmdt(v.gone) != 0) Die("shmdt: shmdt");
}

// mmap(MAP_FIXED) of fresh memory over the range.
void MmapFixed(Victim& v) {
  if (mmap(v.gone, v.gone_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
           0) != v.gone) {
    Die("mmap_fixed: mmap");
  }
  v.released = false;  // the fresh mapping is still ours to unmap
}

// glibc free() of a large (mmapped) chunk.
Victim GlibcFreePrepare() {
  static const bool fixed_threshold = [] {
    // Stop glibc from raising the mmap threshold after the first free.
    return mallopt(M_MMAP_THRESHOLD, 256 << 10) == 1;
  }();
  (void)fixed_threshold;
  Victim v;
  v.heap = malloc(kHeapLen);
  memset(v.heap, 0x5a, kHeapLen);
  v.gone = static_cast<char*>(v.heap);
  v.gone_len = kHeapLen;
  return v;
}
void GlibcFree(Victim& v) { free(v.heap); }

// jemalloc purge: free a large extent and force the arena to purge it.
using MallctlFn = int (*)(const char*, void*, size_t*, void*, size_t);
MallctlFn Mallctl() { return reinterpret_cast<MallctlFn>(dlsym(RTLD_DEFAULT, "mallctl")); }
void JemallocPurge(Victim& v) {
  free(v.heap);
  MallctlFn mallctl = Mallctl();
  if (mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0) != 0)
    Die("jemalloc_purge: mallctl");  // all arenas
}

// shmat(SHM_REMAP) of a SysV segment over the range.
Victim ShmatRemapPrepare() {
  Victim v = Anonymous();
  v.shmid = shmget(IPC_PRIVATE, kLen, IPC_CREAT | 0600);
  if (v.shmid < 0) Die("shmat_remap: shmget");
  return v;
}
void ShmatRemap(Victim& v) {
  if (shmat(v.shmid, v.gone, SHM_REMAP) != v.gone) Die("shmat_remap: shmat");
  FreshFromKernel(v.gone, kLen);
  shmctl(v.shmid, IPC_RMID, nullptr);  // destroyed at the detach in cleanup
}
void ShmatRemapCleanup(Victim& v) {
  if (shmdt(v.base) != 0) munmap(v.base, v.base_len);  // not attached: still anonymous
  shmctl(v.shmid, IPC_RMID, nullptr);
}

// Shared file memory: a memfd or POSIX shm object of file_len bytes, mapped
// MAP_SHARED whole; [gone, gone + gone_len) is set by the row.
Victim SharedFile(int fd, size_t file_len) {
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(file_len)) != 0)
    Die("shared file: memfd_create/shm_open or ftruncate");
  Victim v;
  void* p = mmap(nullptr, file_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) Die("shared file: mmap");
  FreshFromKernel(p, file_len);
  memset(p, 0x5a, file_len);
  v.fd = fd;
  v.base = v.gone = static_cast<char*>(p);
  v.base_len = v.gone_len = file_len;
  return v;
}
Victim MemfdPrepare() { return SharedFile(memfd_create("mrcache-release-way", MFD_CLOEXEC), kLen); }
std::string ShmName() {
  static std::atomic<int> counter{0};  // tests prepare victims from several threads
  return "/mrcache-release-way-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
}
Victim ShmOpenPrepare() {
  std::string name = ShmName();
  Victim v = SharedFile(shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600), kLen);
  v.path = "/dev/shm" + name;
  return v;
}
void SharedFileCleanup(Victim& v) {
  munmap(v.base, v.base_len);
  close(v.fd);
  if (!v.path.empty()) unlink(v.path.c_str());
}
// Drop every page, then give the file its size back: the mapping stays valid
// and shows fresh zero pages.
void FtruncateZeroAndBack(Victim& v) {
  if (ftruncate(v.fd, 0) != 0 || ftruncate(v.fd, static_cast<off_t>(v.base_len)) != 0) {
    Die("ftruncate to 0 and back");
  }
}
void TruncateZeroAndBack(Victim& v) {
  if (truncate(v.path.c_str(), 0) != 0 ||
      truncate(v.path.c_str(), static_cast<off_t>(v.base_len)) != 0) {
    Die("shm_open_truncate: truncate to 0 and back");
  }
}
// A hole in the middle of a file twice as long as the range.
Victim PunchHolePrepare() {
  Victim v = SharedFile(memfd_create("mrcache-release-way", MFD_CLOEXEC), 2 * kLen);
  v.gone = v.base + kLen / 2;
  v.gone_len = kLen;
  return v;
}
void PunchHole(Victim& v) {
  if (fallocate(v.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                static_cast<off_t>(v.gone - v.base), static_cast<off_t>(v.gone_len)) != 0) {
    Die("memfd_punch_hole: fallocate");
  }
}

// mremap(MREMAP_FIXED) of another mapping onto the range: the range's own
// pages are replaced by the moved ones.
Victim MremapOntoTargetPrepare() {
  Victim v = Anonymous();
  v.extra = MapFresh(kLen);
  v.extra_len = kLen;
  return v;
}
void MremapOntoTarget(Victim& v) {
  if (mremap(v.extra, kLen, kLen, MREMAP_MAYMOVE | MREMAP_FIXED, v.gone) != v.gone) {
    Die("mremap_onto_target: mremap");
  }
  FreshFromKernel(v.gone, kLen);
  v.extra = nullptr;  // moved into [gone, gone + kLen), which base still owns
}

// MADV_DONTNEED of 64 KiB inside a transparent huge page: the huge page is
// split and those small pages are zapped.
constexpr size_t kHuge = 2 << 20;
Victim ThpPrepare() {
  void* p = mmap(nullptr, 2 * kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) Die("madvise_dontneed_thp: mmap");
  char* raw = static_cast<char*>(p);
  char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) &
                                          ~static_cast<uintptr_t>(kHuge - 1));
  if (aligned > raw) munmap(raw, static_cast<size_t>(aligned - raw));
  munmap(aligned + kHuge, static_cast<size_t>(raw + 2 * kHuge - (aligned + kHuge)));
  madvise(aligned, kHuge, MADV_HUGEPAGE);
  FreshFromKernel(aligned, kHuge);
  memset(aligned, 0x5a, kHuge);  // the first write faults in one huge page
  Victim v;
  v.base = aligned;
  v.base_len = kHuge;
  v.gone = aligned + kHuge / 2;
  v.gone_len = kLen;
  return v;
}

// munmap through glibc's syscall() function (patched by `patch`).
void SyscallMunmap(Victim& v) { syscall(SYS_munmap, v.gone, v.gone_len); }

// munmap by an inline `syscall` instruction, which no libc code sees (as a
// runtime with its own system-call stubs, or Go, would make it).
void RawMunmap(Victim& v) {
#if defined(__x86_64__)
  long ret;
  asm volatile("syscall"
               : "=a"(ret)
               : "0"(static_cast<long>(SYS_munmap)), "D"(v.gone), "S"(v.gone_len)
               : "rcx", "r11", "memory");
  (void)ret;
#else
  syscall(SYS_munmap, v.gone, v.gone_len);
#endif
}

// dlclose: 64 KiB of a library's 4 MiB .bss buffer, released by unloading
// the library (the loader unmaps it with its own system calls).
Victim DlclosePrepare() {
  Victim v;
  v.library = dlopen(DlcloseVictimPath().c_str(), RTLD_NOW | RTLD_LOCAL);
  if (v.library == nullptr) {
    fprintf(stderr, "release_ways: dlopen(%s) failed: %s\n", DlcloseVictimPath().c_str(),
            dlerror());
    abort();
  }
  v.gone = static_cast<char*>(dlsym(v.library, "dlclose_victim_buffer"));
  if (v.gone == nullptr) Die("dlclose: dlsym(dlclose_victim_buffer)");
  v.gone_len = kLen;
  memset(v.gone, 0x5a, kLen);
  return v;
}
void Dlclose(Victim& v) {
  if (dlclose(v.library) != 0) Die("dlclose: dlclose");
  v.released = true;
}
void DlcloseCleanup(Victim& v) {
  if (!v.released) dlclose(v.library);
}

}  // namespace

std::string DlcloseVictimPath() {
  const char* relative = "tests/monitors/libdlclose_victim.so";
  // A name with a slash: dlopen takes it as a path, not a library to search for.
  if (access(relative, R_OK) == 0) return std::string("./") + relative;
  const char* srcdir = getenv("TEST_SRCDIR");
  const char* workspace = getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) {
    return std::string(srcdir) + "/" + workspace + "/" + relative;
  }
  return relative;
}

bool RefillSameAddress(Victim& v) {
  uintptr_t start = reinterpret_cast<uintptr_t>(v.gone) & ~uintptr_t{4095};
  uintptr_t end = (reinterpret_cast<uintptr_t>(v.gone) + v.gone_len + 4095) & ~uintptr_t{4095};
  void* p = mmap(reinterpret_cast<void*>(start), end - start, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == reinterpret_cast<void*>(start)) {
    FreshFromKernel(p, end - start);
    v.refill = static_cast<char*>(p);
    v.refill_len = end - start;
    return true;
  }
  if (p != MAP_FAILED) munmap(p, end - start);
  // EEXIST: the whole range must still be mapped (madvise, MAP_FIXED, purge).
  for (uintptr_t a = start; a < end; a += 4096) {
    unsigned char vec;
    if (mincore(reinterpret_cast<void*>(a), 4096, &vec) != 0) return false;  // ENOMEM: a hole
  }
  return true;
}

void CleanupVictim(const ReleaseWay& way, Victim& v) {
  way.cleanup(v);
  if (v.refill != nullptr) munmap(v.refill, v.refill_len);
  v.refill = nullptr;
}

bool GlibcMallocIsAllocator() {
  Dl_info info;
  void* malloc_fn = dlsym(RTLD_DEFAULT, "malloc");
  return malloc_fn != nullptr && dladdr(malloc_fn, &info) != 0 && info.dli_fname != nullptr &&
         strstr(info.dli_fname, "libc.so") != nullptr;
}

// mallctl alone is not enough: under ASan/TSan jemalloc is linked but the
// sanitizer's malloc is the one the process calls.
bool JemallocIsAllocator() { return jemalloc_monitor::JemallocIsProcessAllocator(); }

std::vector<ReleaseWay> AllReleaseWays() {
  std::vector<ReleaseWay> ways = {
      {"munmap", &Anonymous,
       [](Victim& v) {
         Munmap(v);
         v.released = true;
       },
       &UnmapAll},
      {"mremap_move", &MremapMovePrepare, &MremapMove, &UnmapAll},
      {"mremap_shrink", &MremapShrinkPrepare, &MremapShrink, &UnmapAll},
      {"madvise_dontneed", &Anonymous, &MadviseDontneed, &UnmapAll},
      {"madvise_free", &Anonymous, &MadviseFree, &UnmapAll},
      {"madvise_remove", &SharedPrepare, &MadviseRemove, &UnmapAll},
      {"brk_shrink", &BrkPrepare, &BrkShrink, &NoCleanup},
      {"shmdt", &ShmPrepare, &Shmdt, &NoCleanup},
      {"mmap_fixed", &Anonymous, &MmapFixed, &UnmapAll},
      {"shmat_remap", &ShmatRemapPrepare, &ShmatRemap, &ShmatRemapCleanup},
      {"memfd_ftruncate", &MemfdPrepare, &FtruncateZeroAndBack, &SharedFileCleanup},
      {"shm_open_ftruncate", &ShmOpenPrepare, &FtruncateZeroAndBack, &SharedFileCleanup},
      {"shm_open_truncate", &ShmOpenPrepare, &TruncateZeroAndBack, &SharedFileCleanup},
      {"memfd_punch_hole", &PunchHolePrepare, &PunchHole, &SharedFileCleanup},
      {"mremap_onto_target", &MremapOntoTargetPrepare, &MremapOntoTarget, &UnmapAll},
      {"madvise_dontneed_thp", &ThpPrepare, &MadviseDontneed, &UnmapAll},
  };
  ways.push_back({"dlclose", &DlclosePrepare, &Dlclose, &DlcloseCleanup});
  if (JemallocIsAllocator()) {
    ways.push_back({"jemalloc_purge", &GlibcFreePrepare, &JemallocPurge, &NoCleanup});
  } else if (GlibcMallocIsAllocator()) {  // not under a sanitizer's allocator
    ways.push_back({"glibc_free", &GlibcFreePrepare, &GlibcFree, &NoCleanup});
  }
  ways.push_back({"syscall_munmap", &Anonymous,
                  [](Victim& v) {
                    SyscallMunmap(v);
                    v.released = true;
                  },
                  &UnmapAll});
  ways.push_back({"raw_munmap", &Anonymous,
                  [](Victim& v) {
                    RawMunmap(v);
                    v.released = true;
                  },
                  &UnmapAll});
  return ways;
}

const ReleaseWay* FindReleaseWay(const std::string& name) {
  static const std::vector<ReleaseWay>* ways = new std::vector<ReleaseWay>(AllReleaseWays());
  for (const ReleaseWay& w : *ways) {
    if (name == w.name) return &w;
  }
  return nullptr;
}

}  // namespace testing
}  // namespace mrcache
