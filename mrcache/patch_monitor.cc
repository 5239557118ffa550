#include "mrcache/patch_monitor.h"

#include <dlfcn.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "mrcache/errno_status.h"
#include "mrcache/memory_events.h"
#include "mrcache/release_ranges.h"

extern "C" void* __curbrk;

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

int HandleMunmap(void* addr, size_t length) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportMunmap(addr, length);
  return static_cast<int>(syscall(SYS_munmap, addr, length));
}

int HandleMadvise(void* addr, size_t length, int advice) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportMadvise(addr, length, advice);
  return static_cast<int>(syscall(SYS_madvise, addr, length, advice));
}

int HandleShmdt(const void* addr) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportShmdt(addr);
  return static_cast<int>(syscall(SYS_shmdt, addr));
}

// glibc 2.36 brk: __curbrk = syscall(brk, addr); ENOMEM if it stayed below addr.
int HandleBrk(void* addr) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportBrk(addr);
  void* new_break = reinterpret_cast<void*>(syscall(SYS_brk, addr));
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
  return reinterpret_cast<void*>(syscall(SYS_mmap, addr, length, prot, flags, fd, offset));
}

// mremap is variadic; on x86-64 the fifth argument (new_address, read only with
// MREMAP_FIXED) arrives in r8 either way, so a 5-argument handler receives it.
void* HandleMremap(void* old_address, size_t old_size, size_t new_size, int flags,
                   void* new_address) noexcept {
  ReleaseFence fence;
  bool reporting = Reporting();
  if (reporting) ReportMremapBefore(old_address, old_size, new_size, flags, new_address);
  void* result = reinterpret_cast<void*>(
      syscall(SYS_mremap, old_address, old_size, new_size, flags, new_address));
  if (reporting) ReportMremapMoved(old_address, old_size, result);
  return result;
}

// shmat(SHM_REMAP) replaces what was mapped at the attach address.
void* HandleShmat(int shmid, const void* addr, int shmflg) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportShmat(shmid, addr, shmflg);
  return reinterpret_cast<void*>(syscall(SYS_shmat, shmid, addr, shmflg));
}

// Shrinking, punching or shifting a file drops the pages its mappings show.
// (ftruncate64, truncate64 and fallocate64 are the same entries on x86-64.)
int HandleFtruncate(int fd, off_t length) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportFtruncate(fd, length);
  return static_cast<int>(syscall(SYS_ftruncate, fd, length));
}

int HandleTruncate(const char* path, off_t length) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportTruncate(path, length);
  return static_cast<int>(syscall(SYS_truncate, path, length));
}

// glibc's fallocate is a cancellation point; the handler makes the plain
// system call, so a patched fallocate is not one (documented in the header).
int HandleFallocate(int fd, int mode, off_t offset, off_t len) noexcept {
  ReleaseFence fence;
  if (Reporting()) ReportFallocate(fd, mode, offset, len);
  return static_cast<int>(syscall(SYS_fallocate, fd, mode, offset, len));
}

// ---- trampolines ----

constexpr size_t kSlotSize = 16;  // ff 25 00 00 00 00 <8-byte target> + 2 pad

struct TrampolinePage {
  uint8_t* base = nullptr;
  size_t used = 0;
};
constexpr int kMaxTrampolinePages = 16;
TrampolinePage g_pages[kMaxTrampolinePages];  // guarded by PatchMutex
struct SlotOwner {
  void* entry;
  uint8_t* slot;
};
constexpr int kMaxSlots = 256;
SlotOwner g_slot_owners[kMaxSlots];
int g_num_slot_owners = 0;

std::mutex& PatchMutex() {
  static std::mutex* m = new std::mutex;
  return *m;
}

bool WithinRel32(const void* from_next, const void* to) {
  intptr_t d = reinterpret_cast<intptr_t>(to) - reinterpret_cast<intptr_t>(from_next);
  return d >= INT32_MIN && d <= INT32_MAX;
}

// Maps a page within reach of `entry`, searching outwards in 16 MiB steps.
uint8_t* MapPageNear(void* entry) {
  long page = getpagesize();
  uintptr_t e = reinterpret_cast<uintptr_t>(entry) & ~static_cast<uintptr_t>(page - 1);
  for (uintptr_t d = uintptr_t{16} << 20; d < (uintptr_t{1} << 31) - (uintptr_t{64} << 20);
       d += uintptr_t{16} << 20) {
    for (int sign = -1; sign <= 1; sign += 2) {
      if (sign < 0 && e < d) continue;
      uintptr_t want = sign < 0 ? e - d : e + d;
      void* p = mmap(reinterpret_cast<void*>(want), page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (p == MAP_FAILED) continue;
      if (p != reinterpret_cast<void*>(want)) {  // kernels without NOREPLACE
        munmap(p, page);
        continue;
      }
      return static_cast<uint8_t*>(p);
    }
  }
  return nullptr;
}

// A slot that jumps to `handler`, reachable from `entry`. Requires PatchMutex.
uint8_t* SlotFor(void* entry, void* handler) {
  for (int i = 0; i < g_num_slot_owners; ++i) {
    if (g_slot_owners[i].entry == entry) {
      uint64_t target;
      memcpy(&target, g_slot_owners[i].slot + 6, 8);
      if (target == reinterpret_cast<uint64_t>(handler)) return g_slot_owners[i].slot;
    }
  }
  if (g_num_slot_owners == kMaxSlots) return nullptr;
  size_t page = static_cast<size_t>(getpagesize());
  uint8_t* next = reinterpret_cast<uint8_t*>(entry) + 5;
  TrampolinePage* tp = nullptr;
  for (TrampolinePage& p : g_pages) {
    if (p.base != nullptr && p.used + kSlotSize <= page && WithinRel32(next, p.base) &&
        WithinRel32(next, p.base + page)) {
      tp = &p;
      break;
    }
  }
  if (tp == nullptr) {
    for (TrampolinePage& p : g_pages) {
      if (p.base == nullptr) {
        p.base = MapPageNear(entry);
        if (p.base == nullptr) return nullptr;
        tp = &p;
        break;
      }
    }
  }
  if (tp == nullptr) return nullptr;
  uint8_t* slot = tp->base + tp->used;
  if (mprotect(tp->base, page, PROT_READ | PROT_WRITE) != 0) return nullptr;
  static const uint8_t kJmpRipIndirect[6] = {0xff, 0x25, 0, 0, 0, 0};
  memcpy(slot, kJmpRipIndirect, 6);
  uint64_t target = reinterpret_cast<uint64_t>(handler);
  memcpy(slot + 6, &target, 8);
  slot[14] = slot[15] = 0xcc;
  mprotect(tp->base, page, PROT_READ | PROT_EXEC);
  tp->used += kSlotSize;
  g_slot_owners[g_num_slot_owners++] = {entry, slot};
  return slot;
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

void WriteCodeWord(void* entry, uint64_t value) {
  asm volatile("movq %1, (%0)" : : "r"(entry), "r"(value) : "memory");
}

// Writes 8 bytes at an 8-aligned code address with one atomic store.
absl::Status StoreCode(const char* name, void* entry, uint64_t value) {
  long page = getpagesize();
  void* page_start =
      reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(entry) & ~static_cast<uintptr_t>(page - 1));
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
};

const Target kTargets[] = {
    {"munmap", {0xb8, 0x0b, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleMunmap)},
    {"madvise", {0xb8, 0x1c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleMadvise)},
    {"shmdt", {0xb8, 0x43, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleShmdt)},
    {"brk", {0xb8, 0x0c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleBrk)},
    {"mmap", {0x41, 0x89, 0xca, 0x41, 0xf7, 0xc1, 0xff, 0x0f},
     reinterpret_cast<void*>(&HandleMmap)},
    {"mremap", {0x48, 0x83, 0xec, 0x58, 0x4c, 0x89, 0x44, 0x24},
     reinterpret_cast<void*>(&HandleMremap)},
    {"shmat", {0xb8, 0x1e, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleShmat)},
    {"ftruncate", {0xb8, 0x4d, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleFtruncate)},
    {"truncate", {0xb8, 0x4c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x48},
     reinterpret_cast<void*>(&HandleTruncate)},
    // cmpb $0, __libc_single_threaded(%rip): the 4-byte displacement is this
    // build's; another glibc 2.36 build is refused, never mispatched.
    {"fallocate", {0x80, 0x3d, 0x21, 0xe8, 0x0d, 0x00, 0x00, 0x49},
     reinterpret_cast<void*>(&HandleFallocate)},
};
constexpr int kNumTargets = sizeof(kTargets) / sizeof(kTargets[0]);
PatchSite g_sites[kNumTargets];  // guarded by the installation in monitor.cc

}  // namespace

absl::Status ApplyPatch(const char* name, void* entry, const uint8_t (&expected)[8],
                        void* handler, PatchSite* site) {
#if !defined(__x86_64__)
  return ErrnoStatus(ENOTSUP, std::string("patch monitor: ") + name + ": x86-64 only");
#endif
  std::lock_guard<std::mutex> lock(PatchMutex());
  if (entry == nullptr) {
    return ErrnoStatus(ENOTSUP, std::string("patch monitor: ") + name + " not found in libc");
  }
  if (reinterpret_cast<uintptr_t>(entry) % 8 != 0) {
    return ErrnoStatus(ENOTSUP, std::string("patch monitor: ") + name +
                                    " entry is not 8-byte aligned; refusing a non-atomic patch");
  }
  uint8_t current[8];
  uint64_t word = ReadCodeWord(entry);
  memcpy(current, &word, 8);
  if (memcmp(current, expected, 8) != 0) {
    std::string why = StartsWithJump(current)
                          ? " already starts with a jump (patched by another library, or "
                            "patched twice)"
                          : " is not the expected glibc 2.36 code";
    return ErrnoStatus(ENOTSUP, std::string("patch monitor: refusing to patch ") + name + ": entry" +
                                    why + " (found " + Hex(current, 8) + ", expected " +
                                    Hex(expected, 8) + ")");
  }
  uint8_t* slot = SlotFor(entry, handler);
  if (slot == nullptr) {
    return ErrnoStatus(ENOTSUP, std::string("patch monitor: no trampoline within 2 GiB of ") +
                                    name);
  }
  uint8_t patched[8];
  memcpy(patched, current, 8);
  int32_t rel = static_cast<int32_t>(reinterpret_cast<intptr_t>(slot) -
                                     reinterpret_cast<intptr_t>(entry) - 5);
  patched[0] = 0xe9;
  memcpy(patched + 1, &rel, 4);
  uint64_t value;
  memcpy(&value, patched, 8);
  absl::Status s = StoreCode(name, entry, value);
  if (!s.ok()) return s;
  site->name = name;
  site->entry = entry;
  memcpy(site->original, current, 8);
  site->applied = true;
  return absl::OkStatus();
}

absl::Status RemovePatch(PatchSite* site) {
  if (!site->applied) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(PatchMutex());
  uint8_t code[8];
  uint64_t word = ReadCodeWord(site->entry);
  memcpy(code, &word, 8);
  if (code[0] != 0xe9 || memcmp(code + 5, site->original + 5, 3) != 0) {
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
  return ErrnoStatus(ENOTSUP, "patch monitor: not available under ThreadSanitizer (glibc "
                              "releases exiting threads' stacks after TSan's thread teardown)");
#endif
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  if (libc == nullptr) return ErrnoStatus(ENOTSUP, "patch monitor: libc.so.6 is not loaded");
  absl::Status status;
  int applied = 0;
  for (; applied < kNumTargets; ++applied) {
    const Target& t = kTargets[applied];
    status = ApplyPatch(t.name, dlsym(libc, t.name), t.expected, t.handler, &g_sites[applied]);
    if (!status.ok()) break;
  }
  dlclose(libc);
  if (!status.ok()) {
    while (applied-- > 0) RemovePatch(&g_sites[applied]).IgnoreError();
    return status;
  }
  g_enabled.store(true, std::memory_order_seq_cst);
  return absl::OkStatus();
}

void Disable() {
  g_enabled.store(false, std::memory_order_seq_cst);
  for (PatchSite& site : g_sites) {
    absl::Status s = RemovePatch(&site);
    if (!s.ok()) fprintf(stderr, "mrcache: %s\n", std::string(s.message()).c_str());
  }
}

bool Enabled() { return g_enabled.load(std::memory_order_relaxed); }

void LockForFork() { PatchMutex().lock(); }
void UnlockAfterFork() { PatchMutex().unlock(); }

}  // namespace patch_monitor
}  // namespace mrcache
