#include "tests/monitors/release_ways.h"

#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mrcache {
namespace testing {
namespace {

constexpr size_t kLen = 64 << 10;
constexpr size_t kHeapLen = 1 << 20;

char* MapFresh(size_t len, int flags = MAP_PRIVATE | MAP_ANONYMOUS) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    abort();
  }
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
  if (mremap(v.base, kLen, kLen / 2, 0) != v.base) abort();
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
  if (madvise(v.gone, v.gone_len, MADV_REMOVE) != 0) abort();
}

// brk shrink: grow the break by whole pages, touch them, lower it again.
Victim BrkPrepare() {
  Victim v;
  uintptr_t cur = reinterpret_cast<uintptr_t>(sbrk(0));
  uintptr_t pad = (4096 - cur % 4096) % 4096;
  char* start = static_cast<char*>(sbrk(static_cast<intptr_t>(pad + kLen)));
  if (start == reinterpret_cast<char*>(-1)) abort();
  v.gone = start + pad;
  v.gone_len = kLen;
  memset(v.gone, 0x5a, kLen);
  return v;
}
void BrkShrink(Victim& v) {
  if (sbrk(-static_cast<intptr_t>(v.gone_len)) == reinterpret_cast<void*>(-1)) abort();
}
void NoCleanup(Victim&) {}

// shmdt
Victim ShmPrepare() {
  Victim v;
  v.shmid = shmget(IPC_PRIVATE, kLen, IPC_CREAT | 0600);
  if (v.shmid < 0) abort();
  void* p = shmat(v.shmid, nullptr, 0);
  if (p == reinterpret_cast<void*>(-1)) abort();
  shmctl(v.shmid, IPC_RMID, nullptr);  // destroyed at the last detach
  v.gone = static_cast<char*>(p);
  v.gone_len = kLen;
  memset(v.gone, 0x5a, kLen);
  return v;
}
void Shmdt(Victim& v) {
  if (shmdt(v.gone) != 0) abort();
}

// mmap(MAP_FIXED) of fresh memory over the range.
void MmapFixed(Victim& v) {
  if (mmap(v.gone, v.gone_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
           -1, 0) != v.gone) {
    abort();
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
MallctlFn Mallctl() {
  return reinterpret_cast<MallctlFn>(dlsym(RTLD_DEFAULT, "mallctl"));
}
void JemallocPurge(Victim& v) {
  free(v.heap);
  MallctlFn mallctl = Mallctl();
  if (mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0) != 0) abort();  // all arenas
}

// raw syscall(SYS_munmap), which no libc entry point sees.
void RawMunmap(Victim& v) { syscall(SYS_munmap, v.gone, v.gone_len); }

}  // namespace

bool RefillSameAddress(Victim& v) {
  uintptr_t start = reinterpret_cast<uintptr_t>(v.gone) & ~uintptr_t{4095};
  uintptr_t end = (reinterpret_cast<uintptr_t>(v.gone) + v.gone_len + 4095) & ~uintptr_t{4095};
  void* p = mmap(reinterpret_cast<void*>(start), end - start, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == reinterpret_cast<void*>(start)) {
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

bool JemallocIsAllocator() {
  MallctlFn mallctl = Mallctl();
  if (mallctl == nullptr) return false;
  const char* version = nullptr;
  size_t len = sizeof(version);
  return mallctl("version", &version, &len, nullptr, 0) == 0;
}

std::vector<ReleaseWay> AllReleaseWays() {
  std::vector<ReleaseWay> ways = {
      {"munmap", &Anonymous, [](Victim& v) { Munmap(v); v.released = true; }, &UnmapAll},
      {"mremap_move", &MremapMovePrepare, &MremapMove, &UnmapAll},
      {"mremap_shrink", &MremapShrinkPrepare, &MremapShrink, &UnmapAll},
      {"madvise_dontneed", &Anonymous, &MadviseDontneed, &UnmapAll},
      {"madvise_free", &Anonymous, &MadviseFree, &UnmapAll},
      {"madvise_remove", &SharedPrepare, &MadviseRemove, &UnmapAll},
      {"brk_shrink", &BrkPrepare, &BrkShrink, &NoCleanup},
      {"shmdt", &ShmPrepare, &Shmdt, &NoCleanup},
      {"mmap_fixed", &Anonymous, &MmapFixed, &UnmapAll},
  };
  if (JemallocIsAllocator()) {
    ways.push_back({"jemalloc_purge", &GlibcFreePrepare, &JemallocPurge, &NoCleanup});
  } else if (GlibcMallocIsAllocator()) {  // not under a sanitizer's allocator
    ways.push_back({"glibc_free", &GlibcFreePrepare, &GlibcFree, &NoCleanup});
  }
  ways.push_back(
      {"raw_munmap", &Anonymous, [](Victim& v) { RawMunmap(v); v.released = true; }, &UnmapAll});
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
